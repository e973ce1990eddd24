"""``with agentsnap_core.rollback(agent, world=...)`` and ``@agentsnap_core.checkpoint(every=N | seconds=T)``.

``rollback`` copies the agent's state on entry (through the adapter that handles it, so any supported
agent works) and, with ``world=``, snapshots those files; when the block raises, the agent and the
files are put back and the exception propagates. ``checkpoint`` saves an agent through a
:class:`~agentsnap_core.client.Client` every N calls and/or every T seconds.
"""

from __future__ import annotations

import copy
import functools
import inspect
import math
import os
import threading
import time
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from agentsnap_core import plugins
from agentsnap_core.errors import AgentSnapError, InvalidInput
from agentsnap_core.repository.repo import Repo, check_path

__all__ = ["AutoSnapshot", "auto_snapshot", "checkpoint", "rollback"]

F = TypeVar("F", bound=Callable[..., Any])


def _capture(agent: Any, repo: Repo | None) -> dict[str, Any]:
    layers = plugins.capture(agent, repo)
    if layers is None:
        raise AgentSnapError(
            f"rollback cannot capture {type(agent).__name__}: no installed adapter handles it "
            "(give it state_dict()/load_state_dict() or inherit agentsnap_core.Snapshottable)"
        )
    return copy.deepcopy(dict(layers))


def _restore(agent: Any, layers: dict[str, Any], repo: Repo | None) -> None:
    # trust_pickle: the copy was made by this process
    if not plugins.restore(agent, copy.deepcopy(layers), repo, trust_pickle=True):
        raise AgentSnapError(f"rollback could not restore {type(agent).__name__}")
    from agentsnap_core.format.snapshottable import ENVELOPE

    state = layers.get("state")
    if isinstance(state, dict) and state.get("format") == ENVELOPE:
        _drop_added(agent, state.get("state"))


def _drop_added(obj: Any, encoded: Any) -> None:
    """Remove the public attributes a failed block added to a Snapshottable (and its nested ones, loaded in place):
    loading the entry state sets the attributes it holds and leaves any other one where it was."""
    from agentsnap_core.format.snapshottable import TAG, Snapshottable, instance_attributes

    if not (isinstance(obj, Snapshottable) and type(obj).__snapshot_fields__ is None and isinstance(encoded, dict)
            and TAG not in encoded):
        return
    for key in [k for k in instance_attributes(obj) if not k.startswith("_") and k not in encoded]:
        delattr(obj, key)
    for key, value in encoded.items():
        if isinstance(value, dict) and value.get(TAG) == "obj":
            _drop_added(getattr(obj, key, None), value.get("v"))


class rollback:  # noqa: N801 - used like a function: `with agentsnap_core.rollback(agent):`
    """Snapshot on entry; restore the agent (and ``world`` files) if the block raises; re-raise.

    Args:
        agent: any object an adapter handles (``Snapshottable``, ``state_dict()`` objects, framework agents);
            None to protect only files.
        world: a file or directory inside an agentsnap working tree to put back too.
        repo: the repository to snapshot ``world`` in (default: the one holding ``world``).
        message: label of the snapshot taken on entry.

    After the block: ``rolled_back`` says whether it restored, ``snapshot`` names the entry snapshot
    (with ``world``), ``undo`` the snapshot of the failed state (so nothing is lost).
    """

    def __init__(self, agent: Any, *, world: str | os.PathLike[str] | None = None, repo: Repo | None = None,
                 message: str = "") -> None:
        if agent is None and world is None:  # (an agent variable not set yet: the block would be protected by nothing)
            raise InvalidInput("rollback needs an agent or world= (files to put back); it was given neither")
        if world is not None:
            check_path("world", world)
        if repo is not None and not isinstance(repo, Repo):
            raise InvalidInput(f"repo must be an open agentsnap_core.Repo, not {type(repo).__name__} {repo!r}"[:200])
        self.agent, self.world, self.repo, self.message = agent, world, repo, message
        self.snapshot: str | None = None
        self.undo: str | None = None
        self.rolled_back = False
        self._layers: dict[str, Any] | None = None
        self._paths: list[str] | None = None
        self._own_repo = False

    def __enter__(self) -> rollback:
        try:
            return self._enter()
        except BaseException:
            if self._own_repo and self.repo is not None:  # (no __exit__ follows a failed __enter__)
                self.repo.close()
                self.repo, self._own_repo = None, False
            raise

    def _enter(self) -> rollback:
        if self.world is not None:
            if self.repo is None:
                start = Path(self.world)
                self.repo = Repo.open(start if start.is_dir() else start.parent)
                self._own_repo = True
            rel = self.repo.tree_path(self.world, "world")  # (as written: a link in the tree is the link)
            self._paths = None if not rel else [rel]
        self._layers = _capture(self.agent, self.repo) if self.agent is not None else None
        if self.repo is not None and self.world is not None:
            state = {k: v for k, v in (self._layers or {}).items() if k != "trace"}
            head = self.repo.head()[1]
            snap = self.repo.snapshot(
                f"rollback: before {self.message or 'block'}",
                layers=state,
                trace=(self._layers or {}).get("trace") or [],
                parents=[head] if head else [],
                ref="refs/undo/rollback",
                move_head=False,
                meta={"rollback": True},
            )
            self.snapshot = snap.id
        return self

    def __exit__(self, et: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        try:
            if et is None:
                return
            try:
                if self._layers is not None:
                    _restore(self.agent, self._layers, self.repo)
            finally:  # (an agent that cannot be loaded back must not leave the files half restored too)
                if self.snapshot is not None and self.repo is not None:
                    self.undo = self._restore_world()
            self.rolled_back = True  # returning None: the exception propagates
        finally:
            if self._own_repo and self.repo is not None:
                self.repo.close()

    async def __aenter__(self) -> rollback:
        return self.__enter__()

    async def __aexit__(self, et: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        self.__exit__(et, exc, tb)

    def _restore_world(self) -> str | None:
        assert self.repo is not None and self.snapshot is not None
        if self._paths is None and not self.repo.world_entries(self.snapshot) and not self.repo.working_entries():
            return None  # (an empty tree before and after: nothing to put back)
        # the whole tree as a path restore (the root: `-- .`), so the branch does not move and the trace is not reset
        paths = [str(self.repo.root / p) for p in self._paths] if self._paths is not None else [str(self.repo.root)]
        result = self.repo.restore(self.snapshot, paths=paths)  # (absolute: no chdir)
        return result.get("undo")


def _not_awaitable(saved: Any, refusal: str) -> Any:
    """``saved`` (a save's result in code that cannot wait); an AsyncClient's unawaited save is closed and refused."""
    if inspect.isawaitable(saved):
        getattr(saved, "close", lambda: None)()
        raise InvalidInput(refusal)
    return saved


class AutoSnapshot:
    """The ``auto_snapshot`` policy: due every ``every`` calls and/or every ``seconds`` seconds, per agent."""

    def __init__(self, every: int | None = None, seconds: float | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        if callable(every):  # `@checkpoint` without its parentheses: every is the decorated function
            raise InvalidInput("use @agentsnap_core.checkpoint(every=N) and/or (seconds=T), with the parentheses")
        if every is None and seconds is None:
            raise InvalidInput("give every=N (calls) and/or seconds=T")
        if every is not None and (isinstance(every, bool) or not isinstance(every, int) or every < 1):
            raise InvalidInput(f"every must be a positive number of calls, not {every!r}")
        if seconds is not None and (isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0 < seconds < math.inf):
            raise InvalidInput(f"seconds must be a positive, finite number, not {seconds!r}")
        self.every, self.seconds, self.clock = every, seconds, clock
        self._lock = threading.Lock()
        self._weak: weakref.WeakKeyDictionary[Any, list[float]] = weakref.WeakKeyDictionary()
        self._strong: dict[int, list[float]] = {}

    def _slot(self, agent: Any) -> list[float]:
        try:
            return self._weak.setdefault(agent, [0, self.clock()])
        except TypeError:  # not weak-referenceable
            return self._strong.setdefault(id(agent), [0, self.clock()])

    def tick(self, agent: Any) -> bool:
        """Count one call for ``agent``; True when a snapshot is due now (the counters then restart)."""
        with self._lock:
            slot = self._slot(agent)
            slot[0] += 1
            now = self.clock()
            due = (self.every is not None and slot[0] >= self.every) or (self.seconds is not None and now - slot[1] >= self.seconds)
            if due:
                slot[0], slot[1] = 0, now
            return due


class auto_snapshot:  # noqa: N801 - a policy object used like a function
    """Save ``agent`` when the policy is due; call :meth:`tick` after each turn of a loop you do not own.

    ``snapper = agentsnap_core.auto_snapshot(agent, every=10, client=client)`` then ``snapper.tick()`` per turn
    (returns the new snapshot id, or None when no save was due); ``await snapper.atick()`` in asyncio code (the
    one form an :class:`~agentsnap_core.client.AsyncClient` takes).
    """

    def __init__(self, agent: Any, *, every: int | None = None, seconds: float | None = None, client: Any = None,
                 agent_id: str | None = None, session_id: str = "default", clock: Callable[[], float] = time.monotonic) -> None:
        self.agent, self.client = agent, client
        self.policy = AutoSnapshot(every, seconds, clock)
        self.agent_id, self.session_id = agent_id or type(agent).__name__, session_id
        self.last: str | None = None

    def tick(self, message: str = "") -> str | None:
        """Count a turn; save when due (the new id, else None). With an AsyncClient use :meth:`atick`."""
        saved = _not_awaitable(self._due(message), "auto_snapshot with an AsyncClient: call 'await snapper.atick()' "
                               "(tick() cannot wait for the save, which would never happen)")
        if saved is not None:
            self.last = saved
        return saved

    async def atick(self, message: str = "") -> str | None:
        """:meth:`tick` for asyncio code: the save is awaited (an AsyncClient's, or a Client's)."""
        saved = self._due(message)
        if inspect.isawaitable(saved):
            saved = await saved
        if saved is not None:
            self.last = saved
        return saved

    def _due(self, message: str) -> Any:
        if not self.policy.tick(self.agent):
            return None
        if self.client is None:
            from agentsnap_core.client import Client

            self.client = Client()
        return self.client.save(self.agent, agent_id=self.agent_id, session_id=self.session_id,
                                message=message or "auto snapshot")


def checkpoint(
    every: int | None = None,
    *,
    seconds: float | None = None,
    client: Any = None,
    agent: Any = None,
    agent_id: str | None = None,
    session_id: str = "default",
    clock: Callable[[], float] = time.monotonic,
) -> Callable[[F], F]:
    """Decorate an agent method (or a function with ``agent=``) to save the agent every N calls / T seconds.

    Args:
        every: save after every ``every``-th successful call.
        seconds: save after a successful call when ``seconds`` passed since the last save.
        client: a :class:`~agentsnap_core.client.Client` or :class:`~agentsnap_core.client.AsyncClient` (default: a
            ``Client()`` on the current directory, opened at the first save).
        agent: the agent, or ``callable(*args, **kwargs) -> agent`` (default: the first argument, ``self``).
        agent_id: id to save under (default: the agent's class name).
        session_id: session to save in.
        clock: the time source for ``seconds`` (tests pass a fake).

    A call counts once it has finished without raising: a coroutine once awaited, a generator or async generator
    (a streaming agent) once it has run to its end - one closed early (the caller stopped reading) or that raised
    is not counted and saves nothing. A plain function that returns one of those (wrapped by another decorator)
    is treated the same way. With an :class:`~agentsnap_core.client.AsyncClient`, only async functions and async
    generators can save (a plain function or generator is refused with :class:`InvalidInput` when due).

    The wrapper has ``.policy`` (:class:`AutoSnapshot`) and ``.last`` (id of the last snapshot saved).
    """
    policy = AutoSnapshot(every, seconds, clock)

    def decorate(fn: F) -> F:
        state: dict[str, Any] = {"client": client}

        def target(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
            if agent is None:
                if not args:
                    raise InvalidInput(f"@checkpoint on {fn.__qualname__}: no agent (decorate a method or pass agent=)")
                return args[0]
            return agent(*args, **kwargs) if callable(agent) and not hasattr(agent, "state_dict") else agent

        def the_client() -> Any:
            if state["client"] is None:
                from agentsnap_core.client import Client

                state["client"] = Client()
            return state["client"]

        def save_kwargs(obj: Any) -> dict[str, Any]:
            return {"agent_id": agent_id or type(obj).__name__, "session_id": session_id,
                    "message": f"checkpoint: after {fn.__qualname__}"}

        def saved_sync(obj: Any) -> Any:
            return _not_awaitable(the_client().save(obj, **save_kwargs(obj)),
                                  f"@checkpoint on {fn.__qualname__}: an AsyncClient saves only from an async def "
                                  "function (or async generator); give this one a Client")

        wrapped: Any = None  # (the wrapper made below: its .last is set after each save)

        def after(args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            obj = target(args, kwargs)
            if policy.tick(obj):
                wrapped.last = saved_sync(obj)

        async def after_async(args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            obj = target(args, kwargs)
            if policy.tick(obj):
                saved = the_client().save(obj, **save_kwargs(obj))
                wrapped.last = await saved if inspect.isawaitable(saved) else saved

        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def awrapper(*args: Any, **kwargs: Any) -> Any:
                result = await fn(*args, **kwargs)
                await after_async(args, kwargs)
                return result

            wrapped = awrapper
        elif inspect.isasyncgenfunction(fn):  # a streaming agent: saved once the stream has run to its end
            wrapped = functools.wraps(fn)(_forwarding(fn, after_async))
        elif inspect.isgeneratorfunction(fn):

            @functools.wraps(fn)
            def gwrapper(*args: Any, **kwargs: Any) -> Any:
                result = yield from fn(*args, **kwargs)
                after(args, kwargs)
                return result

            wrapped = gwrapper
        else:

            @functools.wraps(fn)
            def wrapper(*args: Any, **kwargs: Any) -> Any:
                result = fn(*args, **kwargs)
                if inspect.isawaitable(result) or inspect.isgenerator(result) or inspect.isasyncgen(result):
                    return _then(result, lambda: after(args, kwargs), lambda: after_async(args, kwargs))
                after(args, kwargs)
                return result

            wrapped = wrapper

        wrapped.policy, wrapped.last = policy, None
        return wrapped  # type: ignore[no-any-return]

    return decorate


def _forwarding(make: Callable[..., Any], after: Callable[[tuple[Any, ...], dict[str, Any]], Any]) -> Any:
    """An async generator function: it yields what ``make(*args, **kwargs)`` (an async generator) yields, passes
    what is sent or thrown in on to it and closes it when closed (it sees the caller as if iterated directly), and
    awaits ``after(args, kwargs)`` once it has run to its end."""

    async def forwarding(*args: Any, **kwargs: Any) -> Any:
        agen = make(*args, **kwargs)
        try:
            item = await agen.asend(None)
            while True:
                try:
                    sent = yield item
                except GeneratorExit:
                    raise
                except BaseException as exc:  # noqa: BLE001 - thrown in by the caller: the stream's to handle
                    item = await agen.athrow(exc)
                else:
                    item = await agen.asend(sent)
        except StopAsyncIteration:
            pass
        finally:
            await agen.aclose()
        await after(args, kwargs)

    return forwarding


def _then(result: Any, after: Callable[[], None], after_async: Callable[[], Any]) -> Any:
    """``result`` (an awaitable, generator or async generator a plain function returned) with the save after it
    has finished."""
    if inspect.isgenerator(result):

        def gen() -> Any:
            value = yield from result
            after()
            return value

        return gen()
    if inspect.isasyncgen(result):
        return _forwarding(lambda: result, lambda args, kwargs: after_async())()

    async def awaited() -> Any:
        value = await result
        await after_async()
        return value

    return awaited()

