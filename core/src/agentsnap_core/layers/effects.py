"""Exactly-once tool calls across restore and fork: ``@effect``, :class:`Effects` and deferred effects.

A guarded call is identified by its **position in the lineage** - the branch's lineage, the agent's
step, the tool and the ordinal of this tool's call within the step - not by its arguments, so a
restored agent that regenerates slightly different arguments still lands on the recorded call. The
arguments' digest is kept beside it: a mismatch is an :class:`EffectDivergence`.

Before a guarded tool runs, an *intent* entry is durable in the ledger; its result follows. A later
call at the same position gets the recorded result back without running the tool; an intent without
a result raises :class:`EffectInDoubt` until resolved (``agentsnap effects resolve KEY --done/--retry``).

Forks made by :meth:`Repo.fork` inherit the ledger and carry a policy for irreversible effects:
``allow`` (run), ``block`` (raise :class:`EffectBlocked`) or ``defer`` (the default: record the call
and return a simulated result; :func:`apply_deferred` runs it for real, once, on merge or promotion).
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import inspect
import os
import re
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agentsnap_core.errors import AgentSnapError, InvalidInput
from agentsnap_core.format.encoding import pack
from agentsnap_core.layers.effects_ledger import (
    POLICIES,
    Deferred,
    EffectKeyMissing,
    KeyState,
    Ledger,
    append_forks,
    position_key,
    user_key,
    verify_ledger,
)

if TYPE_CHECKING:
    from agentsnap_core.repository.repo import Repo

__all__ = [
    "IDEMPOTENT",
    "IRREVERSIBLE",
    "PURE",
    "EffectAlreadyApplied",
    "EffectBlocked",
    "EffectCall",
    "EffectDivergence",
    "EffectInDoubt",
    "EffectKeyMissing",
    "Effects",
    "LedgerLost",
    "apply_deferred",
    "current",
    "effect",
    "merge_notes",
    "on_merge",
    "resolve",
    "set_policy",
    "verify_ledger",
    "wrap_tool",
]

PURE, IDEMPOTENT, IRREVERSIBLE = "pure", "idempotent", "irreversible"
CLASSES = (PURE, IDEMPOTENT, IRREVERSIBLE)
DIVERGENCE_POLICIES = ("raise", "replay", "run")
#: argument names that are framework plumbing, not part of a call's identity
PLUMBING = frozenset({"run_manager", "callbacks", "config", "cancellation_token", "tool_call_id", "runtime"})


class EffectDivergence(AgentSnapError):
    """The call at a recorded position has different arguments than the recorded one."""

    def __init__(self, key: str, recorded: dict[str, Any], new: dict[str, Any]) -> None:
        self.key, self.recorded, self.new = key, recorded, new
        super().__init__(
            f"effect {key} was already performed with other arguments (recorded {_short_args(recorded)}, "
            f"now {_short_args(new)}); the recorded result stands. Use on_divergence='replay' to get it back, "
            "or 'run' to perform the new call as a separate effect"
        )


class EffectInDoubt(AgentSnapError):
    """An intent was recorded but no result: the tool may or may not have done its work."""

    def __init__(self, key: str, intent: dict[str, Any] | None = None) -> None:
        from agentsnap_core.layers.effects_ledger import _alive

        self.key, self.intent = key, intent or {}
        self.in_flight = bool(self.intent) and _alive(self.intent)
        who = f" (pid {self.intent.get('pid')} on {self.intent.get('host')})" if self.intent.get("pid") else ""
        if self.in_flight:
            msg = f"effect {key} is running right now{who}; wait for it and call again to get its result"
        else:
            msg = (f"effect {key} started{who} but its result was never recorded; check whether it happened, then "
                   f"run 'agentsnap effects resolve {key} --done' or '... --retry'")
        super().__init__(msg)


class LedgerLost(EffectInDoubt):
    """The ledger holds fewer entries than a snapshot recorded: it was truncated or deleted, so what ran is unknown."""

    def __init__(self, tool: str, have: int, snapshot: str, had: int) -> None:
        self.key, self.intent, self.in_flight = tool, {}, False
        self.have, self.snapshot, self.had = have, snapshot, had
        AgentSnapError.__init__(
            self,
            f"the effects ledger holds {have} entries but snapshot {snapshot[:12]} recorded {had}: it was truncated "
            f"or deleted, so {tool} may already have run; refusing to run it again. Put the store's effects.sqlite "
            "back from a backup, or check by hand and start a new ledger deliberately ('agentsnap effects verify')",
        )


class EffectBlocked(AgentSnapError):
    """An irreversible effect was called in a branch whose fork policy is ``block``."""

    def __init__(self, key: str, lineage: str) -> None:
        self.key, self.lineage = key, lineage
        super().__init__(
            f"effect {key} is blocked: branch lineage {lineage} was forked with effects policy 'block'; merge the "
            "branch, or change it with 'agentsnap effects policy BRANCH allow|defer'"
        )


class EffectAlreadyApplied(AgentSnapError):
    """A deferred effect (or the same effect from another branch) was already applied."""

    def __init__(self, key: str) -> None:
        self.key = key
        super().__init__(f"effect {key} was already applied; nothing was run again")


# ---------------------------------------------------------------------------------------------- helpers
#: the memory address in a default ``repr`` (``<app.Client object at 0x7f...>``): a new one in every process
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def _plain(value: Any, depth: int = 0) -> Any:
    """A msgpack-able copy of ``value`` (objects become their ``model_dump()`` or ``repr``, without the memory
    address a default ``repr`` holds: the same client object passed after a restore is the same argument)."""
    if isinstance(value, int) and not isinstance(value, bool) and not -(1 << 63) <= value < 1 << 64:
        return repr(value)  # (msgpack's integers are 64-bit)
    if value is None or isinstance(value, (bool, int, float, str, bytes)):
        return value
    if depth > 32:
        return _ADDRESS.sub("", repr(value))
    if isinstance(value, dict):
        return {str(k) if not isinstance(k, (str, int, float, bytes)) else k: _plain(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v, depth + 1) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted((_plain(v, depth + 1) for v in value), key=repr)
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        try:
            return _plain(dump(), depth + 1)
        except Exception:
            pass
    return _ADDRESS.sub("", repr(value))


def _writing(led: Ledger) -> AbstractContextManager[Any]:
    """A writer session around a large result's object and the ledger entry naming it: a ``gc --prune now`` in
    between would take the object (the entry would name a missing one, and a replay could not return it)."""
    return led.repo.writer_sessions.session() if led.repo is not None else nullcontext()


def args_digest(args: dict[str, Any]) -> str:
    return hashlib.sha256(pack(_plain(args))).hexdigest()


def _short_args(rec: dict[str, Any]) -> str:
    args = rec.get("args")
    text = repr(args) if args is not None else f"digest {str(rec.get('digest'))[:12]}"
    return text if len(text) <= 120 else text[:117] + "..."


def _bind(sig: inspect.Signature | None, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    if sig is None:
        out: dict[str, Any] = {f"_{i}": a for i, a in enumerate(args)}
        out.update(kwargs)
        return {k: v for k, v in out.items() if k not in PLUMBING}
    try:
        bound = sig.bind(*args, **kwargs)
    except TypeError:
        return _bind(None, args, kwargs)
    bound.apply_defaults()
    out = {}
    for name, value in bound.arguments.items():
        if name in PLUMBING or name == "self":
            continue
        param = sig.parameters[name]
        if param.kind is inspect.Parameter.VAR_KEYWORD:
            out.update({k: v for k, v in value.items() if k not in PLUMBING})
        else:
            out[name] = value
    return out


def _call_args(fn: Callable[..., Any], args: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
    """Turn a recorded argument map back into ``(args, kwargs)`` for ``fn``."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        sig = None
    if sig is None:
        pos = [args[k] for k in sorted((k for k in args if k.startswith("_") and k[1:].isdigit()), key=lambda k: int(k[1:]))]
        return pos, {k: v for k, v in args.items() if not (k.startswith("_") and k[1:].isdigit())}
    pos_args: list[Any] = []
    kw: dict[str, Any] = {}
    rest = dict(args)
    for name, p in sig.parameters.items():
        if name not in rest:
            continue
        value = rest.pop(name)
        if p.kind is inspect.Parameter.POSITIONAL_ONLY:
            pos_args.append(value)
        elif p.kind is inspect.Parameter.VAR_POSITIONAL:
            pos_args.extend(value)
        else:
            kw[name] = value
    kw.update(rest)
    return pos_args, kw


def _storable(value: Any) -> tuple[Any, bool]:
    """``(msgpack-able value, lossy)``."""
    try:
        pack(value)
        return value, False
    except (AgentSnapError, RecursionError):  # (a value that holds itself: the tool's work is done, keep its result)
        return _plain(value), True


#: tools known to this process by name (for applying deferred effects)
_TOOLS: dict[str, Callable[..., Any]] = {}


def tool_names() -> set[str]:
    """Names of the tools registered in this process (deferred effects of other tools cannot run here)."""
    return set(_TOOLS)
_current: ContextVar[Effects | None] = ContextVar("agentsnap_effects", default=None)


def register_tool(name: str, fn: Callable[..., Any]) -> None:
    """Make ``fn`` the implementation :func:`apply_deferred` runs for deferred calls of ``name``."""
    _TOOLS[name] = fn


def current() -> Effects | None:
    """The effects session active in this context (``with Effects(repo): ...``), or None."""
    return _current.get()


@dataclass
class ToolSpec:
    """How one tool is guarded."""

    name: str
    kind: str = IRREVERSIBLE
    key: str | Callable[..., str] | None = None
    simulate: Callable[..., Any] | None = None
    guard: bool | None = None
    on_divergence: str | None = None
    record_args: bool = True
    sig: inspect.Signature | None = None

    def __post_init__(self) -> None:
        if self.kind not in CLASSES:
            raise InvalidInput(f"effect class must be one of {', '.join(CLASSES)}, not {self.kind!r}")
        if self.on_divergence is not None and self.on_divergence not in DIVERGENCE_POLICIES:
            raise InvalidInput(f"on_divergence must be one of {', '.join(DIVERGENCE_POLICIES)}")

    @property
    def guarded(self) -> bool:
        return self.kind == IRREVERSIBLE if self.guard is None else self.guard


@dataclass
class EffectCall:
    """One guarded call; the context-manager form hands it to the caller.

    Attributes:
        key: the idempotency key.
        run: True when the caller must perform the work now (then set ``result``).
        status: ``run`` / ``replayed`` / ``deferred`` / ``unguarded``.
        result: the recorded, simulated, or (after the work) real result.
    """

    key: str
    run: bool
    status: str
    result: Any = None
    divergence: dict[str, Any] | None = None
    _session: Effects | None = field(default=None, repr=False)
    _claim: tuple[str, int] | None = field(default=None, repr=False)  #: (tool, ordinal) it holds in the step

    def __enter__(self) -> EffectCall:
        return self

    def __exit__(self, et: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        if not self.run or self._session is None:
            return
        if et is None:
            self._session._record_result(self.key, self.result)
            return
        if isinstance(exc, Exception):  # failed: the position stays taken, so a replay of the step makes the same
            self._session._record_error(self.key, exc)  # calls in the same order (a retry takes the next one, and
            return  # a replay of that retry matches the position where the call did happen first: _claim_ordinal)
        # a BaseException (crash, KeyboardInterrupt) leaves the intent alone: the call is in doubt, and its position
        # is free again: the agent's retry in this step meets it (EffectInDoubt), never runs at a new position
        if self._claim is not None:
            self._session._release(*self._claim)


class Effects:
    """An effects session: the ledger of a repository seen from one branch, plus the agent's step.

    Args:
        repo: the repository whose store holds the ledger.
        branch: the branch the agent runs on (default: the worktree's current branch, else ``main``).
        on_divergence: ``raise`` (default), ``replay`` or ``run`` - see :class:`EffectDivergence`.
    """

    def __init__(self, repo: Repo, branch: str | None = None, *, on_divergence: str = "raise") -> None:
        if on_divergence not in DIVERGENCE_POLICIES:
            raise InvalidInput(f"on_divergence must be one of {', '.join(DIVERGENCE_POLICIES)}")
        self.repo = repo
        self.ledger = Ledger.for_repo(repo)
        self.branch = branch or repo.current_branch() or "main"
        self.on_divergence = on_divergence
        self.step_no = 0
        self._ordinals: dict[str, set[int]] = {}
        self._claim_lock = threading.Lock()
        self.divergences: list[dict[str, Any]] = []
        self.events: list[tuple[str, str]] = []  #: (status, key) of every guarded call, in order
        self._tokens: list[Any] = []
        self._bound: dict[str, int] = {}  #: snapshot id -> ledger entries it recorded

    # ------------------------------------------------------------------ context
    def __enter__(self) -> Effects:
        self._tokens.append(_current.set(self))
        return self

    def __exit__(self, *exc: object) -> None:
        _current.reset(self._tokens.pop())

    @property
    def lineage(self) -> str:
        return self.ledger.sync().lineage_of(self.branch)

    def begin_step(self, step: int) -> None:
        """Start step ``step`` of the agent (ordinals count from 0 again). Restore the step with the agent."""
        self.step_no = int(step)
        self._ordinals = {}

    @contextmanager
    def step(self, step: int) -> Iterator[Effects]:
        """``with fx.step(n): ...`` - run one agent step with its position set."""
        self.begin_step(step)
        token = _current.set(self)
        try:
            yield self
        finally:
            _current.reset(token)

    # ------------------------------------------------------------------ public forms
    def effect(self, fn: Callable[..., Any] | None = None, **options: Any) -> Any:
        """Decorator bound to this session (see module-level :func:`effect`)."""
        return effect(fn, session=self, **options)

    def call(self, tool: str, args: dict[str, Any] | None = None, **options: Any) -> EffectCall:
        """Context-manager form: ``with fx.call("send", {"to": to}) as c: if c.run: c.result = send(to)``."""
        spec = ToolSpec(tool, **options)
        bound = dict(args or {})
        if not spec.guarded:
            return EffectCall("", True, "unguarded")
        return self._begin(spec, bound, lambda: spec.simulate(**bound) if spec.simulate else None)

    def resolve(self, key: str, action: str, result: Any = None) -> dict[str, Any]:
        return resolve(self.repo, key, action, result, ledger=self.ledger)

    # ------------------------------------------------------------------ engine
    def _begin(self, spec: ToolSpec, bound: dict[str, Any], simulate: Callable[[], Any]) -> EffectCall:
        ukey = spec.key(**bound) if callable(spec.key) else spec.key
        digest = args_digest(bound)
        ordinal = self._claim_ordinal(spec.name, digest)
        try:
            call = self._begin_at(spec, bound, simulate, ukey, digest, ordinal)
        except BaseException:  # in doubt, diverged, blocked...: a retry in this step must meet the same answer,
            self._release(spec.name, ordinal)  # not take the next position and run there
            raise
        if call.run:
            call._claim = (spec.name, ordinal)
        return call

    def _begin_at(self, spec: ToolSpec, bound: dict[str, Any], simulate: Callable[[], Any], ukey: Any, digest: str,
                  ordinal: int) -> EffectCall:
        recorded_args = _plain(bound) if spec.record_args else None
        policy = spec.on_divergence or self.on_divergence
        led = self.ledger
        override: str | None = None
        divergence: dict[str, Any] | None = None
        self._check_intact(led.sync(), spec.name)
        while True:
            led.sync()
            lineage = led.lineage_of(self.branch)
            pos = None if ukey or override else (self.step_no, spec.name, ordinal)
            key = override or (user_key(str(ukey)) if ukey else position_key(lineage, self.step_no, spec.name, ordinal))
            found = led.lookup(lineage, key, pos)
            if isinstance(found, KeyState) and found.key != key and found.status in ("failed", "retry"):
                found = None  # the parent's failed attempt is no fact for this fork
            if isinstance(found, KeyState) and found.status == "intent" and spec.kind != IDEMPOTENT:
                raise EffectInDoubt(found.key, found.intent)
            if isinstance(found, KeyState) and found.status == "done" or isinstance(found, Deferred):
                rec = found.intent if isinstance(found, KeyState) else found.entry
                if rec is not None and rec.get("digest") != digest:
                    divergence = self._diverged(found.key, rec, digest, recorded_args, policy)
                    if policy == "run":
                        override = f"{key}!{digest[:16]}"
                        continue
                value = self._replay_value(found)
                status = "replayed" if isinstance(found, KeyState) else "deferred"
                self.events.append((status, found.key))
                return EffectCall(found.key, False, status, value, divergence)
            base = {
                "key": key,
                "lineage": lineage,
                "pos": list(pos) if pos else None,
                "tool": spec.name,
                "cls": spec.kind,
                "digest": digest,
                "args": recorded_args,
                "branch": self.branch,
            }
            fork_policy = led.policy_of(lineage)
            if spec.kind == IRREVERSIBLE and fork_policy == "block":
                raise EffectBlocked(key, lineage)
            if spec.kind == IRREVERSIBLE and fork_policy == "defer":
                simulated, _ = _storable(simulate())
                if simulated is None:
                    simulated = {"deferred": True, "key": key, "tool": spec.name}
                if led.try_append({"kind": "defer", **base, "args": _plain(bound), "simulated": simulated}) is None:
                    continue
                self.events.append(("deferred", key))
                return EffectCall(key, False, "deferred", simulated, divergence)
            if led.try_append({"kind": "intent", **base, "pid": os.getpid(), "host": socket.gethostname()}) is None:
                continue
            self.events.append(("run", key))
            return EffectCall(key, True, "run", None, divergence, self)

    def _check_intact(self, led: Ledger, tool: str) -> None:
        """Refuse to run a tool when the ledger is shorter than a snapshot of this branch (or HEAD) recorded."""
        tips = {self.repo.refs.get_ref(f"refs/heads/{self.branch}"), self.repo.head()[1]}
        for oid in sorted(t for t in tips if t):
            if oid not in self._bound:
                try:
                    rec = self.repo.manifest(oid)["layers"].get("effects")
                except AgentSnapError:
                    rec = None
                count = rec.get("count") if isinstance(rec, dict) else None
                self._bound[oid] = count if isinstance(count, int) else 0
            if len(led.entries) < self._bound[oid]:
                raise LedgerLost(tool, len(led.entries), oid, self._bound[oid])

    def _claim_ordinal(self, tool: str, digest: str) -> int:
        """The ordinal of this call of ``tool`` in the current step.

        Calls are matched to recorded positions by their arguments first, then in order, so tools that an
        agent runs in parallel (in any order) still land on their own recorded calls after a restore.
        """
        with self._claim_lock:
            claimed = self._ordinals.setdefault(tool, set())
            led = self.ledger.sync()
            lineage = led.lineage_of(self.branch)
            o, failed, not_done = 0, None, set()
            while True:
                found = led.lookup(lineage, position_key(lineage, self.step_no, tool, o), (self.step_no, tool, o))
                if found is None:
                    break
                rec = found.intent if isinstance(found, KeyState) else found.entry
                did_fail = isinstance(found, KeyState) and found.status in ("failed", "retry")
                if did_fail:
                    not_done.add(o)
                if o not in claimed and rec is not None and rec.get("digest") == digest:
                    if not did_fail:
                        claimed.add(o)
                        return o
                    failed = o if failed is None else failed  # (a call that did happen matches first)
                o += 1
            if failed is not None:  # the same call failed here before: it may run again, at the same position
                claimed.add(failed)
                return failed
            # another call: never at a position where a call failed (the agent retried it at the next one; a
            # regenerated retry must meet the call that happened there, not run anew in the failed one's place)
            o = 0
            while o in claimed or o in not_done:
                o += 1
            claimed.add(o)
            return o

    def _release(self, tool: str, ordinal: int) -> None:
        """Give back a position claimed by a call that did not complete at it (see :meth:`EffectCall.__exit__`)."""
        with self._claim_lock:
            self._ordinals.get(tool, set()).discard(ordinal)

    def _replay_value(self, found: KeyState | Deferred) -> Any:
        if isinstance(found, KeyState):
            return self.ledger.get_result(found.outcome)
        if found.status == "applied" and found.target:
            st = self.ledger.keys.get(found.target)
            if st is not None and st.status == "done":
                return self.ledger.get_result(st.outcome)
        return found.entry.get("simulated")

    def _diverged(
        self, key: str, rec: dict[str, Any], digest: str, args: Any, policy: str
    ) -> dict[str, Any]:
        recorded = {"digest": rec.get("digest"), "args": rec.get("args")}
        new = {"digest": digest, "args": args}
        info = {"key": key, "recorded": recorded, "new": new, "policy": policy}
        self.divergences.append(info)
        led = self.ledger
        if not any(n.get("key") == key and n.get("digest") == digest for n in led.notes):
            led.append({"kind": "note", "note": "divergence", "key": key, "digest": digest, "args": args, "policy": policy})
        if policy == "raise":
            raise EffectDivergence(key, recorded, new)
        return info

    def _record_result(self, key: str, value: Any) -> None:
        stored, lossy = _storable(value)
        with _writing(self.ledger):
            rec = {"kind": "result", "key": key, "ok": True, **self.ledger.put_result(stored)}
            if lossy:
                rec["lossy"] = True
            self.ledger.append(rec)

    def _record_error(self, key: str, exc: Exception) -> None:
        self.ledger.append({"kind": "result", "key": key, "ok": False, "error": f"{type(exc).__name__}: {exc}"[:2000]})

    def _start(self, spec: ToolSpec, args: tuple[Any, ...], kwargs: dict[str, Any]) -> EffectCall:
        sim = (lambda: spec.simulate(*args, **kwargs)) if spec.simulate else (lambda: None)
        return self._begin(spec, _bind(spec.sig, args, kwargs), sim)

    def _guarded(self, spec: ToolSpec, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        call = self._start(spec, args, kwargs)
        if call.run:
            with call:
                call.result = _returned(spec, fn(*args, **kwargs))
        return call.result

    async def _aguarded(self, spec: ToolSpec, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        call = self._start(spec, args, kwargs)
        if call.run:
            with call:
                call.result = await fn(*args, **kwargs)
        return call.result


def _returned(spec: ToolSpec, result: Any) -> Any:
    """``result`` of a guarded plain function, refused when it is work still to be done (a coroutine, generator or
    async generator another decorator hid): recording it as the call's result would mark the effect done before it
    ran, and a replay would hand the agent its ``repr`` string. The refusal is recorded as a failed call (retried)."""
    if not (inspect.isawaitable(result) or inspect.isgenerator(result) or inspect.isasyncgen(result)):
        return result
    what = type(result).__name__
    stop = getattr(result, "close", None) if inspect.iscoroutine(result) or inspect.isgenerator(result) else None
    if stop is not None:
        stop()  # (not started: nothing of the tool ran)
    elif callable(cancel := getattr(result, "cancel", None)):  # a task or future: stop it if it can be
        cancel()
    raise InvalidInput(f"effect {spec.name!r} returned a {what}, work that runs only after the call has returned: the "
                       "ledger records a call's result when it returns; guard the async def function itself, or make "
                       "the tool return its result (a list of what it would yield)")


def _refuse_streams(f: Callable[..., Any], spec: ToolSpec) -> None:
    if spec.guarded and (inspect.isgeneratorfunction(f) or inspect.isasyncgenfunction(f)):
        raise InvalidInput(f"@effect cannot guard {spec.name!r}: it is a generator, whose work happens while it is "
                           "read, after the call has returned, and the ledger records a call's result when it returns "
                           "(a replay would hand back a string, the generator's repr); make the tool return its result "
                           "(a list of what it would yield), or guard the function that does the side effect")


def _session_for(session: Effects | None, spec: ToolSpec) -> Effects | None:
    fx = session or _current.get()
    if fx is None and spec.guarded:
        raise AgentSnapError(
            f"tool {spec.name!r} is an {spec.kind} effect but no effects session is active; run the agent inside "
            "'with agentsnap_core.layers.effects.Effects(repo):' (or pass session=)"
        )
    return fx


def effect(
    fn: Callable[..., Any] | None = None,
    *,
    name: str | None = None,
    kind: str = IRREVERSIBLE,
    key: str | Callable[..., str] | None = None,
    simulate: Callable[..., Any] | None = None,
    guard: bool | None = None,
    on_divergence: str | None = None,
    record_args: bool = True,
    session: Effects | None = None,
) -> Any:
    """Guard a tool function (sync or async) with the effects ledger.

    Args:
        name: the tool name used in keys (default: the function's name).
        kind: ``pure`` / ``idempotent`` / ``irreversible``; only irreversible calls are guarded by default.
        key: a user-supplied idempotency key (a string, or a function of the call's arguments); wins over
            the position.
        simulate: ``simulate(*args, **kwargs)`` gives the result a deferred call returns in a fork.
        guard: force guarding on or off.
        on_divergence: override the session's divergence policy for this tool.
        record_args: keep the arguments in the ledger (else only their digest).
        session: bind to one :class:`Effects` instead of the active one.
    """

    def wrap(f: Callable[..., Any]) -> Callable[..., Any]:
        try:
            sig: inspect.Signature | None = inspect.signature(f)
        except (TypeError, ValueError):
            sig = None
        spec = ToolSpec(str(name or getattr(f, "__name__", None) or "tool"), kind, key, simulate, guard, on_divergence, record_args, sig)
        _refuse_streams(f, spec)
        register_tool(spec.name, f)
        if inspect.iscoroutinefunction(f):

            @functools.wraps(f)
            async def awrapper(*args: Any, **kwargs: Any) -> Any:
                fx = _session_for(session, spec)
                if fx is None or not spec.guarded:
                    return await f(*args, **kwargs)
                return await fx._aguarded(spec, f, args, kwargs)

            awrapper.__agentsnap_effect__ = spec  # type: ignore[attr-defined]
            return awrapper

        @functools.wraps(f)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            fx = _session_for(session, spec)
            if fx is None or not spec.guarded:
                return f(*args, **kwargs)
            return fx._guarded(spec, f, args, kwargs)

        wrapper.__agentsnap_effect__ = spec  # type: ignore[attr-defined]
        return wrapper

    return wrap(fn) if fn is not None else wrap


# ---------------------------------------------------------------------------------------------- ledger verbs
def resolve(repo: Repo, key: str, action: str, result: Any = None, *, ledger: Ledger | None = None) -> dict[str, Any]:
    """Settle an in-doubt effect: ``done`` (it happened; ``result`` is what callers get) or ``retry``."""
    if action not in ("done", "retry"):
        raise InvalidInput("resolve takes 'done' or 'retry'")
    led = (ledger or Ledger.for_repo(repo)).sync()
    st = led.keys.get(key)
    if st is None:
        raise InvalidInput(f"no effect with key {key!r} in the ledger (see 'agentsnap effects')")
    if st.status != "intent":
        raise InvalidInput(f"effect {key} is {st.status}, not in doubt; nothing to resolve")
    rec: dict[str, Any] = {"kind": "resolve", "key": key, "action": action}
    with _writing(led):
        if action == "done":
            rec.update(led.put_result(_storable(result)[0]))
        entry = led.append(rec)
    return {"key": key, "action": action, "entry": entry["i"]}


def set_policy(repo: Repo, branch: str, policy: str) -> dict[str, Any]:
    """Change the fork policy (allow / block / defer) of a branch's lineage."""
    if policy not in POLICIES:
        raise InvalidInput(f"effects policy must be one of {', '.join(POLICIES)}, not {policy!r}")
    led = Ledger.for_repo(repo).sync()
    _require_branch(repo, led, branch)  # (a typo would append a policy for a branch nobody has, forever)
    lineage = led.lineage_of(branch)
    entry = led.append({"kind": "policy", "lineage": lineage, "policy": policy})
    return {"branch": branch, "lineage": lineage, "policy": policy, "entry": entry["i"]}


def _require_branch(repo: Repo, led: Ledger, branch: str) -> None:
    """``branch`` is a branch of this store or a lineage the ledger knows (a deleted fork's), else InvalidInput."""
    if branch not in led.lineages and repo.refs.get_ref(f"refs/heads/{branch}") is None:
        raise InvalidInput(f"no branch {branch!r} here (see 'agentsnap branch'); nothing was recorded")


def record_fork(repo: Repo, snapshot: str, branches: list[str], policy: str, parent: str | None) -> None:
    """Write one ``fork`` entry per new branch (called by :meth:`Repo.fork` before the refs exist)."""
    if policy not in POLICIES:
        raise InvalidInput(f"effects policy must be one of {', '.join(POLICIES)}, not {policy!r}")
    parent_branch = parent or repo.current_branch() or "main"
    # one store transaction for all of them (a fork of 12 paid 12 durable commits), after reading only the entries
    # appended since the last snapshot or fork (a new process no longer folds the whole ledger to fork)
    append_forks(repo, lambda lineage_of: [
        {"kind": "fork", "branch": b, "parent": lineage_of(parent_branch), "policy": policy, "snapshot": snapshot}
        for b in branches])


def import_tools(modules: list[str]) -> None:
    """Import modules whose ``@effect`` tools should be available to :func:`apply_deferred`."""
    for m in modules:
        try:
            importlib.import_module(m)
        except ImportError as exc:
            raise InvalidInput(f"cannot import tool module {m!r}: {exc}") from None


def apply_deferred(
    repo: Repo,
    branch: str,
    into: str | None = None,
    *,
    tools: dict[str, Callable[..., Any]] | None = None,
) -> dict[str, Any]:
    """Run the deferred effects of ``branch`` for real, exactly once, in the lineage of ``into``.

    ``into`` defaults to the branch the fork was made from. An effect the target lineage already
    performed at the same position (or user key) is not run again: it is reported under ``conflicts``
    ("ran on both branches"). When the target is itself a deferring fork, the effects are deferred
    there instead. Tools come from ``tools`` or from ``@effect`` definitions imported in this process.

    A tool that raises an ``Exception`` is recorded as failed and reported under ``failed`` (the call stays
    deferred, so applying again retries it); the other deferred calls still run.

    Returns ``{"applied", "deferred", "conflicts", "pending", "in_doubt", "failed"}`` (lists of keys / dicts).
    """
    if into is not None:  # (a typo would send the calls for real into a lineage nobody has, the target unguarded)
        _require_branch(repo, Ledger.for_repo(repo).sync(), into)
    return _apply_deferred(repo, branch, into, tools)


def _apply_deferred(
    repo: Repo, branch: str, into: str | None, tools: dict[str, Callable[..., Any]] | None = None
) -> dict[str, Any]:
    """:func:`apply_deferred` into a target lineage that is not checked (a merge's, as :func:`on_merge` found it)."""
    led = Ledger.for_repo(repo).sync()
    _require_branch(repo, led, branch)
    src = branch if branch in led.lineages else led.lineage_of(branch)
    info = led.lineages.get(src)
    if into is None:
        if info is None:
            raise InvalidInput(f"branch {branch!r} was not made by 'fork'; say which branch to apply into (--into)")
        target = info.parent
    else:
        target = into if into in led.lineages else led.lineage_of(into)
    if target == src:
        raise InvalidInput("cannot apply a branch's deferred effects into itself")
    report: dict[str, Any] = {"source": src, "target": target, "applied": [], "deferred": [], "conflicts": [], "pending": [],
                              "in_doubt": [], "failed": []}
    table = {**_TOOLS, **(tools or {})}
    for d in [d for d in led.deferred.values() if d.lineage == src and d.status == "deferred"]:
        e = d.entry
        pos = e.get("pos")
        tkey = position_key(target, *pos) if pos else d.key
        fn = table.get(str(e.get("tool")))
        if fn is None and led.policy_of(target) != "defer":
            report["pending"].append({"key": d.key, "tool": e.get("tool"), "reason": "tool not registered in this process"})
            continue
        _apply_one(led, d, tkey, tuple(pos) if pos else None, target, fn, report)
    return report


def _apply_one(
    led: Ledger,
    d: Deferred,
    tkey: str,
    pos: tuple[int, str, int] | None,
    target: str,
    fn: Callable[..., Any] | None,
    report: dict[str, Any],
) -> None:
    e = d.entry
    base = {k: e.get(k) for k in ("tool", "cls", "digest", "args")}
    while True:
        led.sync()
        if led.deferred[(d.lineage, d.key)].status != "deferred":
            return  # applied meanwhile by another process
        found = led.lookup(target, tkey, pos)
        if isinstance(found, KeyState) and found.status == "intent":
            report["in_doubt"].append(found.key)
            return
        if isinstance(found, KeyState) and found.status == "done" or isinstance(found, Deferred):
            detail = f"{'performed' if isinstance(found, KeyState) else 'deferred'} on both branches as {found.key}"
            if led.try_append({"kind": "applied", "lineage": d.lineage, "key": d.key, "status": "conflict", "target": found.key, "detail": detail}):
                report["conflicts"].append({"key": d.key, "target": found.key, "detail": detail})
                return
            continue
        if led.policy_of(target) == "defer":
            rec = {"kind": "defer", **base, "key": tkey, "lineage": target, "pos": list(pos) if pos else None,
                   "simulated": e.get("simulated"), "from": [d.lineage, d.key]}
            if led.try_append(rec) is None:
                continue
            led.append({"kind": "applied", "lineage": d.lineage, "key": d.key, "status": "applied", "target": tkey})
            report["deferred"].append(tkey)
            return
        intent = {"kind": "intent", **base, "key": tkey, "lineage": target, "pos": list(pos) if pos else None,
                  "from": [d.lineage, d.key], "pid": os.getpid(), "host": socket.gethostname()}
        if led.try_append(intent) is None:
            continue
        break
    assert fn is not None
    args, kwargs = _call_args(fn, dict(e.get("args") or {}))
    try:
        result = fn(*args, **kwargs)
        if inspect.isawaitable(result):
            import asyncio

            result = asyncio.run(result)  # type: ignore[arg-type]
    except Exception as exc:  # a failure is not an effect: recorded, reported, and the call stays deferred (retried)
        error = f"{type(exc).__name__}: {exc}"[:2000]
        led.append({"kind": "result", "key": tkey, "ok": False, "error": error})
        report["failed"].append({"key": d.key, "target": tkey, "tool": e.get("tool"), "error": error})
        return
    stored, _ = _storable(result)
    with _writing(led):
        led.append({"kind": "result", "key": tkey, "ok": True, **led.put_result(stored)})
    led.append({"kind": "applied", "lineage": d.lineage, "key": d.key, "status": "applied", "target": tkey})
    report["applied"].append(tkey)


def lineages_at(repo: Repo, led: Ledger, oid: str) -> list[str]:
    """Lineages a snapshot belongs to: the one its effects record names, and those of branches at it."""
    out: list[str] = []
    try:
        rec = repo.manifest(oid)["layers"].get("effects")
    except AgentSnapError:
        rec = None
    if isinstance(rec, dict) and isinstance(rec.get("lineage"), str):
        out.append(rec["lineage"])
    for name, at in repo.refs.list_refs("refs/heads/").items():
        if at == oid:
            lineage = led.lineage_of(name[len("refs/heads/") :])
            if lineage not in out:
                out.append(lineage)
    return out


def ran_on_both(led: Ledger, ours: str, theirs: str) -> list[tuple[str, str]]:
    """Irreversible effects performed for real at the same position in both lineages."""
    pairs = []
    for st in list(led.keys.values()):
        intent = st.intent or {}
        if intent.get("lineage") != theirs or intent.get("cls") != IRREVERSIBLE or st.status != "done" or not intent.get("pos"):
            continue
        mine = led.lookup(ours, position_key(ours, *intent["pos"]), tuple(intent["pos"]))
        if isinstance(mine, KeyState) and mine.status == "done" and mine.key != st.key:
            pairs.append((mine.key, st.key))
    return pairs


def on_merge(repo: Repo, ours: str, theirs: str, branch: str | None) -> dict[str, Any]:
    """Called when a merge of snapshot ``theirs`` into ``ours`` is recorded (or fast-forwarded).

    Runs the deferred effects of their lineage for real, exactly once, in ours (see :func:`apply_deferred`),
    and writes a ``ran-on-both`` note for each irreversible effect both lineages performed.
    """
    led = Ledger.for_repo(repo).sync()
    if not led.entries:
        return {"applied": [], "conflicts": [], "pending": [], "in_doubt": [], "deferred": [], "failed": [], "ran_on_both": []}
    target = led.lineage_of(branch) if branch else (lineages_at(repo, led, ours) or ["main"])[0]
    total: dict[str, Any] = {"applied": [], "conflicts": [], "pending": [], "in_doubt": [], "deferred": [], "failed": [],
                             "ran_on_both": []}
    for src in lineages_at(repo, led, theirs):
        if src == target:
            continue
        if any(d.lineage == src and d.status == "deferred" for d in led.deferred.values()):
            rep = _apply_deferred(repo, src, target)
            for k in ("applied", "conflicts", "pending", "in_doubt", "deferred", "failed"):
                total[k] += rep[k]
        for mine, their in ran_on_both(led.sync(), target, src):
            if not any(n.get("note") == "ran-on-both" and n.get("key") == their for n in led.notes):
                led.append({"kind": "note", "note": "ran-on-both", "key": their, "other": mine})
            total["ran_on_both"].append([mine, their])
    return total


def merge_notes(report: dict[str, Any], branch: str, into: str | None) -> list[str]:
    """What :func:`on_merge` did, as lines a user reads: applied effects, and those it could not run with the
    command that runs them (never left unsent in silence)."""
    notes = [f"effects: applied {k}" for k in report.get("applied", [])]
    notes += [f"effects: not run again, {c['key']} ({c['detail']})" for c in report.get("conflicts", [])]
    notes += [f"effects: still deferred in {into or 'the target'}: {k}" for k in report.get("deferred", [])]
    if report.get("pending"):
        tools = sorted({str(p["tool"]) for p in report["pending"]})
        into_opt = f" --into {into}" if into else ""
        notes.append(f"effects: {len(report['pending'])} deferred effect(s) of {branch} NOT run: tool(s) "
                     f"{', '.join(tools)} not loaded in this process; send them with "
                     f"'agentsnap effects apply {branch}{into_opt} --import MODULE' (MODULE defines the tools)")
    if report.get("failed"):
        into_opt = f" --into {into}" if into else ""
        notes += [f"effects: FAILED, not applied: {f['key']} ({f['error']}); it stays deferred: retry with "
                  f"'agentsnap effects apply {branch}{into_opt} --import MODULE'" for f in report["failed"]]
    if report.get("in_doubt"):
        notes.append(f"effects: in doubt, not run: {', '.join(report['in_doubt'])}; "
                     "check them and 'agentsnap effects resolve KEY'")
    return notes



# ---------------------------------------------------------------------------------------------- framework tools
_ENTRY_POINTS = ("func", "coroutine", "_func", "_run", "_arun")


def wrap_tool(tool: Any, session: Effects | None = None, *, kind: str = IRREVERSIBLE, name: str | None = None, **options: Any) -> Any:
    """Guard a framework's tool object (or a plain callable) in place and return it.

    Duck-typed, no framework imported: a plain function is decorated; an object with ``tools_by_name``
    (LangGraph ``ToolNode``) has each tool wrapped; an object with ``call_tool(name, arguments)`` (an MCP
    client session) is guarded per tool name; otherwise the callables found under ``func`` / ``coroutine``
    (LangChain tools), ``_func`` (AutoGen ``FunctionTool``), ``_run`` / ``_arun`` (CrewAI ``BaseTool``) are
    replaced by guarded versions. The tool name comes from ``name`` or the object's ``name``.
    """
    if isinstance(tool, dict):
        for k, t in tool.items():
            wrap_tool(t, session, kind=kind, name=k if name is None else name, **options)
        return tool
    by_name = getattr(tool, "tools_by_name", None)
    if isinstance(by_name, dict):
        for k, t in by_name.items():
            wrap_tool(t, session, kind=kind, name=k, **options)
        return tool
    if inspect.isfunction(tool) or inspect.ismethod(tool):
        return effect(tool, name=name, kind=kind, session=session, **options)
    tool_name = name or getattr(tool, "name", None) or type(tool).__name__
    call_tool = getattr(tool, "call_tool", None)
    if callable(call_tool) and not any(callable(getattr(tool, a, None)) for a in ("func", "_func", "_run")):
        _set(tool, "call_tool", _guard_dispatch(call_tool, session, kind, options))
        return tool
    done = False
    for attr in _ENTRY_POINTS:
        fn = getattr(tool, attr, None)
        if callable(fn) and not hasattr(fn, "__agentsnap_effect__"):
            _set(tool, attr, effect(fn, name=str(tool_name), kind=kind, session=session, **options))
            done = True
    if not done:
        if callable(tool):
            return effect(tool, name=str(tool_name), kind=kind, session=session, **options)
        raise InvalidInput(f"cannot find a callable entry point on {type(tool).__name__} to guard")
    return tool


def _set(obj: Any, attr: str, value: Any) -> None:
    try:
        setattr(obj, attr, value)
    except (AttributeError, TypeError, ValueError):
        object.__setattr__(obj, attr, value)


def _guard_dispatch(call_tool: Callable[..., Any], session: Effects | None, kind: str, options: dict[str, Any]) -> Callable[..., Any]:
    """Guard ``call_tool(name, arguments, ...)``: each tool name is its own effect."""
    cache: dict[str, Callable[..., Any]] = {}

    def guarded_for(tool_name: str) -> Callable[..., Any]:
        if tool_name not in cache:
            if inspect.iscoroutinefunction(call_tool):

                async def one(arguments: Any = None, **kw: Any) -> Any:
                    return await call_tool(tool_name, arguments, **kw)
            else:

                def one(arguments: Any = None, **kw: Any) -> Any:  # type: ignore[misc]
                    return call_tool(tool_name, arguments, **kw)

            one.__name__ = tool_name
            cache[tool_name] = effect(one, name=tool_name, kind=kind, session=session, **options)
        return cache[tool_name]

    if inspect.iscoroutinefunction(call_tool):

        async def acall(tool_name: str, arguments: Any = None, **kw: Any) -> Any:
            return await guarded_for(tool_name)(arguments, **kw)

        return acall

    def call(tool_name: str, arguments: Any = None, **kw: Any) -> Any:
        return guarded_for(tool_name)(arguments, **kw)

    return call
