"""snapshot / restore of a live Open Interpreter session, and the ``interpreter.snapshot()`` convenience.

Layers: ``trace`` = ``interpreter.messages`` (LMC dicts, stored as they are), ``state`` = settings of
the interpreter, its computer and its llm (API keys never stored), ``cells`` = every code cell the
computer ran with its output and class, ``world`` = the repository's working tree.

Kernel variables cannot be serialised. ``replay="pure"`` starts fresh kernels and re-runs the cells
the classifier (and the effects ledger) do not mark irreversible; the :class:`RestoreReport` lists
what came back and what did not.
"""

from __future__ import annotations

import copy
import hashlib
import os
import sys
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agentsnap_core.errors import AgentSnapError, InvalidInput, InvalidRefName
from agentsnap_core.layers.effects import IRREVERSIBLE, Effects
from agentsnap_core.layers.effects_ledger import KeyState, Ledger
from agentsnap_core.repository.repo import check_ref_name
from agentsnap_core.stores.base import ANY, RefUpdate

from ._classify import CommandClassifier
from ._session import REPLAY_MODES, Session, merge_chunks
from ._state import capture_settings, cells_from_messages, plain_messages, restore_settings

if TYPE_CHECKING:
    from agentsnap_core import Repo, Snapshot

__all__ = ["RestoreReport", "attach", "capture_layers", "is_interpreter", "restore", "restore_layers", "snapshot"]

STATE_FORMAT = "agentsnap-openinterpreter"
CELLS_FORMAT = "agentsnap-openinterpreter-cells"
NOT_STORED = ["llm.api_key (redacted: the restored interpreter keeps its own key or environment)",
              "llm.completions (a function: re-supply your model client)"]


def is_interpreter(obj: Any) -> bool:
    """True for an ``OpenInterpreter`` (checked without importing the framework, which takes seconds)."""
    mod = sys.modules.get("interpreter.core.core")
    return mod is not None and isinstance(obj, mod.OpenInterpreter)


def _framework_version() -> str:
    try:
        from importlib.metadata import version

        return version("open-interpreter")
    except Exception:
        return "unknown"


# ---------------------------------------------------------------------------------------------- report
@dataclass
class RestoreReport:
    """What a restore brought back and what it did not.

    Attributes:
        snapshot: the snapshot id.
        interpreter: the restored interpreter.
        replay: ``none`` or ``pure``.
        messages: how many messages came back.
        settings: setting names restored.
        kept: settings the interpreter kept (secrets, functions, redacted values).
        cells: one record per recorded cell: ``language``, ``kind``, ``status`` (``replayed`` /
            ``skipped`` / ``failed`` / ``not replayed``), ``reason``, ``binds``, ``output_matches``.
        world: the working-tree changes (``None`` when the world was not restored).
        notes: anything else a user should know (cwd mismatch, cells read from messages, ...).
    """

    snapshot: str
    interpreter: Any
    replay: str
    messages: int = 0
    settings: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)
    cells: list[dict[str, Any]] = field(default_factory=list)
    world: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)

    def _with(self, *statuses: str) -> list[dict[str, Any]]:
        return [c for c in self.cells if c["status"] in statuses]

    @property
    def replayed(self) -> list[dict[str, Any]]:
        return self._with("replayed")

    @property
    def skipped(self) -> list[dict[str, Any]]:
        return self._with("skipped", "not replayed")

    @property
    def failed(self) -> list[dict[str, Any]]:
        return self._with("failed")

    @property
    def restored_names(self) -> list[str]:
        """Python names the replay bound again."""
        return sorted({n for c in self.replayed if c["language"] in ("python", "py") for n in c["binds"]})

    @property
    def missing_names(self) -> list[str]:
        """Python names bound by cells that were not (successfully) replayed, and not rebound by a later one."""
        back = set(self.restored_names)
        return sorted({n for c in self.skipped + self.failed if c["language"] in ("python", "py") for n in c["binds"]} - back)

    def to_dict(self) -> dict[str, Any]:
        return {
            "snapshot": self.snapshot, "replay": self.replay, "messages": self.messages, "settings": self.settings,
            "kept": self.kept, "cells": self.cells, "world": self.world, "notes": self.notes,
            "restored_names": self.restored_names, "missing_names": self.missing_names,
        }

    def __str__(self) -> str:
        lines = [f"restored {self.snapshot[:12]}: {self.messages} messages, {len(self.settings)} settings"]
        if self.world is not None:
            w = self.world.get("changes", self.world) or {}
            counts = {k: len(v) for k, v in w.items() if isinstance(v, list)}
            lines.append("  world: " + (", ".join(f"{n} {k}" for k, n in counts.items() if n) or "no changes"))
        else:
            lines.append("  world: not restored")
        lines.append(f"  kernels: fresh; replay={self.replay!r}: {len(self.replayed)} cells re-run, "
                     f"{len(self.skipped)} not re-run, {len(self.failed)} failed")
        for i, c in enumerate(self.cells):
            first = (c["code"].strip().splitlines() or [""])[0][:60]
            differs = "; its output differs from the recorded one" if c.get("output_matches") is False else ""
            lines.append(f"    [{i}] {c['status']:<12} {c['language']:<7} {c['kind']:<12} {first!r} ({c['reason']}{differs})")
        if self.restored_names:
            lines.append("  variables back: " + ", ".join(self.restored_names))
        if self.missing_names:
            lines.append("  variables NOT back (their cells were not re-run): " + ", ".join(self.missing_names))
        lines += [f"  not restored: {k}" for k in self.kept]
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)


# ---------------------------------------------------------------------------------------------- attach
def attach(
    interpreter: Any,
    repo: Repo | None = None,
    *,
    classifier: CommandClassifier | None = None,
    effects: bool | Effects = True,
    on_divergence: str = "run",
    replay: str = "none",
) -> Any:
    """Record what ``interpreter`` runs and give it ``.snapshot(name)`` / ``.checkout(name)``.

    Args:
        interpreter: an ``OpenInterpreter``.
        repo: the agentsnap repository (its working tree is the interpreter's world).
        classifier: decides which cells are irreversible (default :class:`CommandClassifier`).
        effects: guard irreversible cells with the repository's effects ledger (or with this
            :class:`agentsnap_core.layers.effects.Effects` session).
        on_divergence: what a guarded cell does when the command at a recorded position differs:
            ``run`` (default: it is a new command), ``replay`` or ``raise``.
        replay: the default for ``checkout`` and ``Repo.restore_into``: ``none`` or ``pure``.

    Returns the same interpreter. Attaching twice keeps the first session (and updates ``repo``).
    """
    if not is_interpreter(interpreter):
        raise InvalidInput(f"attach() takes an OpenInterpreter, not {type(interpreter).__name__}")
    if repo is not None:
        _check_repo(repo)
    existing = getattr(interpreter, "_agentsnap", None)
    if isinstance(existing, Session):
        if repo is not None and repo is not existing.repo:
            existing.rebind(repo)
        if classifier is not None:
            existing.classifier = classifier
        return interpreter
    for name in ("snapshot", "checkout"):
        if hasattr(type(interpreter), name):
            raise AgentSnapError(f"{type(interpreter).__name__} already has a {name!r} attribute; use the module functions")
    session = Session(interpreter, repo, classifier=classifier, effects=effects, on_divergence=on_divergence, replay=replay)
    if interpreter.messages:  # code that ran before attach(): keep it as cells read from the messages
        session.cells = _classified(session, cells_from_messages(interpreter.messages))
        held = _held_conversation(interpreter)
        if held:  # a snapshot taken before attach() named this conversation: go on with it
            session.set_conversation(held)
    interpreter._agentsnap = session

    def _snapshot(name: str = "", *, world: bool = True, tag: str | None = None) -> Snapshot:
        if not isinstance(name, str):
            raise InvalidInput(f"interpreter.snapshot() takes a name or message (a str), not {type(name).__name__}")
        if session.repo is None:
            raise AgentSnapError("attach(interpreter, repo) with a repository before calling interpreter.snapshot()")
        if tag is None and name:
            try:
                tag = check_ref_name(name)
            except InvalidRefName:
                tag = None  # a free-text message, not a name
        return snapshot(interpreter, session.repo, name, world=world, tag=tag)

    def _checkout(spec: str, *, replay: str | None = None, world: bool = True) -> RestoreReport:
        if session.repo is None:
            raise AgentSnapError("attach(interpreter, repo) with a repository before calling interpreter.checkout()")
        return restore(session.repo, spec, interpreter, replay=replay or session.replay, world=world)

    _snapshot.__doc__ = "Snapshot this interpreter (messages, settings, cells, working tree); a plain name also tags it."
    _checkout.__doc__ = "Restore a snapshot (tag, branch, id) into this interpreter; returns a RestoreReport."
    interpreter.snapshot = _snapshot
    interpreter.checkout = _checkout
    return interpreter


def _check_repo(repo: Any) -> None:
    from agentsnap_core.repository.repo import Repo

    if not isinstance(repo, Repo):
        raise InvalidInput(f"repo must be an agentsnap_core.Repo (Repo.open(path)), not {type(repo).__name__}")


def _classified(session: Session, cells: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    tainted: set[str] = set()
    defined: set[str] = set()
    for cell in cells:
        v = session.classifier(cell["language"], cell["code"], tainted, defined - tainted)
        cell = {**cell, "kind": v.kind, "reason": v.reason, "binds": list(v.binds), "status": "run", "key": None}
        (tainted if v.kind == IRREVERSIBLE else defined).update(v.binds)
        out.append(cell)
    return out


# ---------------------------------------------------------------------------------------------- capture
def capture_layers(interpreter: Any) -> dict[str, Any]:
    """The layers of a live interpreter: ``trace``, ``state`` and ``cells`` (plain data)."""
    session = getattr(interpreter, "_agentsnap", None)
    settings, redacted, skipped = capture_settings(interpreter)
    if isinstance(session, Session):
        cells, recorded, conversation = copy.deepcopy(session.cells), True, session.conversation
    else:
        cells, recorded, conversation = cells_from_messages(interpreter.messages), False, _loose_conversation(interpreter)
    state = {
        "format": STATE_FORMAT,
        "v": 1,
        "framework": f"open-interpreter {_framework_version()}",
        "settings": settings,
        "redacted": redacted,
        "skipped": skipped,
        "cwd": os.getcwd(),
        "conversation": conversation,
    }
    return {
        "trace": plain_messages(interpreter.messages),
        "state": state,
        "cells": {"format": CELLS_FORMAT, "v": 1, "recorded": recorded, "cells": cells},
    }


def snapshot(
    interpreter: Any, repo: Repo, message: str = "", *, world: bool = True, tag: str | None = None
) -> Snapshot:
    """Snapshot ``interpreter`` (and, with ``world``, the repository's working tree) into ``repo``.

    With ``tag`` the snapshot is also named (taking a name again moves it; the older snapshot stays in
    the log). Returns the :class:`agentsnap_core.Snapshot`.
    """
    if not is_interpreter(interpreter):
        raise InvalidInput(f"snapshot() takes an OpenInterpreter, not {type(interpreter).__name__}")
    if tag is not None:
        check_ref_name(tag)
    _check_repo(repo)
    session = getattr(interpreter, "_agentsnap", None)
    busy = session.busy() if isinstance(session, Session) else (
        "the interpreter is responding; snapshot between chat() calls" if getattr(interpreter, "responding", False) else None)
    if busy:
        raise AgentSnapError(busy)
    snap = repo.capture(interpreter, message, agent="openinterpreter", world_=world)
    if tag is not None:
        repo.update_refs([RefUpdate(f"refs/tags/{tag}", snap.id, ANY)], f"openinterpreter: {tag}")
    return snap


# ---------------------------------------------------------------------------------------------- restore
def restore(
    repo: Repo,
    spec: str,
    interpreter: Any = None,
    *,
    replay: str = "none",
    world: bool = True,
    classifier: CommandClassifier | None = None,
    trust_settings: bool = False,
) -> RestoreReport:
    """Restore snapshot ``spec`` into ``interpreter`` (a new ``OpenInterpreter`` when None).

    Args:
        repo: the repository holding the snapshot.
        spec: a tag, branch, ``HEAD~N`` or (short) id.
        interpreter: the interpreter to load into; its model client (``llm.completions``) and API key stay.
        replay: ``none`` (kernels start empty) or ``pure`` (re-run cells not marked irreversible).
        world: also make the working tree equal the snapshot's (undoable: ``refs/undo/restore``).
        classifier: classifier for a newly attached interpreter.
        trust_settings: also take the stored settings that widen what the interpreter does without asking or where
            it sends the API key (``auto_run`` on, a less careful ``safe_mode``, another ``llm.api_base``); without
            it the interpreter keeps its own and ``report.notes`` says so.

    Returns a :class:`RestoreReport` (``report.interpreter`` is the interpreter).
    """
    _check_repo(repo)
    if replay not in REPLAY_MODES:
        raise InvalidInput(f"replay must be one of {', '.join(REPLAY_MODES)}, not {replay!r}")
    if interpreter is not None and not is_interpreter(interpreter):
        raise InvalidInput(f"restore() loads into an OpenInterpreter, not {type(interpreter).__name__}")
    snap = repo.get(spec)
    state = repo.read_layer(snap, "state")
    if not isinstance(state, dict) or state.get("format") != STATE_FORMAT:
        raise AgentSnapError(f"snapshot {snap.id[:12]} was not taken from an Open Interpreter session")
    _check_layers({name: repo.read_layer(snap, name) for name in ("trace", "state", "cells")})  # before any write
    if interpreter is None:
        try:
            from interpreter import OpenInterpreter
        except ImportError as exc:
            raise AgentSnapError(
                f"cannot import Open Interpreter ({exc}); pip install 'agentsnap-openinterpreter[interpreter]'"
            ) from None
        interpreter = OpenInterpreter(disable_telemetry=True)
    changes = None
    if world:
        if "world" not in snap.layers:
            raise AgentSnapError(f"snapshot {snap.id[:12]} has no working tree; restore with world=False")
        changes = repo.restore(snap.id)
    attach(interpreter, repo, classifier=classifier)
    session: Session = interpreter._agentsnap
    session.rebind(repo)
    before = session.replay, session.trust_settings
    session.replay, session.trust_settings = replay, trust_settings
    try:
        repo.restore_into(interpreter, snap.id)
    finally:
        session.replay, session.trust_settings = before
    report: RestoreReport = session.last_report
    report.world = changes
    return report


def _check_layers(layers: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any], dict[str, Any]]:
    trace, state, cells = layers.get("trace"), layers.get("state"), layers.get("cells")
    if not isinstance(state, dict) or state.get("format") != STATE_FORMAT:
        raise AgentSnapError("this snapshot was not taken from an Open Interpreter session")
    if state.get("v") != 1:
        raise AgentSnapError(f"Open Interpreter state format v{state.get('v')} is newer than this adapter; upgrade it")
    if not isinstance(trace, list) or not all(isinstance(m, dict) for m in trace):
        raise AgentSnapError("the snapshot's trace is not a list of messages")
    if cells is None:
        cells = {"format": CELLS_FORMAT, "v": 1, "recorded": False, "cells": cells_from_messages(trace)}
    if not isinstance(cells, dict) or cells.get("format") != CELLS_FORMAT or not isinstance(cells.get("cells"), list):
        raise AgentSnapError("the snapshot's cells layer is malformed")
    return trace, state, cells


def restore_layers(interpreter: Any, layers: dict[str, Any], context: dict[str, Any]) -> RestoreReport:
    """Load layers into ``interpreter`` (the ``agentsnap_restore`` hook); replay as its session says."""
    trace, state, cells_layer = _check_layers(layers)  # all checks before any change
    snap = context.get("snapshot")
    if not isinstance(getattr(interpreter, "_agentsnap", None), Session):
        attach(interpreter, context.get("repo"))
    session: Session = interpreter._agentsnap
    report = RestoreReport(snapshot=snap.id if snap is not None else "", interpreter=interpreter, replay=session.replay)

    interpreter.computer.terminate()  # kernels from after the snapshot must not leak into it
    interpreter.computer._has_imported_computer_api = False  # fresh kernels: import it again (as reset() does)
    interpreter.computer._has_imported_skills = False
    interpreter.messages = plain_messages(trace)
    report.messages = len(trace)
    report.settings, kept, guarded = restore_settings(interpreter, state.get("settings", {}), session.trust_settings)
    report.kept = sorted(set(kept) - {"llm.api_key"}) + NOT_STORED + [
        f"{name} (not plain data when snapshotted: not stored, the interpreter keeps its own)"
        for name in state.get("skipped") or [] if isinstance(name, str)]
    report.notes += guarded
    # the snapshot's conversation (an older adapter stored none without attach(): one derived from the snapshot),
    # never the live one's: its ledger positions would hand this conversation's commands that one's recorded outputs
    session.set_conversation(state.get("conversation") or _conversation_of(snap))
    cells = cells_layer["cells"]
    if not cells_layer.get("recorded"):
        cells = _classified(session, cells)
        report.notes.append("cells were read from the messages (the interpreter was not attached when it ran them)")
    session.cells = copy.deepcopy(cells)
    if state.get("cwd") and os.getcwd() != state["cwd"]:
        report.notes.append(f"the snapshot's kernels ran in {state['cwd']}; new kernels start in {os.getcwd()}")
    report.cells = _replay(session, cells, session.replay, context.get("repo"))
    session.last_report = report
    return report


def _held_conversation(interpreter: Any) -> str | None:
    """The conversation id a snapshot of this not yet attached interpreter gave its current messages, if any."""
    held = getattr(interpreter, "_agentsnap_conversation", None)
    if isinstance(held, tuple) and len(held) == 2 and held[0] is interpreter.messages:
        return str(held[1])
    return None


def _loose_conversation(interpreter: Any) -> str:
    """The conversation id of an interpreter that is not attached: one per message list (``reset()`` and
    ``chat([...])`` replace the list, and so start another), kept on the interpreter for a later ``attach()``."""
    held = _held_conversation(interpreter)
    if held is None:
        held = uuid.uuid4().hex
        interpreter._agentsnap_conversation = (interpreter.messages, held)
    return held


def _conversation_of(snap: Any) -> str:
    """A conversation id for a snapshot that stored none (taken by an older adapter without attach()): the same for
    every restore of that snapshot."""
    if snap is None or not getattr(snap, "id", None):
        return uuid.uuid4().hex
    return hashlib.sha256(f"agentsnap-openinterpreter:conversation:{snap.id}".encode()).hexdigest()[:32]


def _ledger_done(repo: Repo | None, key: str | None) -> bool:
    if repo is None or not key:
        return False
    st = Ledger.for_repo(repo).sync().keys.get(key)
    return isinstance(st, KeyState) and st.status in ("done", "intent") and (st.intent or {}).get("cls") == IRREVERSIBLE


def _replay(session: Session, cells: list[dict[str, Any]], mode: str, repo: Repo | None) -> list[dict[str, Any]]:
    """Re-run what may be re-run. A snapshot is data: a cell runs only when the class stored with it, the
    ledger *and* this process's classifier all say it is not irreversible."""
    out: list[dict[str, Any]] = []
    tainted: set[str] = set()
    defined: set[str] = set()
    for cell in cells:
        rec = {k: cell.get(k) for k in ("language", "code", "kind", "reason", "step", "key")}
        rec["binds"] = list(cell.get("binds") or [])
        rec["output_matches"] = None
        here = session.classifier(str(cell.get("language", "")), str(cell.get("code", "")), tainted, defined - tainted)
        (tainted if here.kind == IRREVERSIBLE else defined).update(here.binds)
        if mode == "none":
            rec.update(status="not replayed", reason="replay='none'")
        elif cell.get("kind") == IRREVERSIBLE or _ledger_done(repo, cell.get("key")):
            rec.update(status="skipped", reason=f"irreversible: {cell.get('reason')}")
        elif here.kind == IRREVERSIBLE:
            rec.update(status="skipped", reason=f"irreversible here: {here.reason} (stored as {cell.get('kind')})")
        elif cell.get("status") in ("failed", "interrupted", "running", "refused"):
            rec.update(status="skipped", reason=f"it {cell.get('status')} when first run")
        else:
            try:
                got = merge_chunks(session.run_unguarded(cell["language"], cell["code"]))
            except Exception as exc:  # the kernel could not start, the language is missing, ...
                rec.update(status="failed", reason=f"{type(exc).__name__}: {exc}"[:300])
                out.append(rec)
                continue
            was = merge_chunks(list(cell.get("output") or []))
            rec["output_matches"] = _text(got) == _text(was)
            new_error = "Traceback (most recent call last)" in _text(got) and "Traceback" not in _text(was)
            rec["status"] = "failed" if new_error else "replayed"
            if new_error:
                rec["reason"] = _text(got).strip().splitlines()[-1][:300]
        out.append(rec)
    return out


def _text(chunks: list[dict[str, Any]]) -> str:
    return "".join(str(c.get("content", "")) for c in chunks if c.get("format") == "output")
