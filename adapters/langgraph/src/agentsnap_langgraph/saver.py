"""``PFSaver``: a LangGraph checkpointer whose checkpoints are agentsnap snapshots.

Storage (inside the agentsnap store directory):

* every ``put`` writes one snapshot: a manifest (``agent="langgraph"``, thread / namespace / step /
  source / checkpoint id in ``meta``) whose ``state`` layer is a document holding the serialized
  checkpoint, its metadata and a map channel -> (version, type, object id); the channel values are
  content-addressed objects listed under the layer's ``refs`` (so ``verify`` and ``gc`` see them).
  Only channels in ``new_versions`` are serialized and written; unchanged channels point at the
  objects an ancestor wrote, and equal values are stored once across threads and forks;
* ``langgraph.sqlite`` (:mod:`agentsnap_langgraph._index`) indexes checkpoints, channel blobs and
  pending writes for LangGraph's queries;
* per-thread refs (``refs/heads/langgraph/<thread>`` for the root namespace, ``refs/langgraph-ns/...``
  for subgraph namespaces) point at the newest snapshot and move by compare-and-swap in
  :meth:`PFSaver.flush`, after the objects were made durable (group commit: a background thread
  flushes every ``flush_interval`` seconds, and on ``close()`` / interpreter exit).
"""

from __future__ import annotations

import atexit
import getpass
import os
import random
import re
import socket
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from pathlib import Path
from types import TracebackType
from typing import Any

from agentsnap import content, world
from agentsnap.encoding import pack
from agentsnap.errors import AgentSnapError, InvalidInput, RefConflict, StoreNotFound, UnknownSnapshot
from agentsnap.localstore import LocalStore
from agentsnap.objects import Kind
from agentsnap.plugins import get_plugin_manager
from agentsnap.repo import MANIFEST_FORMAT, PRIMARY, STORE_DIR, Repo
from agentsnap.store import ANY, RefUpdate, SnapshotRow
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    SerializerProtocol,
    get_checkpoint_id,
    get_checkpoint_metadata,
)
from langgraph.checkpoint.base.id import uuid6

from ._index import CheckpointIndex, CheckpointRow, version_key

STATE_FORMAT = "agentsnap-langgraph-checkpoint"
STATE_VERSION = 1
INDEX_FILE = "langgraph.sqlite"
ROOT_REF_PREFIX = "refs/heads/langgraph/"
NS_REF_PREFIX = "refs/langgraph-ns/"
_SAFE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]*$")

Pending = tuple[str, str, tuple[str, ...]]
ChannelMap = dict[str, tuple[str, str, str | None]]  # channel -> (version key, type, object id)


def encode_name(value: str) -> str:
    """A thread id or namespace as one ref-name component (hex-escaped with '@' when unsafe)."""
    if _SAFE.match(value) and ".." not in value and not value.endswith(".lock") and len(value) <= 200:
        return value
    return "@" + value.encode().hex()


def thread_ref(thread_id: str, checkpoint_ns: str = "") -> str:
    """The ref naming the newest snapshot of a thread (namespace)."""
    if not checkpoint_ns:
        return ROOT_REF_PREFIX + encode_name(thread_id)
    return f"{NS_REF_PREFIX}{encode_name(thread_id)}/{encode_name(checkpoint_ns)}"


def _author() -> str:
    try:
        return f"{getpass.getuser()}@{socket.gethostname()}"
    except Exception:
        return "unknown"


def open_store(path: str | os.PathLike[str] | None) -> Repo:
    """Open (creating if missing) the store: ``path`` is a project dir or a store dir; default ./.agentsnap."""
    if path is None and os.environ.get("AGENTSNAP_DIR"):
        store_dir = Path(os.environ["AGENTSNAP_DIR"]).resolve()
    else:
        base = Path(path or ".").resolve()
        store_dir = base if (base / "format.json").exists() or base.name == STORE_DIR else base / STORE_DIR
    if store_dir.is_file():
        raise AgentSnapError(f"{store_dir} is a linked worktree file; give the store directory instead")
    try:
        return Repo(store_dir.parent, store_dir)
    except StoreNotFound:
        pass
    if store_dir.name == STORE_DIR:
        return Repo.init(store_dir.parent)
    LocalStore(store_dir, create=True).close()
    repo = Repo(store_dir.parent, store_dir)
    repo.refs.set_head(PRIMARY, "refs/heads/main", None)
    return repo


class _Shared:
    """Mutable state shared by a saver and its ``with_allowlist`` clones."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.flush_lock = threading.Lock()
        #: ref -> [(snapshot, checkpoint id, parent snapshots)] written since the last flush
        self.pending_refs: dict[str, list[Pending]] = {}
        self.pending_rows: list[SnapshotRow] = []
        self.pending_seqs: list[int] = []
        #: (thread, ns) -> (checkpoint id, snapshot, channel map) of the newest put
        self.last: dict[tuple[str, str], tuple[str, str, ChannelMap]] = {}
        #: (thread, ns) -> extra parent snapshot for the next put (merge_thread)
        self.extra_parents: dict[tuple[str, str], str] = {}
        self.cache: OrderedDict[str, bytes] = OrderedDict()
        self.cache_bytes = 0
        self.closed = False
        self.wake = threading.Event()


class PFSaver(BaseCheckpointSaver[str], AbstractContextManager, AbstractAsyncContextManager):
    """A LangGraph checkpointer on the agentsnap store (sync and async, all optional capabilities).

    Args:
        path: project directory holding ``.agentsnap`` (created if missing), or a store directory.
            Default: ``AGENTSNAP_DIR`` if set, else ``./.agentsnap``.
        serde: LangGraph serializer (default ``JsonPlusSerializer`` without pickle fallback;
            an ``EncryptedSerializer`` works - note the snapshot ``meta`` keeps thread, step and
            source in plain text).
        world_root: when set, every checkpoint also snapshots this directory (the ``world``
            layer); :meth:`restore_world` / :meth:`fork_thread` bring the files back.
        flush_interval: seconds between group commits (objects made durable, refs moved).
            ``0`` flushes inside every ``put`` (slowest, each checkpoint durable on return).
        cache_bytes: size of the in-process cache of channel values.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        serde: SerializerProtocol | None = None,
        world_root: str | os.PathLike[str] | None = None,
        flush_interval: float = 0.2,
        cache_bytes: int = 64 * 1024 * 1024,
    ) -> None:
        super().__init__(serde=serde)
        if flush_interval < 0:
            raise InvalidInput(f"flush_interval must be >= 0 seconds, not {flush_interval}")
        self.repo = open_store(path)
        self.index = CheckpointIndex(self.repo.store_dir / INDEX_FILE)
        self.world_root = Path(world_root).resolve() if world_root is not None else None
        if self.world_root is not None and not self.world_root.is_dir():
            raise InvalidInput(f"world_root {str(world_root)!r} is not a directory")
        self.flush_interval = flush_interval
        self.cache_limit = cache_bytes
        self._author = _author()
        self._s = _Shared()
        self._recover()
        self._flusher: threading.Thread | None = None
        if flush_interval > 0:
            self._flusher = threading.Thread(
                target=_flush_loop, args=(weakref.ref(self), self._s, flush_interval), daemon=True, name="pfsaver-flush"
            )
            self._flusher.start()
        atexit.register(_close_at_exit, weakref.ref(self))

    @classmethod
    def from_url(cls, url: str, **kwargs: Any) -> PFSaver:
        """Open a saver by URL: a path or ``file://`` URL today; PostgreSQL once core ships that store."""
        if url.startswith(("postgres://", "postgresql://")):
            try:
                from agentsnap.stores import open_store as _core_open_store  # noqa: F401
            except ImportError:
                pass
            raise AgentSnapError(
                "PFSaver on a PostgreSQL store is not yet available in this version of agentsnap-langgraph; "
                "use PFSaver(path) with the embedded store"
            )
        if url.startswith("file://"):
            url = url[len("file://") :]
        return cls(url, **kwargs)

    # ------------------------------------------------------------------ lifecycle
    def __enter__(self) -> PFSaver:
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    async def __aenter__(self) -> PFSaver:
        return self

    async def __aexit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        """Flush pending ref updates and release the store (idempotent)."""
        if self._s.closed:
            return
        self.flush()
        self._s.closed = True
        self._s.wake.set()
        self.index.close()
        self.repo.close()

    def flush(self) -> None:
        """Make every checkpoint written so far durable and move the thread refs (compare-and-swap)."""
        s = self._s
        with s.flush_lock:
            with s.lock:
                if not s.pending_refs and not s.pending_seqs:
                    return
                refs = {name: list(entries) for name, entries in s.pending_refs.items()}
                rows, seqs = list(s.pending_rows), list(s.pending_seqs)
                s.pending_refs.clear()
                s.pending_rows.clear()
                s.pending_seqs.clear()
            try:
                self.repo.objects.barrier()  # objects durable before any ref names them
                for row in rows:
                    self.repo.refs.index_snapshot(row)
                self._move_refs(refs)
                self.index.mark_flushed(seqs)
            except BaseException:
                with s.lock:  # keep them for the next attempt
                    for name, entries in refs.items():
                        s.pending_refs.setdefault(name, [])[:0] = entries
                    s.pending_rows[:0] = rows
                    s.pending_seqs[:0] = seqs
                raise

    def _move_refs(self, refs: dict[str, list[Pending]]) -> None:
        """Move each ref through the new snapshots that no other new snapshot descends from.

        Every such branch tip gets a reflog entry (so gc keeps side branches that time travel
        created); the ref ends at the newest checkpoint, or stays where another writer put a newer one.
        """
        for _attempt in range(20):
            updates = []
            for name, entries in refs.items():
                parents = {p for _s, _c, ps in entries for p in ps}
                tips = sorted({(cid, snap) for snap, cid, _ps in entries if snap not in parents})
                current = self.repo.refs.get_ref(name)
                current_cid = self.index.checkpoint_of_snapshot(current) if current else None
                prev = current
                for _cid, snap in tips:
                    if snap != prev:
                        updates.append(RefUpdate(name, snap, prev))
                        prev = snap
                if current is not None and current_cid is not None and tips and current_cid > tips[-1][0]:
                    if prev != current:
                        updates.append(RefUpdate(name, current, prev))
            if not updates:
                return
            try:
                self.repo.refs.update_refs(updates, "langgraph: checkpoint")
                return
            except RefConflict:
                continue
        raise AgentSnapError("could not move the LangGraph thread refs: other writers keep moving them; retry")

    def _queue(self, ref: str, snap: str, cid: str, parents: Sequence[str]) -> None:
        """Remember a new snapshot for the next flush (caller holds ``self._s.lock``)."""
        self._s.pending_refs.setdefault(ref, []).append((snap, cid, tuple(parents)))

    def _recover(self) -> None:
        """Finish rows a crashed writer committed but never flushed; drop those whose objects are gone."""
        rows = self.index.unflushed()
        if not rows:
            return
        objects = self.repo.objects
        lost = [r for r in rows if not objects.has(r[4])]
        if lost:
            with self.index.tx() as db:
                db.executemany("DELETE FROM lg_checkpoints WHERE seq=?", [(r[0],) for r in lost])
        keep = [r for r in rows if objects.has(r[4])]
        refs: dict[str, list[Pending]] = {}
        for _seq, thread_id, ns, cid, snap in keep:
            refs.setdefault(thread_ref(thread_id, ns), []).append((snap, cid, tuple(self.repo.manifest(snap)["parents"])))
        objects.barrier()
        self._move_refs(refs)
        self.index.mark_flushed([r[0] for r in keep])

    # ------------------------------------------------------------------ objects
    def _put_blob(self, data: bytes) -> str:
        oid = content.put_bytes(self.repo.objects, data)
        self._remember(oid, data)
        return oid

    def _remember(self, oid: str, data: bytes) -> None:
        s = self._s
        with s.lock:
            if oid in s.cache:
                s.cache.move_to_end(oid)
                return
            s.cache[oid] = data
            s.cache_bytes += len(data)
            while s.cache_bytes > self.cache_limit and s.cache:
                _, old = s.cache.popitem(last=False)
                s.cache_bytes -= len(old)

    def _get_blob(self, oid: str) -> bytes:
        with self._s.lock:
            data = self._s.cache.get(oid)
        if data is None:
            data = content.get_bytes(self.repo.objects, oid)
            self._remember(oid, data)
        return data

    # ------------------------------------------------------------------ put
    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Store a checkpoint as a snapshot; only channels in ``new_versions`` are written."""
        conf = config["configurable"]
        thread_id = str(conf["thread_id"])
        ns = conf.get("checkpoint_ns", "") or ""
        parent_id = conf.get("checkpoint_id")
        cp = dict(checkpoint)
        values: dict[str, Any] = cp.pop("channel_values", {})
        new_blobs: list[tuple[str, str, str, str | None]] = []
        fresh: ChannelMap = {}
        for ch, ver in new_versions.items():
            vkey = version_key(ver)
            if ch in values:
                typ, data = self.serde.dumps_typed(values[ch])
                oid = self._put_blob(data)
            else:
                typ, oid = "empty", None
            new_blobs.append((ch, vkey, typ, oid))
            fresh[ch] = (vkey, typ, oid)
        channels = self._channel_map(thread_id, ns, parent_id, cp.get("channel_versions", {}), fresh)
        ckpt_t = self.serde.dumps_typed(cp)
        md = get_checkpoint_metadata(config, metadata)
        meta_t = self.serde.dumps_typed(md)
        parents = []
        parent_snap = self._parent_snapshot(thread_id, ns, parent_id)
        if parent_snap:
            parents.append(parent_snap)
        with self._s.lock:
            extra = self._s.extra_parents.pop((thread_id, ns), None)
        if extra and extra not in parents:
            parents.append(extra)
        state_doc = {
            "format": STATE_FORMAT,
            "v": STATE_VERSION,
            "thread_id": thread_id,
            "checkpoint_ns": ns,
            "checkpoint_id": checkpoint["id"],
            "parent_checkpoint_id": parent_id,
            "checkpoint": [ckpt_t[0], ckpt_t[1]],
            "metadata": [meta_t[0], meta_t[1]],
            "channels": {ch: list(v) for ch, v in channels.items()},
        }
        step = md.get("step")
        source = md.get("source")
        run_id = md.get("run_id")
        meta = {
            "thread_id": thread_id,
            "checkpoint_ns": ns,
            "checkpoint_id": checkpoint["id"],
            "step": step if isinstance(step, int) else None,
            "source": source if isinstance(source, str) else None,
        }
        world_rec = self._capture_world() if self.world_root is not None else None
        snap = self._write_snapshot(state_doc, channels, parents, meta, world_rec)
        row: CheckpointRow = (thread_id, ns, checkpoint["id"], parent_id, snap.id, ckpt_t[0], ckpt_t[1], meta_t[0], meta_t[1])
        seq = self.index.insert_checkpoint(row, str(run_id) if run_id is not None else None, new_blobs)
        with self._s.lock:
            self._s.last[(thread_id, ns)] = (checkpoint["id"], snap.id, channels)
            self._queue(thread_ref(thread_id, ns), snap.id, checkpoint["id"], parents)
            self._s.pending_rows.append(snap.row)
            self._s.pending_seqs.append(seq)
        if self.flush_interval == 0:
            self.flush()
        return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": checkpoint["id"]}}

    def _channel_map(
        self, thread_id: str, ns: str, parent_id: str | None, versions: ChannelVersions, fresh: ChannelMap
    ) -> ChannelMap:
        """channel -> (version key, type, object id) for every channel of the checkpoint."""
        with self._s.lock:
            last = self._s.last.get((thread_id, ns))
        known = last[2] if last else {}
        out: ChannelMap = {}
        for ch, ver in versions.items():
            vkey = version_key(ver)
            if ch in fresh and fresh[ch][0] == vkey:
                out[ch] = fresh[ch]
            elif ch in known and known[ch][0] == vkey:
                out[ch] = known[ch]
            else:
                found = self.index.blob(thread_id, ns, ch, vkey)
                if found is not None:
                    out[ch] = (vkey, found[0], found[1])
        return out

    def _parent_snapshot(self, thread_id: str, ns: str, parent_id: str | None) -> str | None:
        if not parent_id:
            return None
        with self._s.lock:
            last = self._s.last.get((thread_id, ns))
        if last and last[0] == parent_id:
            return last[1]
        return self.index.snapshot_of(thread_id, ns, parent_id)

    def _capture_world(self) -> dict[str, Any]:
        assert self.world_root is not None
        pm = get_plugin_manager()
        context: dict[str, Any] = {"repo": self.repo, "pm": pm, "redact": True}
        rec = pm.hook.agentsnap_capture_world(root=str(self.world_root), context=context)
        sc = context.get("statcache")
        if sc:
            sc[1].save(sc[0])
        return dict(rec)

    def _write_snapshot(
        self,
        state_doc: dict[str, Any],
        channels: ChannelMap,
        parents: list[str],
        meta: dict[str, Any],
        world_rec: dict[str, Any] | None,
    ) -> _Written:
        objects = self.repo.objects
        state_oid = content.put_value(objects, state_doc)
        blob_ids = sorted({oid for _v, _t, oid in channels.values() if oid})
        layers: dict[str, Any] = {"state": {"content": state_oid, "refs": blob_ids}}
        if world_rec is not None:
            layers["world"] = world_rec
        step = f" step {meta['step']}" if meta.get("step") is not None else ""
        source = f" ({meta['source']})" if meta.get("source") else ""
        ns = f" [{meta['checkpoint_ns']}]" if meta.get("checkpoint_ns") else ""
        message = f"langgraph {meta['thread_id']}{ns}{step}{source}"
        now = time.time()
        manifest = {
            "format": "agentsnap-manifest",
            "v": MANIFEST_FORMAT,
            "parents": parents,
            "time": now,
            "author": self._author,
            "agent": "langgraph",
            "message": message,
            "layers": layers,
            "meta": {k: v for k, v in meta.items() if v is not None},
        }
        oid = objects.put(Kind.MANIFEST, pack(manifest))
        return _Written(oid, SnapshotRow(oid, tuple(parents), now, message, "langgraph"))

    # ------------------------------------------------------------------ writes
    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Store a task's writes; idempotent per (task_id, idx), special (negative-index) channels overwrite."""
        conf = config["configurable"]
        thread_id = str(conf["thread_id"])
        ns = conf.get("checkpoint_ns", "") or ""
        checkpoint_id = conf["checkpoint_id"]
        rows, replace = [], []
        for idx, (channel, value) in enumerate(writes):
            widx = WRITES_IDX_MAP.get(channel, idx)
            typ, data = self.serde.dumps_typed(value)
            rows.append((thread_id, ns, checkpoint_id, task_id, widx, channel, typ, data, task_path))
            replace.append(widx < 0)
        if rows:
            self.index.insert_writes(rows, replace)

    # ------------------------------------------------------------------ reads
    def _tuple(self, row: CheckpointRow, config: RunnableConfig | None = None) -> CheckpointTuple:
        thread_id, ns, cid, parent_id, _snap, ckpt_type, ckpt, meta_type, meta = row
        checkpoint = self.serde.loads_typed((ckpt_type, ckpt))
        values: dict[str, Any] = {}
        with self._s.lock:
            last = self._s.last.get((thread_id, ns))
        known = last[2] if last else {}
        for ch, ver in checkpoint.get("channel_versions", {}).items():
            vkey = version_key(ver)
            if ch in known and known[ch][0] == vkey:
                typ, oid = known[ch][1], known[ch][2]
            else:
                found = self.index.blob(thread_id, ns, ch, vkey)
                if found is None:
                    continue
                typ, oid = found
            if typ == "empty" or oid is None:
                continue
            values[ch] = self.serde.loads_typed((typ, self._get_blob(oid)))
        checkpoint["channel_values"] = values
        writes = [(t, c, self.serde.loads_typed((typ, v))) for t, c, typ, v, _p, _i in self.index.writes(thread_id, ns, cid)]
        return CheckpointTuple(
            config=config
            or {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": cid}},
            checkpoint=checkpoint,
            metadata=self.serde.loads_typed((meta_type, meta)),
            parent_config=(
                {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": parent_id}}
                if parent_id
                else None
            ),
            pending_writes=writes,
        )

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint named by ``config`` (or the thread's newest); never touches files on disk."""
        conf = config["configurable"]
        thread_id = str(conf["thread_id"])
        ns = conf.get("checkpoint_ns", "") or ""
        checkpoint_id = get_checkpoint_id(config)
        row = self.index.get_row(thread_id, ns, checkpoint_id)
        if row is None:
            return None
        return self._tuple(row, config if checkpoint_id else None)

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """Checkpoints newest first, by thread / namespace / id, metadata ``filter``, ``before`` and ``limit``."""
        conf = (config or {}).get("configurable", {}) if config else {}
        thread_id = str(conf["thread_id"]) if conf.get("thread_id") is not None else None
        ns = conf.get("checkpoint_ns")
        checkpoint_id = conf.get("checkpoint_id")
        before_id = get_checkpoint_id(before) if before else None
        if limit is not None and limit <= 0:
            return
        sql_limit = None if filter else limit
        count = 0
        for row in self.index.iter_rows(thread_id, ns, checkpoint_id, before_id, sql_limit):
            if filter:
                md = self.serde.loads_typed((row[7], row[8]))
                if not all(md.get(k) == v for k, v in filter.items()):
                    continue
            yield self._tuple(row)
            count += 1
            if limit is not None and count >= limit:
                return

    # ------------------------------------------------------------------ deletion and copies
    def delete_thread(self, thread_id: str) -> None:
        """Remove a thread's checkpoints, blobs and writes from the index and drop its refs.

        The snapshots stay in the object store (reachable through the reflog) until ``agentsnap gc``.
        """
        thread_id = str(thread_id)
        self.flush()
        namespaces = self.index.namespaces(thread_id)
        with self.index.tx() as db:
            for table in ("lg_checkpoints", "lg_blobs", "lg_writes"):
                db.execute(f"DELETE FROM {table} WHERE thread_id=?", (thread_id,))
        with self._s.lock:
            for key in [k for k in self._s.last if k[0] == thread_id]:
                del self._s.last[key]
        self._reset_refs(thread_id, namespaces)

    def _reset_refs(self, thread_id: str, namespaces: Sequence[str]) -> None:
        """Point each namespace ref of a thread at its newest remaining snapshot (or delete it)."""
        for _attempt in range(20):
            updates = []
            for ns in namespaces:
                name = thread_ref(thread_id, ns)
                latest = self.index.latest_snapshot(thread_id, ns)
                current = self.repo.refs.get_ref(name)
                target = latest[1] if latest else None
                if current != target:
                    updates.append(RefUpdate(name, target, current))
            if not updates:
                return
            try:
                self.repo.refs.update_refs(updates, f"langgraph: reset {thread_id}")
                return
            except RefConflict:
                continue

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Remove the checkpoints (and their writes) whose metadata ``run_id`` is in ``run_ids``."""
        run_ids = [str(r) for r in run_ids]
        if not run_ids:
            return
        self.flush()
        marks = ",".join("?" * len(run_ids))
        with self.index.tx() as db:
            victims = db.execute(
                f"SELECT thread_id, checkpoint_ns, checkpoint_id FROM lg_checkpoints WHERE run_id IN ({marks})", run_ids
            ).fetchall()
            db.executemany(
                "DELETE FROM lg_writes WHERE thread_id=? AND checkpoint_ns=? AND checkpoint_id=?", victims
            )
            db.execute(f"DELETE FROM lg_checkpoints WHERE run_id IN ({marks})", run_ids)
        touched: dict[str, set[str]] = {}
        for thread_id, ns, _cid in victims:
            touched.setdefault(thread_id, set()).add(ns)
        with self._s.lock:
            for thread_id, nss in touched.items():
                for ns in nss:
                    self._s.last.pop((thread_id, ns), None)
        for thread_id, nss in touched.items():
            self._reset_refs(thread_id, sorted(nss))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy every checkpoint (the whole parent chain, all namespaces) and write of a thread.

        Each copy is a new snapshot of the target thread whose parents are the copies; channel
        values are shared with the source (same objects).
        """
        self._copy(str(source_thread_id), str(target_thread_id), None)

    def _copy(self, source: str, target: str, upto: str | None) -> None:
        """Copy ``source`` to ``target``; with ``upto``, only the root chain ending at that checkpoint."""
        if source == target:
            raise InvalidInput("source and target thread are the same")
        with self.index.lock:
            rows = self.index.db.execute(
                "SELECT checkpoint_ns, checkpoint_id, parent_id, snapshot, run_id, ckpt_type, ckpt, meta_type, meta "
                "FROM lg_checkpoints WHERE thread_id=? ORDER BY checkpoint_ns, checkpoint_id",
                (source,),
            ).fetchall()
        if upto is not None:
            by_id = {r[1]: r for r in rows if r[0] == ""}
            chain: set[str] = set()
            cur: str | None = upto
            while cur and cur in by_id and cur not in chain:
                chain.add(cur)
                cur = by_id[cur][2]
            rows = [r for r in rows if r[0] != "" or r[1] in chain]
        if not rows:
            return
        mapping: dict[str, str] = {}
        queued: list[tuple[str, str, str, list[str]]] = []
        written: list[tuple[Any, ...]] = []
        snap_rows: list[SnapshotRow] = []
        for ns, cid, parent_id, snap, run_id, ctype, ckpt, mtype, meta in rows:
            manifest = self.repo.manifest(snap)
            doc = content.get_value(self.repo.objects, manifest["layers"]["state"]["content"], "langgraph state")
            doc["thread_id"] = target
            parents = [mapping.get(p, p) for p in manifest["parents"]]
            channels = {ch: tuple(v) for ch, v in doc["channels"].items()}
            new_meta = dict(manifest.get("meta", {}), thread_id=target)
            new = self._write_snapshot(doc, channels, parents, new_meta, manifest["layers"].get("world"))
            mapping[snap] = new.id
            queued.append((thread_ref(target, ns), new.id, cid, parents))
            written.append((target, ns, cid, parent_id, new.id, run_id, ctype, ckpt, mtype, meta))
            snap_rows.append(new.row)
        copied_ids = {(r[0], r[1]) for r in rows}
        with self.index.tx() as db:
            db.executemany(
                "INSERT OR REPLACE INTO lg_checkpoints (thread_id, checkpoint_ns, checkpoint_id, parent_id, snapshot, "
                "run_id, ckpt_type, ckpt, meta_type, meta, flushed) VALUES (?,?,?,?,?,?,?,?,?,?,0)",
                written,
            )
            db.execute(
                "INSERT OR REPLACE INTO lg_blobs SELECT ?, checkpoint_ns, channel, version, type, oid "
                "FROM lg_blobs WHERE thread_id=?",
                (target, source),
            )
            writes = db.execute(
                "SELECT checkpoint_ns, checkpoint_id, task_id, idx, channel, type, value, task_path FROM lg_writes "
                "WHERE thread_id=?",
                (source,),
            ).fetchall()
            db.executemany(
                "INSERT OR REPLACE INTO lg_writes VALUES (?,?,?,?,?,?,?,?,?)",
                [(target, *w) for w in writes if (w[0], w[1]) in copied_ids],
            )
            seqs = [
                r[0]
                for r in db.execute("SELECT seq FROM lg_checkpoints WHERE thread_id=? AND flushed=0", (target,)).fetchall()
            ]
        with self._s.lock:
            self._s.pending_rows.extend(snap_rows)
            self._s.pending_seqs.extend(seqs)
            for item in queued:
                self._queue(*item)
        self.flush()

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """``keep_latest``: keep only the newest checkpoint per namespace (its snapshot re-rooted);
        ``delete``: remove the threads. Not safe for graphs using ``DeltaChannel`` (beta)."""
        if strategy not in ("keep_latest", "delete"):
            raise InvalidInput(f"unknown prune strategy {strategy!r}; use 'keep_latest' or 'delete'")
        for thread_id in thread_ids:
            if strategy == "delete":
                self.delete_thread(thread_id)
            else:
                self._keep_latest(str(thread_id))

    def _keep_latest(self, thread_id: str) -> None:
        self.flush()
        for ns in self.index.namespaces(thread_id):
            row = self.index.get_row(thread_id, ns, None)
            if row is None:
                continue
            cid, snap = row[2], row[4]
            manifest = self.repo.manifest(snap)
            doc = content.get_value(self.repo.objects, manifest["layers"]["state"]["content"], "langgraph state")
            doc["parent_checkpoint_id"] = None
            channels = {ch: tuple(v) for ch, v in doc["channels"].items()}
            new = self._write_snapshot(doc, channels, [], dict(manifest.get("meta", {})), manifest["layers"].get("world"))
            keep_versions = [(ch, v[0]) for ch, v in channels.items()]
            with self.index.tx() as db:
                db.execute(
                    "DELETE FROM lg_checkpoints WHERE thread_id=? AND checkpoint_ns=? AND checkpoint_id<>?", (thread_id, ns, cid)
                )
                db.execute(
                    "DELETE FROM lg_writes WHERE thread_id=? AND checkpoint_ns=? AND checkpoint_id<>?", (thread_id, ns, cid)
                )
                db.execute(
                    "UPDATE lg_checkpoints SET snapshot=?, parent_id=NULL, flushed=0 WHERE thread_id=? AND checkpoint_ns=?",
                    (new.id, thread_id, ns),
                )
                blobs = db.execute(
                    "SELECT channel, version FROM lg_blobs WHERE thread_id=? AND checkpoint_ns=?", (thread_id, ns)
                ).fetchall()
                drop = set(blobs) - set(keep_versions)
                db.executemany(
                    "DELETE FROM lg_blobs WHERE thread_id=? AND checkpoint_ns=? AND channel=? AND version=?",
                    [(thread_id, ns, ch, v) for ch, v in drop],
                )
                seq = db.execute(
                    "SELECT seq FROM lg_checkpoints WHERE thread_id=? AND checkpoint_ns=?", (thread_id, ns)
                ).fetchone()[0]
            with self._s.lock:
                self._s.last.pop((thread_id, ns), None)
                self._s.pending_rows.append(new.row)
                self._s.pending_seqs.append(seq)
                self._queue(thread_ref(thread_id, ns), new.id, cid, [])
        self.flush()

    # ------------------------------------------------------------------ async (direct: all work is local)
    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return self.get_tuple(config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        for item in self.list(config, filter=filter, before=before, limit=limit):
            yield item

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return self.put(config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        self.put_writes(config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        self.delete_thread(thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        self.delete_for_runs(run_ids)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        self.copy_thread(source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        self.prune(thread_ids, strategy=strategy)

    def get_next_version(self, current: str | int | None, channel: None = None) -> str:
        """``"<32-digit counter>.<random>"``: the format of LangGraph's InMemorySaver and SqliteSaver."""
        if current is None:
            number = 0
        elif isinstance(current, int):
            number = current
        else:
            number = int(str(current).split(".")[0])
        return f"{number + 1:032}.{random.random():016}"

    # ------------------------------------------------------------------ agentsnap verbs on threads
    def snapshot_id(self, config: RunnableConfig) -> str:
        """The agentsnap snapshot id of the checkpoint ``config`` names (or the thread's newest)."""
        conf = config["configurable"]
        row = self.index.get_row(str(conf["thread_id"]), conf.get("checkpoint_ns", "") or "", get_checkpoint_id(config))
        if row is None:
            raise UnknownSnapshot(f"LangGraph checkpoint {conf.get('thread_id')}/{conf.get('checkpoint_id', 'latest')}")
        return row[4]

    def restore_world(self, config: RunnableConfig, *, to: str | os.PathLike[str] | None = None) -> dict[str, Any]:
        """Make ``world_root`` (or the empty directory ``to``) equal the files captured with a checkpoint."""
        snap = self.repo.get(self.snapshot_id(config))
        rec = snap.layers.get("world")
        if rec is None:
            raise AgentSnapError(
                f"checkpoint snapshot {snap.id[:12]} has no files: create the saver with PFSaver(world_root=...)"
            )
        if to is not None:
            dest = Path(to).resolve()
            if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
                from agentsnap.errors import TargetNotEmpty

                raise TargetNotEmpty(str(to))
            dest.mkdir(parents=True, exist_ok=True)
            entries = world.load_tree(self.repo.objects, rec["tree"])
            world.materialize(self.repo.objects, dest, entries, [], False, None, None)
            return {"id": snap.id, "to": str(dest)}
        if self.world_root is None:
            raise InvalidInput("this saver has no world_root; pass to=<empty directory>")
        pm = get_plugin_manager()
        context = {"repo": self.repo, "pm": pm, "allow_external_symlinks": False, "paths": None}
        changes = pm.hook.agentsnap_restore_world(root=str(self.world_root), world=rec, context=context)
        return {"id": snap.id, "changes": changes}

    def fork_thread(
        self,
        config: RunnableConfig,
        n: int = 2,
        *,
        prefix: str | None = None,
        worktrees: str | os.PathLike[str] | None = None,
    ) -> list[RunnableConfig]:
        """Copy the checkpoint ``config`` names (with its ancestors and writes) into ``n`` new threads.

        Returns the new threads' configs; invoking the graph with one resumes from that checkpoint.
        With ``worktrees`` (and a saver made with ``world_root``), each fork's files are written to
        ``worktrees/<new thread id>``.
        """
        if n < 1 or n > 10_000:
            raise InvalidInput(f"fork count must be between 1 and 10000, not {n}")
        conf = config["configurable"]
        thread_id = str(conf["thread_id"])
        row = self.index.get_row(thread_id, "", get_checkpoint_id(config))
        if row is None:
            raise UnknownSnapshot(f"LangGraph checkpoint {thread_id}/{conf.get('checkpoint_id', 'latest')}")
        base = prefix or f"{thread_id}-fork"
        existing = set(self.index.thread_ids())
        names: list[str] = []
        i = 1
        while len(names) < n:
            name = f"{base}-{i}"
            if name not in existing:
                names.append(name)
            i += 1
        out: list[RunnableConfig] = []
        for name in names:
            self._copy(thread_id, name, row[2])
            cfg: RunnableConfig = {"configurable": {"thread_id": name, "checkpoint_ns": ""}}
            if worktrees is not None:
                self.restore_world({"configurable": {"thread_id": name, "checkpoint_ns": ""}}, to=Path(worktrees) / name)
            out.append(cfg)
        return out

    def merge_thread(
        self,
        graph: Any,
        target: RunnableConfig,
        source: RunnableConfig,
        *,
        as_node: str | None = None,
        prefer: str | None = None,
    ) -> RunnableConfig:
        """Merge ``source``'s changes since the common checkpoint into thread ``target``.

        See :func:`agentsnap_langgraph.merge.merge_thread`; the resulting checkpoint's snapshot has
        both threads' snapshots as parents.
        """
        from .merge import merge_thread

        return merge_thread(self, graph, target, source, as_node=as_node, prefer=prefer)


class _Written:
    __slots__ = ("id", "row")

    def __init__(self, oid: str, row: SnapshotRow) -> None:
        self.id, self.row = oid, row


def _flush_loop(ref: weakref.ReferenceType[PFSaver], shared: _Shared, interval: float) -> None:
    while not shared.closed:
        shared.wake.wait(interval)
        saver = ref()
        if saver is None or shared.closed:
            return
        try:
            saver.flush()
        except Exception:  # a failed flush is retried on the next tick and surfaces on close()
            pass
        del saver


def _close_at_exit(ref: weakref.ReferenceType[PFSaver]) -> None:
    saver = ref()
    if saver is not None:
        try:
            saver.close()
        except Exception:
            pass


def new_checkpoint_id() -> str:
    """A fresh LangGraph checkpoint id (uuid6, sortable)."""
    return str(uuid6(clock_seq=random.randint(0, 1 << 13)))

