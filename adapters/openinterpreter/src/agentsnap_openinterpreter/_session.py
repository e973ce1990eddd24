"""What the computer ran: a recorder around ``interpreter.computer.run``, guarded by the effects ledger.

Open Interpreter 0.4.3 sends every code block through ``interpreter.computer.run(language, code,
stream=True)`` (``interpreter/core/respond.py``, "CODE IS RUN HERE"), a shortcut for
``Computer.terminal.run`` (``interpreter/core/computer/computer.py``). :func:`attach` shadows that
method with an instance attribute, so the framework's code is untouched: each call becomes a recorded
*cell* (language, code, output, class), and an irreversible cell is an effect in the agentsnap
ledger - a restored or forked interpreter that issues the same command at the same position in the
conversation gets the recorded output back instead of running it again.
"""

from __future__ import annotations

import ast
import copy
import sys
import textwrap
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from agentsnap_core.errors import AgentSnapError, InvalidInput
from agentsnap_core.layers.effects import IRREVERSIBLE, EffectCall, Effects, register_tool

from ._classify import CommandClassifier

if TYPE_CHECKING:
    from agentsnap_core import Repo

__all__ = ["Session", "session_of", "merge_chunks", "TOOL_PREFIX"]

TOOL_PREFIX = "openinterpreter.run"
REPLAY_MODES = ("none", "pure")
DEFERRED_NOTE = (
    "[agentsnap] this command has side effects and this branch defers them: it was not run. "
    "It runs once when the branch is merged (agentsnap effects apply)."
)


def merge_chunks(chunks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Join streamed output chunks like ``Terminal.run(stream=False)`` does (active-line chunks dropped)."""
    out: list[dict[str, Any]] = []
    for chunk in chunks:
        if chunk.get("format") == "active_line":
            continue
        if out and out[-1].get("type") == chunk.get("type") and out[-1].get("format") == chunk.get("format") \
                and isinstance(out[-1].get("content"), str) and isinstance(chunk.get("content"), str):
            out[-1]["content"] += chunk["content"]
        else:
            out.append(copy.deepcopy(dict(chunk)))
    return out


class Session:
    """The agentsnap side of one interpreter: its cell log, classifier and effects session.

    Created by :func:`agentsnap_openinterpreter.attach`; reach it as ``session_of(interpreter)``.
    """

    def __init__(
        self,
        interpreter: Any,
        repo: Repo | None = None,
        *,
        classifier: CommandClassifier | None = None,
        effects: bool | Effects = True,
        on_divergence: str = "run",
        replay: str = "none",
    ) -> None:
        if replay not in REPLAY_MODES:
            raise InvalidInput(f"replay must be one of {', '.join(REPLAY_MODES)}, not {replay!r}")
        self.interpreter = interpreter
        self.repo = repo
        self.classifier = classifier or CommandClassifier()
        self.on_divergence = on_divergence
        self.replay = replay
        #: take stored settings that widen what runs without asking (auto_run, safe_mode, llm.api_base): restore()
        self.trust_settings = False
        self.cells: list[dict[str, Any]] = []
        self.conversation = uuid.uuid4().hex
        self.last_report: Any = None
        #: ledger errors (divergence, blocked, in doubt) that Open Interpreter turned into cell output
        self.effect_errors: list[AgentSnapError] = []
        self._own_fx = not isinstance(effects, Effects)
        #: guard with the repository's ledger once there is one (``effects=True`` and no Effects given)
        self._want_fx = self._own_fx and bool(effects)
        if isinstance(effects, Effects):
            self.fx: Effects | None = effects
        else:
            self.fx = Effects(repo, on_divergence=on_divergence) if repo is not None and effects else None
        self._step: int | None = None
        #: chat generators and cells in progress (``responding`` stays True after a ``chat(stream=True)``)
        self.chatting = 0
        self.running = 0
        self._original_run = interpreter.computer.run
        interpreter.computer.run = self.run
        self._original_streaming_chat = interpreter._streaming_chat
        interpreter._streaming_chat = self._streaming_chat
        self._original_reset = interpreter.reset
        interpreter.reset = self.reset
        self._register()

    # ------------------------------------------------------------------ identity
    @property
    def tool_name(self) -> str:
        """The ledger's tool name: one per conversation, so a new chat never replays another chat's command."""
        return f"{TOOL_PREFIX}:{self.conversation[:16]}"

    def set_conversation(self, conversation: str) -> None:
        self.conversation = conversation
        self._step = None
        self._register()

    def _register(self) -> None:
        register_tool(self.tool_name, self.run_unguarded)

    def _streaming_chat(self, *args: Any, **kwargs: Any) -> Iterator[Any]:
        """Wraps ``OpenInterpreter._streaming_chat``: counts the chats in progress. Open Interpreter 0.4.3's
        ``chat(stream=True)`` never sets ``responding`` back to False; the end of the stream does it here."""
        self.chatting += 1
        try:
            yield from self._original_streaming_chat(*args, **kwargs)
        finally:
            self.chatting -= 1
            if self.chatting == 0:
                self.interpreter.responding = False

    def reset(self) -> Any:
        """Wraps ``OpenInterpreter.reset`` (kernels terminated, messages cleared): a new conversation, so the
        cells of the old one are neither replayed into a snapshot taken after it nor matched in the ledger."""
        result = self._original_reset()
        self.cells = []
        self.set_conversation(uuid.uuid4().hex)
        return result

    def busy(self) -> str | None:
        """Why a snapshot now would catch the session half-way, or None."""
        if self.chatting:
            return "the interpreter is responding; snapshot between chat() calls"
        if self.running:
            return "a code cell is running (interpreter.computer.run); snapshot when it has finished"
        return None

    def rebind(self, repo: Repo | None) -> None:
        """Use ``repo``'s ledger from now on (after a restore, whose branch may have moved)."""
        self.repo = repo
        if repo is not None and self._want_fx:  # also when attach() had no repository: effects=True asked for a ledger
            self.fx = Effects(repo, on_divergence=self.on_divergence)
        self._step = None

    # ------------------------------------------------------------------ running
    def run_unguarded(self, language: str, code: str) -> list[dict[str, Any]]:
        """Run code on the computer without recording or guarding it (replay, deferred effects)."""
        return list(self._original_run(language, code, stream=False, display=False))

    def tainted(self) -> set[str]:
        """Names bound by irreversible Python cells (a pure-looking cell using them is not pure)."""
        return {n for c in self.cells if c.get("kind") == IRREVERSIBLE for n in c.get("binds", [])}

    def defined(self) -> set[str]:
        """Names bound by pure Python cells (their functions were checked: calling them stays pure)."""
        return {n for c in self.cells if c.get("kind") != IRREVERSIBLE for n in c.get("binds", [])} - self.tainted()

    def run(self, language: str, code: str, stream: bool = False, display: bool = False) -> Any:
        """Stands in for ``Computer.run``: classify, record and (when irreversible) guard one cell."""
        if is_plumbing(self.interpreter, language, code):  # the framework's own sync code, not a cell
            return self._original_run(language, code, stream=stream, display=display)
        messages = self.interpreter.messages
        last = messages[-1] if messages else {}
        verdict = self.classifier(language, code, self.tainted(), self.defined())
        cell: dict[str, Any] = {
            "language": str(language).lower(),
            "code": code,
            "step": len(messages),
            "origin": "chat" if last.get("type") == "code" and str(last.get("content", "")).strip() == code.strip() else "direct",
            "kind": verdict.kind,
            "reason": verdict.reason,
            "binds": list(verdict.binds),
            "status": "running",
            "key": None,
            "output": [],
        }
        self.cells.append(cell)
        call: EffectCall | None = None
        if self.fx is not None and verdict.kind == IRREVERSIBLE:
            if self._step != cell["step"]:
                self.fx.begin_step(cell["step"])
                self._step = cell["step"]
            try:
                call = self.fx.call(
                    self.tool_name,
                    {"language": cell["language"], "code": code},
                    kind=IRREVERSIBLE,
                    simulate=lambda **_: [{"type": "console", "format": "output", "content": DEFERRED_NOTE}],
                )
            except AgentSnapError as exc:  # respond() shows it to the model as output; keep it for the caller
                cell["status"] = "refused"
                cell["output"] = [{"type": "console", "format": "output", "content": str(exc)}]
                self.effect_errors.append(exc)
                raise
            cell["key"] = call.key
            if not call.run:  # replayed from the ledger, or deferred on this branch
                cell["status"] = "ledger-replayed" if call.status == "replayed" else call.status
                cell["output"] = merge_chunks(list(call.result or []))
                out = copy.deepcopy(cell["output"])
                return iter(out) if stream else out
        if stream:
            return self._stream(language, code, display, cell, call)
        self.running += 1
        try:
            result = list(self._original_run(language, code, stream=False, display=display))
        except Exception as exc:
            self._finish(cell, call, [], exc)
            raise
        finally:
            self.running -= 1
        self._finish(cell, call, result, None)
        return result

    def _stream(self, language: str, code: str, display: bool, cell: dict[str, Any], call: EffectCall | None) -> Iterator[Any]:
        chunks: list[dict[str, Any]] = []
        self.running += 1
        try:
            for chunk in self._original_run(language, code, stream=True, display=display):
                chunks.append(copy.deepcopy(chunk))
                yield chunk
        except GeneratorExit:
            cell["status"] = "interrupted"  # the ledger keeps an intent without result: in doubt
            cell["output"] = merge_chunks(chunks)
            raise
        except Exception as exc:
            self._finish(cell, call, chunks, exc)
            raise
        finally:
            self.running -= 1
        self._finish(cell, call, chunks, None)

    @staticmethod
    def _finish(cell: dict[str, Any], call: EffectCall | None, chunks: list[dict[str, Any]], exc: Exception | None) -> None:
        cell["output"] = merge_chunks(chunks)
        cell["status"] = "run" if exc is None else "failed"
        if call is not None and call.run:
            if exc is None:
                call.result = cell["output"]
                call.__exit__(None, None, None)
            else:
                call.__exit__(type(exc), exc, None)


#: what ``respond()`` runs after each Python cell when ``sync_computer`` is on (interpreter/core/respond.py, 0.4.3)
_SYNC_BACK = """
import json
computer_dict = computer.to_dict()
if '_hashes' in computer_dict:
    computer_dict.pop('_hashes')
if "system_message" in computer_dict:
    computer_dict.pop("system_message")
print(json.dumps(computer_dict))
"""


def is_plumbing(interpreter: Any, language: str, code: str) -> bool:
    """True for code Open Interpreter itself runs around a cell: the ``sync_computer`` round trip (on in OS
    mode) and the computer-API import. Checked by exact shape, so a model cannot hide a command in it."""
    if str(language).lower() != "python":
        return False
    terminal = sys.modules.get("interpreter.core.computer.terminal.terminal")
    if code == getattr(terminal, "import_computer_api_code", None):
        return True
    if not getattr(interpreter, "sync_computer", False):
        return False
    if textwrap.dedent(code).strip() == _SYNC_BACK.strip():
        return True
    try:  # import json\ncomputer.load_dict(json.loads('''{...}'''))
        body = ast.parse(code).body
    except SyntaxError:
        return False
    if len(body) != 2 or ast.unparse(body[0]) != "import json" or not isinstance(body[1], ast.Expr):
        return False
    call = body[1].value
    return (
        isinstance(call, ast.Call) and ast.unparse(call.func) == "computer.load_dict" and len(call.args) == 1
        and not call.keywords and isinstance(call.args[0], ast.Call) and ast.unparse(call.args[0].func) == "json.loads"
        and len(call.args[0].args) == 1 and isinstance(call.args[0].args[0], ast.Constant)
        and isinstance(call.args[0].args[0].value, str)
    )


def session_of(interpreter: Any) -> Session:
    """The :class:`Session` :func:`attach` gave ``interpreter``."""
    session = getattr(interpreter, "_agentsnap", None)
    if not isinstance(session, Session):
        raise AgentSnapError("this interpreter is not attached; call agentsnap_openinterpreter.attach(interpreter, repo)")
    return session
