"""``Client`` / ``AsyncClient``: save and restore any agent, hand it off, list its timeline, expire it.

Every call works on an ordinary agentsnap store, so the CLI sees the same snapshots. Layout:

* a snapshot saved for agent ``A`` in session ``S`` moves the ref ``refs/agents/<A>/<S>`` (compare-and-swap),
  its first parent is the session's previous snapshot: a session is a branch, its timeline a walk;
* ``meta`` holds ``session``, ``expires_at`` (TTL), ``tags``, the agent's ``class`` and the caller's ``user``
  metadata; a handoff's parents are ``[source, previous tip of the target session]``;
* ``expire`` / ``delete`` mark the snapshot dead (:mod:`agentsnap_core.repository.retention`): it leaves every query, its
  layers are reclaimed by ``gc``, its manifest stays while history descends from it.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import random
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from functools import partial
from typing import Any, TypeVar

from agentsnap_core import plugins
from agentsnap_core.errors import AgentSnapError, InvalidInput, RefConflict, StoreNotFound, UnknownSnapshot
from agentsnap_core.format.encoding import pack, unpack
from agentsnap_core.repository.repo import Repo, Snapshot
from agentsnap_core.repository.retention import SnapshotGone, bury, death_of, refuse_dead, tombstones

__all__ = ["AsyncClient", "Client", "SnapshotInfo", "session_ref"]

AGENTS = "refs/agents/"
DEFAULT_SESSION = "default"
_SAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")
#: how long a save keeps re-parenting on concurrent saves to the same session before it gives up
_RETRY_SECONDS = 30.0


def _backoff(attempt: int) -> float:
    """Jittered, growing pause between re-tries: writers that retried in lock-step kept beating each other on a
    loaded machine (8 immediate re-tries ran out)."""
    return random.uniform(0, min(0.25, 0.002 * 2 ** min(attempt, 8)))
T = TypeVar("T")


def _enc(name: str) -> str:
    """A ref-safe, reversible spelling of an agent or session id (``+XX`` for other bytes)."""
    return "".join(c if c in _SAFE else "".join(f"+{b:02X}" for b in c.encode()) for c in name)


def session_ref(agent_id: str, session_id: str = DEFAULT_SESSION) -> str:
    """The ref a session's newest snapshot is named by (``agentsnap log <ref>`` walks the session)."""
    return f"{AGENTS}{_enc(agent_id)}/{_enc(session_id)}"


def _name(snapshot: object) -> str:
    """The name of a snapshot given to a Client method: a str (id, short id, branch, tag, ``HEAD~N``), or the
    :class:`SnapshotInfo` that ``latest``, ``timeline`` and ``lineage`` return (its id)."""
    if isinstance(snapshot, SnapshotInfo):
        return snapshot.id
    if not isinstance(snapshot, str):
        raise InvalidInput(f"a snapshot is named by its id (a str) or a SnapshotInfo, not {type(snapshot).__name__} "
                           f"{snapshot!r}"[:200])
    return snapshot


def _check_id(kind: str, value: object) -> str:
    if not isinstance(value, str) or not value:
        raise InvalidInput(f"{kind} must be a non-empty string, not {value!r}")
    return value


def _check_world(snap: Snapshot, world: object) -> None:
    """``restore(world=...)``: True or False, and True only for a snapshot that holds files."""
    if not isinstance(world, bool):
        raise InvalidInput(f"world must be True (put the saved files back too) or False, not {world!r}")
    if world and "world" not in snap.layers:
        raise InvalidInput(f"snapshot {snap.id[:12]} holds no files (it was saved without world=True); "
                           "restore it without world=True")


def _check_metadata(metadata: object) -> dict[str, Any]:
    """``metadata`` if it comes back from the store exactly as given (plain data), else :class:`InvalidInput`."""
    if not isinstance(metadata, dict):
        raise InvalidInput(f"metadata must be a dict of plain data, not {type(metadata).__name__}")
    try:
        back = unpack(pack(metadata))
    except AgentSnapError as exc:
        raise InvalidInput(f"metadata must be plain data (str, numbers, lists, dicts): {exc}") from None
    where = _changed(metadata, back, "metadata")
    if where is not None:  # (a tuple comes back a list, an OrderedDict a dict: say so rather than store it changed)
        raise InvalidInput(f"metadata must be plain data (str, numbers, bytes, None, lists, dicts): {where}")
    return metadata


def _changed(given: Any, back: Any, path: str) -> str | None:
    """Where ``back`` (a store round-trip of ``given``) differs from it in value or type, or None."""
    if type(given) is not type(back):
        return f"{path} is a {type(given).__name__}, which would come back as a {type(back).__name__}"
    if isinstance(given, dict):
        for key, value in given.items():
            where = _changed(value, back.get(key), f"{path}[{key!r}]") if key in back else f"{path}[{key!r}] would be lost"
            if where is not None:
                return where
        return None
    if isinstance(given, list):
        return next((w for i, (a, b) in enumerate(zip(given, back, strict=True)) if (w := _changed(a, b, f"{path}[{i}]"))), None)
    if given != back and not (isinstance(given, float) and given != given and back != back):  # (NaN is kept)
        return f"{path} would come back as {back!r}"
    return None


@dataclass(frozen=True)
class SnapshotInfo:
    """One snapshot as the client sees it."""

    id: str
    agent_id: str
    session_id: str
    time: float
    message: str
    parents: list[str]
    metadata: dict[str, Any] = field(default_factory=dict)
    tags: list[str] = field(default_factory=list)
    expires_at: float | None = None
    handoff_from: str | None = None
    layers: list[str] = field(default_factory=list)

    @classmethod
    def of(cls, snap: Snapshot) -> SnapshotInfo:
        m, meta = snap.manifest, snap.manifest.get("meta") or {}
        handoff = meta.get("handoff_from")
        return cls(
            id=snap.id,
            agent_id=str(m.get("agent", "")),
            session_id=str(meta.get("session", "")),
            time=snap.time,
            message=snap.message,
            parents=snap.parents,
            metadata=dict(meta.get("user") or {}),
            tags=list(meta.get("tags") or []),
            expires_at=meta.get("expires_at"),
            handoff_from=handoff.get("id") if isinstance(handoff, dict) else None,
            layers=sorted(snap.layers),
        )

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class Client:
    """The Python API on one store. ``Client(path)`` opens (or creates) the store at or above ``path``.

    Args:
        path: a directory inside an agentsnap working tree (created with ``agentsnap init`` semantics when absent).
        repo: use this open :class:`Repo` instead (the client does not close it).
        create: create a store at ``path`` when none is found.
        clock: seconds since the epoch (TTL and expiry use it; tests pass a fake).
        trust_pickle: load values a class pickled with ``__snapshot_pickle__`` (only for stores you wrote).
    """

    def __init__(
        self,
        path: str | os.PathLike[str] = ".",
        *,
        repo: Repo | None = None,
        create: bool = True,
        clock: Callable[[], float] = time.time,
        trust_pickle: bool = False,
    ) -> None:
        if repo is not None and not isinstance(repo, Repo):
            raise InvalidInput(f"repo must be an open agentsnap_core.Repo, not {type(repo).__name__} {repo!r}"[:200])
        if not callable(clock):
            raise InvalidInput(f"clock must be a function returning seconds since the epoch, not {clock!r}"[:200])
        self._own = repo is None
        if repo is None:
            try:
                repo = Repo.open(path)
            except StoreNotFound:
                if not create:
                    raise
                repo = Repo.init(path)
        self.repo = repo
        self.clock = clock
        self.trust_pickle = trust_pickle

    def close(self) -> None:
        if self._own:
            self.repo.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---------------------------------------------------------------- save / restore
    def capture(self, agent: Any) -> dict[str, Any]:
        """The agent's layers, through whichever adapter handles it (pure, no store writes)."""
        layers = plugins.capture(agent, self.repo)
        if layers is None:
            raise AgentSnapError(
                f"no installed adapter handles {type(agent).__name__} objects; give it state_dict()/load_state_dict() "
                "or inherit agentsnap_core.Snapshottable (see 'agentsnap plugins')"
            )
        return dict(layers)

    def save(
        self,
        agent: Any,
        *,
        agent_id: str,
        session_id: str = DEFAULT_SESSION,
        message: str = "",
        ttl: float | None = None,
        metadata: dict[str, Any] | None = None,
        tags: list[str] | tuple[str, ...] = (),
        world: bool = False,
    ) -> str:
        """Snapshot ``agent`` as the newest step of ``agent_id``'s ``session_id``; returns the snapshot id.

        ``ttl`` (seconds) makes it expire: then it leaves queries and ``gc`` reclaims its layers.
        ``metadata`` is plain data kept with the snapshot (see :meth:`metadata`). ``world=True`` also
        captures the working directory.
        """
        layers = self.capture(agent)
        return self._write(layers, agent, agent_id=agent_id, session_id=session_id, message=message, ttl=ttl,
                           metadata=metadata, tags=tags, world=world)

    def _write(self, layers: dict[str, Any], agent: Any, *, agent_id: str, session_id: str = DEFAULT_SESSION,
               message: str = "", ttl: float | None = None, metadata: dict[str, Any] | None = None,
               tags: list[str] | tuple[str, ...] = (), world: bool = False) -> str:
        _check_id("agent_id", agent_id)
        _check_id("session_id", session_id)
        meta: dict[str, Any] = {"session": session_id}
        if not isinstance(world, bool):  # (world="sandbox/", as rollback takes it, would capture the whole tree)
            raise InvalidInput(f"world must be True (capture the whole working tree) or False, not {world!r}")
        if ttl is not None:
            meta["expires_at"] = self._expiry(ttl)
        if metadata is not None and _check_metadata(metadata):
            meta["user"] = metadata
        if isinstance(tags, (str, bytes)):  # (iterable: "good" would be the tags g, o, o, d)
            raise InvalidInput(f"tags must be a list of strings, not the single {type(tags).__name__} {tags!r}")
        if not isinstance(tags, (list, tuple, set, frozenset)):
            raise InvalidInput(f"tags must be a list of strings, not {type(tags).__name__} {tags!r}"[:200])
        if tags:
            if not all(isinstance(t, str) and t for t in tags):
                raise InvalidInput(f"tags must be non-empty strings, not {list(tags)!r}")
            meta["tags"] = list(tags)
        from agentsnap_core.format.snapshottable import _class_name, is_typed

        if is_typed(agent):
            meta["class"] = _class_name(type(agent))
        layers = dict(layers)
        trace = layers.pop("trace", [])
        ref = session_ref(agent_id, session_id)
        deadline = time.monotonic() + _RETRY_SECONDS
        for attempt in itertools.count():
            try:
                snap = self.repo.snapshot(message, agent=agent_id, layers=layers, trace=trace, capture_world=world,
                                          ref=ref, move_head=False, meta=meta)
                return snap.id
            except RefConflict:  # another writer saved to the same session first: re-parent on its snapshot
                if time.monotonic() >= deadline:
                    break
                time.sleep(_backoff(attempt))
        raise AgentSnapError(f"session {agent_id}/{session_id} is being written too fast to append to; retry")

    def _expiry(self, ttl: float) -> float:
        if isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or not 0 < ttl < float("inf"):
            raise InvalidInput(f"ttl must be a positive number of seconds, not {ttl!r}")
        return self.clock() + float(ttl)

    def restore(self, snapshot: str, into: Any = None, *, world: bool = False) -> Any:
        """Load ``snapshot`` into ``into`` (or a new instance of the saved class) and return the agent.

        ``world=True`` also puts the working tree's files back as a ``save(world=True)`` captured them (each file as
        the snapshot has it, undoable, the branch you work on left where it is); without it only the agent is loaded.
        """
        snap = self._live(snapshot)
        _check_world(snap, world)
        layers = {name: self.repo.read_layer(snap, name) for name in snap.layers if name != "world"}
        agent = self._apply(snap, layers, into)
        if world:
            self.repo.restore(snap.id, paths=[str(self.repo.root)])  # (the whole tree as a path restore)
        return agent

    def _apply(self, snap: Snapshot, layers: dict[str, Any], into: Any) -> Any:
        if into is None:
            from agentsnap_core.format.snapshottable import _blank, _find_class

            cls_ref = (snap.manifest.get("meta") or {}).get("class")
            if not cls_ref:
                raise AgentSnapError(f"snapshot {snap.id[:12]} does not name a Snapshottable class; pass into=<agent>")
            into = _blank(_find_class(cls_ref, f"snapshot {snap.id[:12]}"))
        if not plugins.restore(into, layers, self.repo, snapshot=snap, trust_pickle=self.trust_pickle):
            raise AgentSnapError(f"no installed adapter could restore into {type(into).__name__}")
        return into

    def _live(self, spec: str | SnapshotInfo) -> Snapshot:
        snap = self.repo.get(_name(spec))
        refuse_dead(self.repo, snap, now=self.clock())
        return snap

    # ---------------------------------------------------------------- handoff / lineage / timeline
    def handoff(self, snapshot: str, target_agent_id: str, *, session_id: str | None = None, message: str = "",
                metadata: dict[str, Any] | None = None, ttl: float | None = None) -> str:
        """A new snapshot of ``snapshot``'s state owned by ``target_agent_id``; its first parent is the source.

        The target session (default: the source's) keeps its own history too: its previous newest
        snapshot becomes the second parent.
        """
        _check_id("target_agent_id", target_agent_id)
        if session_id is not None:
            _check_id("session_id", session_id)
        if metadata is not None:
            _check_metadata(metadata)
        src = self._live(snapshot)
        src_meta = src.manifest.get("meta") or {}
        session = session_id or str(src_meta.get("session") or DEFAULT_SESSION)
        layers = {n: self.repo.read_layer(src, n) for n in src.layers if n not in ("world", "effects")}
        meta: dict[str, Any] = {"session": session, "handoff_from": {"id": src.id, "agent": src.manifest.get("agent", "")}}
        for key in ("class", "tags"):
            if key in src_meta:
                meta[key] = src_meta[key]
        meta["user"] = {**(src_meta.get("user") or {}), **(metadata or {})}
        if ttl is not None:
            meta["expires_at"] = self._expiry(ttl)
        trace = layers.pop("trace", None) or []
        ref = session_ref(target_agent_id, session)
        text = message or f"handoff: {src.manifest.get('agent', '') or src.id[:12]} -> {target_agent_id}"
        deadline = time.monotonic() + _RETRY_SECONDS
        for attempt in itertools.count():
            tip = self.repo.refs.get_ref(ref)
            parents = [src.id] + ([tip] if tip and tip != src.id else [])
            try:
                return self.repo.snapshot(text, agent=target_agent_id, layers=layers, trace=trace, capture_world=False,
                                          parents=parents, ref=ref, move_head=False, meta=meta).id
            except RefConflict:
                if time.monotonic() >= deadline:
                    break
                time.sleep(_backoff(attempt))
        raise AgentSnapError(f"session {target_agent_id}/{session} is being written too fast to hand off into; retry")

    def lineage(self, snapshot: str) -> list[SnapshotInfo]:
        """``snapshot`` and its first-parent ancestors, newest first (across handoffs and expired steps)."""
        oid = self.repo.resolve(_name(snapshot))
        out = []
        while oid:
            snap = Snapshot(oid, self.repo.manifest(oid))
            out.append(SnapshotInfo.of(snap))
            oid = snap.parents[0] if snap.parents else ""
        return out

    def timeline(self, agent_id: str | None = None, session_id: str | None = None, *, limit: int | None = None,
                 include_expired: bool = False) -> list[SnapshotInfo]:
        """Snapshots saved by the client, newest first, for one agent and/or session (default: all; ``limit``: at
        most that many, 0 or more)."""
        if agent_id is not None:  # (a typo'd type would list every agent's snapshots, or raise TypeError)
            _check_id("agent_id", agent_id)
        if session_id is not None:
            _check_id("session_id", session_id)
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
            raise InvalidInput(f"limit must be a whole number of snapshots (0 or more) or None, not {limit!r}")
        if limit == 0:
            return []
        prefix = AGENTS + (f"{_enc(agent_id)}/" if agent_id else "")
        starts = [oid for name, oid in self.repo.refs.list_refs(prefix).items()
                  if session_id is None or name.endswith("/" + _enc(session_id))]
        marks = tombstones(self.repo)
        now = self.clock()
        out: list[SnapshotInfo] = []
        for snap in self.repo.walk(sorted(set(starts))):
            meta = snap.manifest.get("meta") or {}
            if "session" not in meta:
                continue  # not saved through the client
            if agent_id is not None and snap.manifest.get("agent") != agent_id:
                continue
            if session_id is not None and meta.get("session") != session_id:
                continue
            if not include_expired and death_of(self.repo, snap.id, snap.manifest, now=now, marks=marks):
                continue
            out.append(SnapshotInfo.of(snap))
            if limit is not None and len(out) >= limit:
                break
        return out

    def latest(self, agent_id: str, session_id: str = DEFAULT_SESSION) -> SnapshotInfo | None:
        """The newest live snapshot of a session, or None."""
        _check_id("agent_id", agent_id)  # (None would give the newest snapshot of ANY agent)
        _check_id("session_id", session_id)
        found = self.timeline(agent_id, session_id, limit=1)
        return found[0] if found else None

    # ---------------------------------------------------------------- metadata / lifetime
    def metadata(self, snapshot: str) -> dict[str, Any]:
        """Everything the store knows about a live snapshot (ids, agent, session, time, user metadata, ...)."""
        return SnapshotInfo.of(self._live(snapshot)).as_dict()

    def exists(self, snapshot: str) -> bool:
        """True when ``snapshot`` names a live (not expired, pruned or deleted) snapshot."""
        try:
            self._live(snapshot)
        except (UnknownSnapshot, SnapshotGone):
            return False
        except AgentSnapError:
            return False
        return True

    def expire(self, snapshot: str) -> None:
        """Expire a snapshot now: it leaves queries, ``gc`` reclaims its layers (idempotent)."""
        bury(self.repo, [self.repo.resolve(_name(snapshot))], "expire")

    def delete(self, snapshot: str) -> None:
        """Delete a snapshot: like :meth:`expire`, recorded as a deletion."""
        bury(self.repo, [self.repo.resolve(_name(snapshot))], "delete")

    def gc(self, grace_seconds: float = 3600.0) -> dict[str, Any]:
        """Reclaim the layers of dead snapshots (and anything unreachable) older than ``grace_seconds``."""
        from agentsnap_core.repository.maintenance import gc

        if isinstance(grace_seconds, bool) or not isinstance(grace_seconds, (int, float)) or not grace_seconds >= 0:
            raise InvalidInput(f"grace_seconds must be a number of seconds, 0 or more, not {grace_seconds!r}")
        return gc(self.repo, grace_seconds, now=self.clock())

    def verify(self) -> dict[str, Any]:
        """``agentsnap verify`` as of the client's clock: dead snapshots are tombstones, their layers may be gone."""
        from agentsnap_core.layers.effects_ledger import verify_ledger
        from agentsnap_core.repository.maintenance import verify

        report = verify(self.repo, now=self.clock())
        ledger = verify_ledger(self.repo)
        report["problems"] += [{"kind": "effects", "id": None, **p} for p in ledger["problems"]]
        report["ok"] = report["ok"] and not ledger["problems"]
        return report


class AsyncClient:
    """:class:`Client` for asyncio code: the same methods, awaitable.

    The agent is captured (``save``) and loaded (``restore``) in the calling task, so no other thread
    touches it; store reads and writes run in one worker thread, one call at a time.
    """

    def __init__(self, path: str | os.PathLike[str] = ".", **kwargs: Any) -> None:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="agentsnap-client")
        self._closed = False
        self._client: Client = self._pool.submit(partial(Client, path, **kwargs)).result()

    @property
    def client(self) -> Client:
        return self._client

    async def _run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        if self._closed:
            raise AgentSnapError("this AsyncClient is closed; open a new one")
        return await asyncio.get_running_loop().run_in_executor(self._pool, partial(fn, *args, **kwargs))

    async def save(self, agent: Any, **kwargs: Any) -> str:
        if self._closed:
            raise AgentSnapError("this AsyncClient is closed; open a new one")
        layers = self._client.capture(agent)
        return await self._run(self._client._write, layers, agent, **kwargs)

    async def restore(self, snapshot: str, into: Any = None, *, world: bool = False) -> Any:
        def read() -> tuple[Snapshot, dict[str, Any]]:
            snap = self._client._live(snapshot)
            _check_world(snap, world)
            return snap, {n: self._client.repo.read_layer(snap, n) for n in snap.layers if n != "world"}

        snap, layers = await self._run(read)
        agent = self._client._apply(snap, layers, into)
        if world:
            repo = self._client.repo
            await self._run(lambda: repo.restore(snap.id, paths=[str(repo.root)]))
        return agent

    async def handoff(self, snapshot: str, target_agent_id: str, **kwargs: Any) -> str:
        return await self._run(self._client.handoff, snapshot, target_agent_id, **kwargs)

    async def timeline(self, agent_id: str | None = None, session_id: str | None = None, **kwargs: Any) -> list[SnapshotInfo]:
        return await self._run(self._client.timeline, agent_id, session_id, **kwargs)

    async def lineage(self, snapshot: str) -> list[SnapshotInfo]:
        return await self._run(self._client.lineage, snapshot)

    async def latest(self, agent_id: str, session_id: str = DEFAULT_SESSION) -> SnapshotInfo | None:
        return await self._run(self._client.latest, agent_id, session_id)

    async def metadata(self, snapshot: str) -> dict[str, Any]:
        return await self._run(self._client.metadata, snapshot)

    async def exists(self, snapshot: str) -> bool:
        return await self._run(self._client.exists, snapshot)

    async def expire(self, snapshot: str) -> None:
        await self._run(self._client.expire, snapshot)

    async def delete(self, snapshot: str) -> None:
        await self._run(self._client.delete, snapshot)

    async def gc(self, grace_seconds: float = 3600.0) -> dict[str, Any]:
        return await self._run(self._client.gc, grace_seconds)

    async def verify(self) -> dict[str, Any]:
        return await self._run(self._client.verify)

    async def aclose(self) -> None:
        """Close the store and the worker thread; closing again does nothing."""
        if self._closed:
            return
        await self._run(self._client.close)
        self._closed = True
        self._pool.shutdown(wait=True)

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
