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

import asyncio
import atexit
import functools
import math
import os
import random
import re
import threading
import time
import weakref
from collections.abc import AsyncIterator, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractAsyncContextManager, AbstractContextManager, contextmanager
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import unquote, urlsplit

from agentsnap_core import content
from agentsnap_core.encoding import pack, unpack
from agentsnap_core.errors import AgentSnapError, InvalidInput, ObjectMissing, RefConflict, StoreGone
from agentsnap_core.localstore import LocalStore
from agentsnap_core.objects import Kind, digest
from agentsnap_core.plugins import get_plugin_manager
from agentsnap_core.redact import redact
from agentsnap_core.repo import MANIFEST_FORMAT, STORE_DIR, Repo
from agentsnap_core.store import RefUpdate, SnapshotRow
from agentsnap_core.stores import STORE_URL_KEY, mask_url, store_url_of
from agentsnap_core.stores.base import HeldPaths
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
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from ._index import CheckpointRow, version_key
from ._store import (
    FOREIGN,
    ROOT_REF_PREFIX,
    STATE_FORMAT,
    STATE_VERSION,
    ChannelMap,
    Pending,
    Shared,
    Written,
    author_name,
    close_at_exit,
    decode_name,
    flush_loop,
    open_index,
    open_store,
    thread_ref,
)
from ._threads import ThreadVerbs
from ._typed import expand, shrink
from ._writes import CARRIED, WRITES_FORMAT, CarriedWrites, adopted_writes, held_by_a_stop, subgraph_tips

#: seconds during which a value this process stored is trusted to be present (well under gc's grace period)
REWRITE_AFTER = 600.0
#: seconds without a put after which a saver with nothing left to flush gives back its writer session (so that gc
#: collects garbage again while a long-lived saver sits idle)
WRITER_IDLE = 2.0


def _holding_writer(method: Any) -> Any:
    """A put runs inside :meth:`PFSaver._writing`; one that flushed itself gives the writer session back."""

    @functools.wraps(method)
    def run(self: PFSaver, *args: Any, **kwargs: Any) -> Any:
        self._check_usable()
        if self._s.flush_error is not None:
            self._retry_failed_flush()
        with self._writing():
            out = method(self, *args, **kwargs)
        if self.flush_interval == 0 and not self._durable_rows:  # flushed by the put: nothing left to protect
            self.release_idle_writer(0.0)
        return out

    return run


class SaverClosed(InvalidInput):
    """A saver was used after ``close()`` (or after its ``with`` block ended)."""


class FlushFailed(AgentSnapError):
    """The group commit (pack, snapshots, thread refs) failed in the background and again when a put retried it.

    The checkpoints already put stay in the checkpoint index (a killed process loses none of them); the next flush
    that succeeds writes them. The put that raised this stored nothing.
    """


#: seconds a read waits for a channel value that is neither an object nor waiting in the index (another process
#: between its flush's pack and the index rows' cleanup)
OTHER_FLUSH_WAIT = 5.0
#: durable mode on the embedded store: seconds between group commits (each put is durable through its index row)
DURABLE_GROUP_INTERVAL = 0.2


#: langgraph 1.2.22 ``langgraph._internal._constants``: in the ``configurable`` of a checkpoint a graph run stores
#: (``CONFIG_KEY_RUNTIME``; ``update_state`` and direct ``put`` calls have none), and the run's ``durability``
#: (``CONFIG_KEY_DURABILITY``; absent: LangGraph's default, "async")
_RUN_KEY = "__pregel_runtime"
_DURABILITY_KEY = "__pregel_durability"


def _world_needs_a_waiting_run(conf: dict[str, Any]) -> None:
    """Refuse a checkpoint of a graph run that does not wait for it. With LangGraph's default durability ("async")
    the loop stores a checkpoint in the background while the next step's nodes already run, so the files captured
    with it could hold what those nodes wrote (seen: a node's file in the checkpoint before that node, which
    ``restore_world`` then did not undo). "sync" stores each checkpoint before the next step starts; "exit" only
    stores the run's last one, once every node is done."""
    if _RUN_KEY in conf and conf.get(_DURABILITY_KEY, "async") not in ("sync", "exit"):
        raise InvalidInput(
            "PFSaver(world_root=...) captures the files with each checkpoint, so the graph must store each checkpoint "
            "before its next step runs: pass durability=\"sync\" (graph.invoke(input, config, durability=\"sync\"), "
            "and the same to stream, ainvoke and astream). With LangGraph's default (\"async\") a checkpoint is "
            "stored while the next step's nodes run, and the files captured with it could hold their changes, which "
            "restore_world would then not undo")


class PFSaver(ThreadVerbs, CarriedWrites, BaseCheckpointSaver[str], AbstractContextManager, AbstractAsyncContextManager):
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
            ``0``: each checkpoint is durable when ``put`` returns. On the embedded store without
            ``world_root`` that costs one fsync per ``put`` / ``put_writes``: the index row is committed with
            everything its snapshot needs (``synchronous=FULL``), and the group commit follows every
            0.2 s (a power cut before it is recovered from the row on the next open). Otherwise every
            ``put`` flushes.
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
        #: what reads checkpoints this store did not write (adopted from a clone, pull or merge: _adopt_branches):
        #: LangGraph's strict msgpack allowlist. Its default serializer (1.2 / checkpoint 4.3) builds any class or
        #: calls any function a checkpoint's bytes name ('os', 'system', cmd) with a warning; a store travels
        #: (push, clone), so a teammate's or a crafted checkpoint ran code at get_state. A serde the user passes
        #: reads everything: its allowlist is theirs.
        self._strict = JsonPlusSerializer(allowed_msgpack_modules=None) if serde is None else None
        if (isinstance(flush_interval, bool) or not isinstance(flush_interval, (int, float))
                or math.isnan(flush_interval) or flush_interval < 0):
            raise InvalidInput(f"flush_interval must be a number of seconds >= 0, not {flush_interval!r}")
        if (isinstance(cache_bytes, bool) or not isinstance(cache_bytes, (int, float))
                or math.isnan(cache_bytes) or cache_bytes < 0):
            raise InvalidInput(f"cache_bytes must be a number of bytes >= 0, not {cache_bytes!r}")
        self.world_root = Path(world_root).resolve() if world_root is not None else None
        if self.world_root is not None and not self.world_root.is_dir():
            raise InvalidInput(f"world_root {str(world_root)!r} is not a directory")
        seal_world = self.world_root is not None and _encrypts(self.serde)
        if seal_world:
            from agentsnap_core.crypto import KEY_ENV, load_key

            if load_key() is None:
                raise InvalidInput(
                    f"world_root with an EncryptedSerializer: the captured files would be stored in clear; set {KEY_ENV} "
                    "(64 hex characters, agentsnap_core.crypto.generate_key()) so the store encrypts them too"
                )
        self.repo = open_store(path)
        if seal_world:
            from agentsnap_core.crypto import CONFIG_ENCRYPT, enable_encryption

            if self.repo.refs.get_config(CONFIG_ENCRYPT) != "aes-gcm":
                enable_encryption(self.repo)  # every object from now on, files included (docs/SECURITY.md)
        self.index = open_index(self.repo)
        #: the checkpoint index file as opened (core checks the store directory and its own index): a put or flush
        #: refuses to go on into files that were deleted (what it wrote would vanish with the saver's handles) or
        #: replaced by another store
        index_file = getattr(self.index, "path", None)
        self._files = HeldPaths(index_file) if index_file is not None else None
        self.flush_interval = flush_interval
        self._s = Shared()
        batch = getattr(self.repo.objects, "batch", None)  # the embedded store packs what a flush writes
        if batch is not None:
            self._s.objects_batch = batch()
            self._s.objects_batch.__enter__()
        #: durable mode through the index: rows (with the bytes their snapshots need) committed durably at each put,
        #: objects and refs by the group commit (world files are not in the row: with world_root, every put flushes).
        #: The embedded store's index is made to fsync each commit (its values wait beside the rows for the pack);
        #: a PostgreSQL store's index commits on the server at each put, and its values are written to the store's
        #: objects table by the put itself (autocommit), so it is durable at each put as it is
        durable_index = getattr(self.index, "commits_durable", False) or (
            batch is not None and hasattr(self.index, "make_durable"))
        self._durable_rows = flush_interval == 0 and self.world_root is None and durable_index
        if self._durable_rows and hasattr(self.index, "make_durable"):
            self.index.make_durable()
        self.cache_limit = cache_bytes
        self._author = author_name()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="pfsaver-async")
        with self._writing():
            self._recover()
        self.release_idle_writer(0.0)
        self._adopt_branches()
        self._drop_pruned()
        self._replay_journals()
        self._open_journal()
        self._flusher: threading.Thread | None = None
        interval = DURABLE_GROUP_INTERVAL if self._durable_rows else flush_interval
        if interval > 0:
            self._flusher = threading.Thread(
                target=flush_loop, args=(weakref.ref(self), self._s, interval), daemon=True, name="pfsaver-flush"
            )
            self._flusher.start()
        atexit.register(close_at_exit, weakref.ref(self))

    @classmethod
    def from_url(cls, url: str, *, path: str | os.PathLike[str] | None = None, **kwargs: Any) -> PFSaver:
        """A saver on the store ``url`` names: a path or ``file://`` URL (the embedded store), or
        ``postgresql://...`` (optionally ``&objects=s3://...``) shared by many workers.

        With a server store, ``path`` (default ``.``) is this worker's local directory: it keeps
        worktree state and is bound to the shared store, where objects, refs and the checkpoint
        index live. The embedded store keeps all of that itself: with a path or ``file://`` URL,
        ``path`` is not used.

        The scheme is read in any case (``FILE://``, ``Postgresql://``), as RFC 3986 and core's
        ``open_store`` read it; a ``file://`` URL without a path is refused.
        """
        if isinstance(url, os.PathLike):
            return cls(url, **kwargs)
        if not isinstance(url, str) or not url.strip():
            raise InvalidInput(f"PFSaver.from_url needs a store URL or path, not {url!r}")
        scheme = re.match(r"^([A-Za-z][A-Za-z0-9+.-]*)://", url)
        if scheme and scheme.group(1).lower() not in ("file", "postgres", "postgresql", "s3"):
            raise InvalidInput(
                f"PFSaver.from_url does not know the scheme {scheme.group(1)!r} of {mask_url(url)}; use a path, "
                "file:///path or postgresql://... (agentsnap-langgraph[postgres], with &objects=s3://... for S3)"
            )
        if scheme:  # (was compared in the given case below: "Postgresql://..." became a local folder of that name)
            url = scheme.group(1).lower() + url[scheme.end(1):]
        if url.startswith(("postgres://", "postgresql://", "s3://")):
            root = Path(path or ".").resolve()
            store_dir = root / STORE_DIR
            if (store_dir / "format.json").exists():
                local = LocalStore(store_dir)
                try:
                    bound = local.refs.get_config(STORE_URL_KEY)
                finally:
                    local.close()
                if bound != store_url_of(url):
                    raise InvalidInput(
                        f"{store_dir} is bound to {mask_url(bound or 'its own store')}, not {mask_url(url)}; "
                        "give another path"
                    )
            else:
                Repo.init(root, store_url=url).close()
            return cls(root, **kwargs)
        if url.startswith("file://"):
            parts = urlsplit(url)
            if parts.netloc not in ("", "localhost"):
                raise InvalidInput(f"file URL {url!r} names host {parts.netloc!r}; use file:///path or a plain path")
            if not parts.path:  # (was: a store in the current directory; core's open_store says the same)
                raise InvalidInput(f"file URL {url!r} has no path; use file:///path or a plain path")
            url = unquote(parts.path)
        return cls(url, **kwargs)

    def setup(self) -> None:
        """Create the store and its checkpoint index if missing (done when the saver opens: idempotent, as
        SqliteSaver's and PostgresSaver's ``setup``)."""
        self.index.setup()

    async def asetup(self) -> None:
        await self._run(self.setup)

    # ------------------------------------------------------------------ lifecycle
    def __enter__(self) -> PFSaver:
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    async def __aenter__(self) -> PFSaver:
        return self

    async def __aexit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        await self._run(self.close)

    def close(self) -> None:
        """Flush pending ref updates and release the store (idempotent)."""
        if self._s.closed:
            return
        self._note_cut_short()
        try:
            self.flush()
        except StoreGone:  # nothing can be written any more: release the saver all the same, and say so
            self._s.closed = True
            self._close_journal(keep=True)
            self._release()
            raise
        except BaseException:
            self._close_journal(keep=True)  # (the saver stays open: the next close tries again, with no journal;
            raise  # the next saver on the store does the rest)
        self._s.closed = True
        self._close_journal(keep=False)
        self._release()

    def _release(self) -> None:
        self._s.wake.set()
        self.release_idle_writer(force=True)
        self._executor.shutdown(wait=False)  # close() may run in that thread (async with)
        if self._s.objects_batch is not None:
            self._s.objects_batch.__exit__(None, None, None)
            self._s.objects_batch = None
        self.index.close()
        self.repo.close()
        if self._files is not None:
            self._files.close()

    def flush(self) -> None:
        """Make every checkpoint written so far durable and move the thread refs (compare-and-swap)."""
        s = self._s
        self._check_usable()
        with s.flush_lock:
            with s.lock:
                if not s.pending_refs and not s.pending_seqs and not any(not ns for _t, ns, _c in s.stopped):
                    s.flush_error = None
                    return
                stopped = sorted(s.stopped)
                s.stopped.clear()
                refs = {name: list(entries) for name, entries in s.pending_refs.items()}
                rows, seqs, pending = list(s.pending_rows), list(s.pending_seqs), list(s.pending_objects)
                after = list(s.after_barrier)
                s.pending_refs.clear()
                s.pending_rows.clear()
                s.pending_seqs.clear()
                s.pending_objects.clear()
                s.after_barrier.clear()
            try:
                self._write_pending(pending)
                # one pack of every object written since the last flush, durable before any ref names them
                self.repo.objects.barrier()
                for save in after:  # world stat caches name objects: saved once those are durable
                    save()
                after = []
                self.index.sync()  # and the index rows naming them
                self._commit(rows, refs)  # index rows and ref moves: one transaction
                self.index.mark_flushed(seqs)
                rows, seqs, refs, pending = [], [], {}, []
                later = self._carry_writes(stopped)
                with s.lock:
                    s.stopped.update(later)
                s.flush_error = None
            except BaseException:
                with s.lock:  # keep them for the next attempt
                    s.stopped.update(stopped)
                    for name, entries in refs.items():
                        s.pending_refs.setdefault(name, [])[:0] = entries
                    s.pending_rows[:0] = rows
                    s.pending_seqs[:0] = seqs
                    s.pending_objects[:0] = pending
                    s.after_barrier[:0] = after
                raise

    def _check_open(self) -> None:
        if self._s.closed:
            raise SaverClosed(
                f"this PFSaver on {self.repo.store_dir} is closed (close() was called or its `with` block ended); "
                "open a new PFSaver on the store to go on"
            )

    def _check_usable(self) -> None:
        """Refuse to write through a closed saver, or into a store deleted or replaced since it was opened."""
        self._check_open()
        try:
            self.repo.check_present()
            gone = self._files is not None and self._files.gone()
        except StoreGone:
            gone = True
        if gone:
            raise StoreGone(
                str(self.repo.store_dir),
                f"PFSaver: its store {self.repo.store_dir} was deleted or replaced while the saver was open; nothing "
                "more is written to it (checkpoints put since the last flush went with the deleted files). Open a new "
                "PFSaver on the store you mean to use"
            )

    def _retry_failed_flush(self) -> None:
        """Before a put, after a background flush failed: flush now; if that fails too, the put raises."""
        try:
            self.flush()
        except Exception as e:
            since = time.strftime("%H:%M:%S", time.localtime(self._s.failing_since))
            raise FlushFailed(
                f"PFSaver cannot write to its store {self.repo.store_dir}: {e}. Flushes have failed since {since}; "
                f"the checkpoints put meanwhile are kept in the checkpoint index and are written by the first flush "
                f"that succeeds (the next put retries it, as do the background flush and close()). This put stored "
                f"nothing."
            ) from e

    @contextmanager
    def _writing(self) -> Iterator[None]:
        """Around every put (and the recovery at open): core's writer session is held before the first object is
        written or re-used, so gc keeps what the next flush names (:meth:`release_idle_writer` gives it back)."""
        s = self._s
        with s.lock:
            s.active_puts += 1
            if s.writer is None:
                sessions = getattr(self.repo, "writer_sessions", None)
                if sessions is not None:
                    s.writer = sessions.session()
                    s.writer.__enter__()
                s.stored.clear()  # values stored before this session were not re-touched in it: store them again
        try:
            yield
        finally:
            with s.lock:
                s.active_puts -= 1
                s.last_put = time.monotonic()

    def release_idle_writer(self, idle: float = WRITER_IDLE, *, force: bool = False) -> bool:
        """Give back the writer session when no put runs, nothing waits for a flush and no put came for ``idle``
        seconds (the background flush calls this; a put takes a new one); ``force`` (close): whatever is left.
        True when it was given back."""
        s = self._s
        with s.flush_lock, s.lock:  # not while a flush is between taking the pending work and committing it
            busy = s.active_puts or s.pending_refs or s.pending_seqs or s.pending_objects
            if s.writer is None or (not force and (busy or time.monotonic() - s.last_put < idle)):
                return False
            held, s.writer = s.writer, None
        held.__exit__(None, None, None)
        return True

    def _commit(self, rows: list[SnapshotRow], refs: dict[str, list[Pending]]) -> None:
        """Index the new snapshots and move the thread refs: one core transaction where the store has it."""
        if getattr(type(self.repo.refs), "commit_snapshots", None) is None:
            self._index_snapshots(rows)
            self._move_refs(refs)
            return
        for _attempt in range(20):
            updates = [(u, "langgraph: checkpoint") for u in self._ref_updates(refs)]
            if not updates and not rows:
                return
            try:
                self.repo.refs.commit_snapshots(rows, updates, [])
                return
            except RefConflict:  # the rows are in; the refs are recomputed from what the other writer left
                rows = []
        raise AgentSnapError("could not move the LangGraph thread refs: other writers keep moving them; retry")

    def _index_snapshots(self, rows: list[SnapshotRow]) -> None:
        """Add snapshots to the core index (short ids, ``agentsnap log``): one transaction where the store can."""
        if not rows:
            return
        batch = getattr(self.repo.refs, "index_snapshots", None)
        if callable(batch):
            batch(rows)
            return
        for row in rows:
            self.repo.refs.index_snapshot(row)

    def _move_refs(self, refs: dict[str, list[Pending]]) -> None:
        """Move each ref through the new snapshots that no other new snapshot descends from.

        Every such branch tip gets a reflog entry (so gc keeps side branches that time travel
        created); the ref ends at the newest checkpoint, or stays where another writer put a newer one.
        """
        for _attempt in range(20):
            updates = self._ref_updates(refs)
            if not updates:
                return
            try:
                self.repo.refs.update_refs(updates, "langgraph: checkpoint")
                return
            except RefConflict:
                continue
        raise AgentSnapError("could not move the LangGraph thread refs: other writers keep moving them; retry")

    def _ref_updates(self, refs: dict[str, list[Pending]]) -> list[RefUpdate]:
        """The compare-and-swap moves that bring each ref through its new branch tips (see :meth:`_move_refs`)."""
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
        return updates

    def _queue(self, ref: str, snap: str, cid: str, parents: Sequence[str]) -> None:
        """Remember a new snapshot for the next flush (caller holds ``self._s.lock``)."""
        self._s.pending_refs.setdefault(ref, []).append((snap, cid, tuple(parents)))

    def _write_pending(self, pending: Sequence[tuple[bytes, bytes]]) -> None:
        """Write deferred state documents and manifests as objects."""
        objects = self.repo.objects
        for state_bytes, manifest_bytes in pending:
            content.put_bytes(objects, state_bytes)
            objects.put(Kind.MANIFEST, manifest_bytes)

    def _recover(self) -> None:
        """Finish rows a crashed writer committed but never flushed.

        Their snapshots are written from the bytes the rows carry; a row whose channel values did
        not reach the disk (a power cut) is dropped, like every later row that needs them.
        """
        rows = self.index.unflushed()
        if not rows:
            return
        objects = self.repo.objects
        lost, keep, pending = [], [], []
        refs: dict[str, list[Pending]] = {}
        for seq, thread_id, ns, cid, snap, state_bytes, manifest_bytes in rows:
            for data in self.index.pending_blobs(seq):  # values that waited for the flush's pack
                content.put_bytes(objects, data)
            if state_bytes is not None and manifest_bytes is not None:
                doc = unpack(bytes(state_bytes), "langgraph state")
                needed = {v[2] for v in doc.get("channels", {}).values() if v[2]}
                if objects.missing(needed):
                    lost.append(seq)
                    continue
                pending.append((bytes(state_bytes), bytes(manifest_bytes)))
                parents = tuple(unpack(bytes(manifest_bytes), "manifest")["parents"])
            elif objects.has(snap):
                parents = tuple(self.repo.manifest(snap)["parents"])
            else:
                lost.append(seq)
                continue
            keep.append(seq)
            refs.setdefault(thread_ref(thread_id, ns), []).append((snap, cid, parents))
        if lost:
            with self.index.tx() as db:
                db.executemany("DELETE FROM lg_checkpoints WHERE seq=?", [(q,) for q in lost])
                db.executemany("DELETE FROM lg_pending WHERE seq=?", [(q,) for q in lost])
                db.executemany("DELETE FROM lg_pending_blobs WHERE seq=?", [(q,) for q in lost])
        self._write_pending(pending)
        objects.barrier()
        self.index.sync()
        self._commit([], refs)
        self.index.mark_flushed(keep)

    def _adopt_branches(self) -> None:
        """Index the checkpoints that thread branches name and this index does not hold.

        A thread's branch ``refs/heads/langgraph/<thread>`` reaches a store without its index rows when the store
        was cloned (``agentsnap clone``: a teammate's pushed thread), when a pull or merge moved the branch to
        checkpoints written elsewhere, or when the branch was made from a remote one (``agentsnap branch
        langgraph/t origin/langgraph/t``). Before, such a thread was empty to LangGraph (``get_state`` gave ``{}``)
        although ``agentsnap log`` listed its checkpoints. Each snapshot on the branch's first-parent chain back to
        the first one this index holds is indexed again from its state document (the checkpoint, its metadata and
        channel versions); the thread is the branch's, so a copied thread's shared snapshots index under it. A tip
        that records a stopped run's pending writes (``_writes``) gives them back to the index, with the namespaces
        of the subgraphs that stopped in that run. Not carried: the namespaces of finished subgraph calls (their refs
        are not branches).
        """
        from agentsnap_core.retention import tombstones

        branches = self.repo.refs.list_refs(ROOT_REF_PREFIX)
        if not branches:
            return
        dead: set[str] | None = None
        rows: list[tuple[Any, ...]] = []
        blobs: list[tuple[str, str, str, str, str, str | None]] = []
        writes: list[tuple[Any, ...]] = []
        carried_now: list[tuple[str, str]] = []
        subs: list[tuple[str, str, str]] = []
        node_refs: list[RefUpdate] = []
        with self.index.read() as db:
            def indexed(thread_id: str, snap: str) -> bool:
                return db.execute("SELECT 1 FROM lg_checkpoints WHERE snapshot=? AND thread_id=? LIMIT 1",
                                  (snap, thread_id)).fetchone() is not None

            tips = {t: tip for name, tip in branches.items()
                    if tip and (t := decode_name(name[len(ROOT_REF_PREFIX):])) is not None}
            carried = self._carried(db)
            held: set[tuple[str, str]] = {(t, tip) for t, tip in tips.items() if carried.get(t) == tip}
            snaps = sorted(set(tips.values()))
            for i in range(0, len(snaps), 500):  # one query per 500 branches (a shared PostgreSQL index: round trips)
                part = snaps[i : i + 500]
                held.update((str(r[0]), str(r[1])) for r in db.execute(
                    f"SELECT thread_id, snapshot FROM lg_checkpoints WHERE snapshot IN ({','.join('?' * len(part))})",
                    part).fetchall())
            def walk(thread_id: str, start: str, sub: bool) -> set[str]:
                """Index the first-parent chain from ``start`` back to a snapshot this index holds: the thread's
                root checkpoints, or (``sub``) a stopped subgraph's checkpoints. The snapshots visited."""
                assert dead is not None
                cur: str | None = start
                seen: set[str] = set()
                while cur and cur not in seen and not indexed(thread_id, cur):
                    seen.add(cur)
                    try:
                        snap = self.repo.get(cur)
                        doc = self.repo.read_layer(snap, "state") if "state" in snap.layers else None
                    except AgentSnapError:  # not fetched (or reclaimed): the chain is indexed up to here
                        break
                    parents = snap.manifest.get("parents") or []
                    cur = parents[0] if parents and isinstance(parents[0], str) else None
                    if isinstance(doc, dict) and doc.get("format") == WRITES_FORMAT:
                        if not sub and snap.id == start and snap.id not in dead:  # a stopped run (the tip's writes)
                            writes.extend(adopted_writes(thread_id, doc))
                            carried_now.append((CARRIED + thread_id, snap.id))
                            subs.extend((thread_id, ns, oid) for ns, oid in subgraph_tips(doc))
                        continue
                    if (not isinstance(doc, dict) or doc.get("format") != STATE_FORMAT
                            or bool(doc.get("checkpoint_ns")) != sub or snap.id in dead):
                        continue  # (a world snapshot on the branch, a merge's, a pruned checkpoint)
                    ns = str(doc.get("checkpoint_ns") or "")
                    ckpt_t, meta_t = tuple(doc["checkpoint"]), tuple(doc["metadata"])
                    try:
                        run_id = self._serde_for(True).loads_typed((meta_t[0], bytes(meta_t[1]))).get("run_id")
                    except Exception:  # (metadata this serializer cannot read: only delete_for_runs misses it)
                        run_id = None
                    rows.append((thread_id, ns, doc["checkpoint_id"], doc.get("parent_checkpoint_id"), snap.id,
                                 str(run_id) if run_id is not None else None, *shrink(ckpt_t[0], bytes(ckpt_t[1])),
                                 *shrink(meta_t[0], bytes(meta_t[1]))))
                    blobs.extend((thread_id, ns, ch, v[0], v[1], v[2]) for ch, v in doc.get("channels", {}).items())
                return seen

            for thread_id, tip in sorted(tips.items()):
                if (thread_id, tip) in held:
                    continue
                if dead is None:
                    dead = set(tombstones(self.repo))
                walk(thread_id, tip, False)
            for thread_id, ns, oid in subs:  # a stopped subgraph's namespace: indexed, and its node ref set
                name = thread_ref(thread_id, ns)
                current = self.repo.refs.get_ref(name)
                if current == oid:
                    continue
                seen = walk(thread_id, oid, True)
                if current is None or current in seen:
                    node_refs.append(RefUpdate(name, oid, current))
        if not rows and not carried_now:
            return
        with self.index.tx() as db:
            db.executemany("INSERT OR IGNORE INTO lg_writes VALUES (?,?,?,?,?,?,?,?,?)", writes)
            db.executemany("INSERT OR REPLACE INTO lg_meta VALUES (?,?)", carried_now)
            db.executemany("INSERT OR REPLACE INTO lg_meta VALUES (?,?)", [(FOREIGN + str(r[4]), "1") for r in rows])
            db.executemany(
                "INSERT OR IGNORE INTO lg_checkpoints (thread_id, checkpoint_ns, checkpoint_id, parent_id, snapshot, "
                "run_id, ckpt_type, ckpt, meta_type, meta, flushed) VALUES (?,?,?,?,?,?,?,?,?,?,1)",
                rows,
            )
            db.executemany("INSERT OR IGNORE INTO lg_blobs VALUES (?,?,?,?,?,?)", blobs)
        for update in node_refs:  # (after the rows: a ref never names a checkpoint the index lacks)
            try:
                self.repo.refs.update_refs([update], "langgraph: adopted a stopped subgraph")
            except RefConflict:  # another process set it meanwhile
                continue

    def _drop_pruned(self) -> None:
        """Remove the index rows (and writes) of checkpoints whose snapshots ``agentsnap prune`` / ``expire`` /
        ``delete`` marked dead: ``gc`` reclaims their channel values, so LangGraph must not list them.

        Run on open and before every ``list`` (``get_state_history``), so a saver open across a prune
        sees it too. The kept checkpoints' values are listed by their own snapshots, which gc keeps.
        """
        from agentsnap_core.retention import tombstones

        marks = sorted(tombstones(self.repo))
        if not marks:
            return
        victims = []
        with self.index.read() as db:
            for i in range(0, len(marks), 500):
                part = marks[i : i + 500]
                victims += db.execute(
                    "SELECT thread_id, checkpoint_ns, checkpoint_id, snapshot FROM lg_checkpoints "
                    f"WHERE snapshot IN ({','.join('?' * len(part))})",
                    part,
                ).fetchall()
        # a thread stopped at an interrupt (or a failed node) has its writes snapshot at its branch's tip, not the
        # checkpoint: prune protects what refs name, so it marked the thread's newest checkpoint dead too. Those rows
        # stay (their objects are the writes snapshot's: _writes._layers_of) until the thread moves on
        held = {t: held_by_a_stop(self.repo, t) for t in {str(v[0]) for v in victims}}
        victims = [(v[0], v[1], v[2]) for v in victims if str(v[3]) not in held[str(v[0])]]
        if not victims:
            return
        with self.index.tx() as db:
            db.executemany("DELETE FROM lg_writes WHERE thread_id=? AND checkpoint_ns=? AND checkpoint_id=?", victims)
            db.executemany(
                "DELETE FROM lg_checkpoints WHERE thread_id=? AND checkpoint_ns=? AND checkpoint_id=?", victims
            )
        with self._s.lock:
            for thread_id, ns, _cid in victims:
                self._s.last.pop((thread_id, ns), None)

    # ------------------------------------------------------------------ objects
    def _put_blob(self, data: bytes, waiting: list[tuple[str, bytes]] | None = None) -> str:
        """Store a channel value; one this process stored in the last minutes is not written again.

        ``waiting`` collects ``(id, bytes)`` of values written into the store's batch (reaching the disk with
        the next flush's pack): the index keeps them with the checkpoint's row until then.
        """
        oid = content.put_bytes(None, data)
        now = time.monotonic()
        s = self._s
        with s.lock:
            last = s.stored.get(oid)
        if last is None or now - last > REWRITE_AFTER:  # re-put: freshens it against a concurrent gc
            content.put_bytes(self.repo.objects, data)
            if waiting is not None and s.objects_batch is not None:
                waiting.append((oid, data))
            with s.lock:
                if len(s.stored) > 200_000:
                    s.stored.clear()
                s.stored[oid] = now
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
            deadline = time.monotonic() + OTHER_FLUSH_WAIT
            while True:
                try:
                    data = content.get_bytes(self.repo.objects, oid)
                    break
                except ObjectMissing:  # another process's checkpoint: its values wait in the index for its flush
                    waiting = self.index.pending_blob(oid)
                    if waiting is not None:
                        data = waiting
                        break
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.02)
            self._remember(oid, data)
        return data

    # ------------------------------------------------------------------ put
    @_holding_writer
    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Store a checkpoint as a snapshot; only channels in ``new_versions`` are written."""
        conf = config["configurable"]
        if self.world_root is not None:
            _world_needs_a_waiting_run(conf)
        thread_id = str(conf["thread_id"])
        self._journal(thread_id)
        ns = conf.get("checkpoint_ns", "") or ""
        parent_id = conf.get("checkpoint_id")
        cp: dict[str, Any] = dict(checkpoint)
        values: dict[str, Any] = cp.pop("channel_values", {})
        new_blobs: list[tuple[str, str, str, str | None]] = []
        waiting: list[tuple[str, bytes]] = []
        fresh: ChannelMap = {}
        for ch, ver in new_versions.items():
            vkey = version_key(ver)
            if ch in values:
                typ, data = self.serde.dumps_typed(values[ch])
                oid = self._put_blob(data, waiting)
            else:
                typ, oid = "empty", None
            new_blobs.append((ch, vkey, typ, oid))
            fresh[ch] = (vkey, typ, oid)
        channels = self._channel_map(thread_id, ns, parent_id, cp.get("channel_versions", {}), fresh)
        ckpt_t = self.serde.dumps_typed(cp)
        md = _redacted(get_checkpoint_metadata(config, metadata))
        meta_t = self.serde.dumps_typed(md)
        parents = []
        parent_snap = self._parent_snapshot(thread_id, ns, parent_id)
        if parent_snap:
            parents.append(parent_snap)
        elif ns:  # a new subgraph call: it follows the node's previous call (one ref, one chain)
            previous = self._node_tip(thread_ref(thread_id, ns))
            if previous:
                parents.append(previous)
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
        snap = self._write_snapshot(state_doc, channels, parents, meta, world_rec, defer=True)
        row: CheckpointRow = (thread_id, ns, checkpoint["id"], parent_id, snap.id, *shrink(*ckpt_t), *shrink(*meta_t))
        seq = self.index.insert_checkpoint(row, str(run_id) if run_id is not None else None, new_blobs, snap.pending,
                                           waiting)
        with self._s.lock:
            if snap.pending is not None:
                self._s.pending_objects.append(snap.pending)
            self._s.last[(thread_id, ns)] = (checkpoint["id"], snap.id, channels)
            self._queue(thread_ref(thread_id, ns), snap.id, checkpoint["id"], parents)
            if ns:
                tip = self._s.node_tips.get(thread_ref(thread_id, ns))
                if tip is None or tip[0] < checkpoint["id"]:
                    self._s.node_tips[thread_ref(thread_id, ns)] = (checkpoint["id"], snap.id)
            self._s.pending_rows.append(snap.row)
            self._s.pending_seqs.append(seq)
        if self.flush_interval == 0 and not self._durable_rows:
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

    def _node_tip(self, ref: str) -> str | None:
        """The newest snapshot this process put, or the store holds, for a subgraph node's ref."""
        with self._s.lock:
            tip = self._s.node_tips.get(ref)
        return tip[1] if tip else self.repo.refs.get_ref(ref)

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
        if sc:  # it names the objects just written: saved by the flush once they are durable
            with self._s.lock:
                self._s.after_barrier.append(functools.partial(sc[1].save, sc[0]))
        return dict(rec)

    def _write_snapshot(
        self,
        state_doc: dict[str, Any],
        channels: ChannelMap,
        parents: list[str],
        meta: dict[str, Any],
        world_rec: dict[str, Any] | None,
        defer: bool = False,
        message: str | None = None,
        keep: Sequence[str] = (),
    ) -> Written:
        """Build a checkpoint's state document and manifest; write them now, or (``defer``) leave their
        bytes to the caller, who keeps them in the index row until :meth:`flush` writes them. ``keep``: further
        objects the state layer lists (so gc keeps them while this snapshot is live)."""
        objects = self.repo.objects
        state_bytes = pack(state_doc)
        state_oid = content.put_bytes(None if defer else objects, state_bytes)
        blob_ids = sorted({oid for _v, _t, oid in channels.values() if oid} | set(keep))
        layers: dict[str, Any] = {"state": {"content": state_oid, "refs": blob_ids}}
        if world_rec is not None:
            layers["world"] = world_rec
        step = f" step {meta['step']}" if meta.get("step") is not None else ""
        source = f" ({meta['source']})" if meta.get("source") else ""
        ns = f" [{meta['checkpoint_ns']}]" if meta.get("checkpoint_ns") else ""
        message = message or f"langgraph {meta['thread_id']}{ns}{step}{source}"
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
        manifest_bytes = pack(manifest)
        row = SnapshotRow("", tuple(parents), now, message, "langgraph")
        if defer:
            oid = digest(Kind.MANIFEST, manifest_bytes)
            return Written(oid, _with_id(row, oid), (state_bytes, manifest_bytes))
        oid = objects.put(Kind.MANIFEST, manifest_bytes)
        return Written(oid, _with_id(row, oid))

    # ------------------------------------------------------------------ writes
    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Store a task's writes; idempotent per (task_id, idx), special (negative-index) channels overwrite."""
        self._check_usable()
        conf = config["configurable"]
        thread_id = str(conf["thread_id"])
        ns = conf.get("checkpoint_ns", "") or ""
        checkpoint_id = conf["checkpoint_id"]
        rows, replace = [], []
        for idx, (channel, value) in enumerate(writes):
            widx = WRITES_IDX_MAP.get(channel, idx)
            typ, data = shrink(*self.serde.dumps_typed(value))
            rows.append((thread_id, ns, checkpoint_id, task_id, widx, channel, typ, data, task_path))
            replace.append(widx < 0)
        if rows:
            self._journal(thread_id)
            self.index.insert_writes(rows, replace)
            self._note_stop(thread_id, ns, checkpoint_id, (r[5] for r in rows))

    # ------------------------------------------------------------------ reads
    def _serde_for(self, foreign: bool) -> SerializerProtocol:
        """The serializer that reads a checkpoint: LangGraph's strict one for a ``foreign`` one (see ``_strict``)."""
        return self._strict if foreign and self._strict is not None else self.serde

    def _foreign(self, snap: str | None = None) -> set[str]:
        """The snapshots of checkpoints this index adopted from elsewhere (all, or whether ``snap`` is one)."""
        if self._strict is None:
            return set()
        with self.index.read() as db:
            if snap is not None:
                hit = db.execute("SELECT 1 FROM lg_meta WHERE key=?", (FOREIGN + snap,)).fetchone()
                return {snap} if hit else set()
            return {str(r[0])[len(FOREIGN):] for r in
                    db.execute("SELECT key FROM lg_meta WHERE key LIKE ?", (FOREIGN + "%",)).fetchall()}

    def _tuple(self, row: CheckpointRow, config: RunnableConfig | None = None, foreign: bool = False) -> CheckpointTuple:
        thread_id, ns, cid, parent_id, _snap, ckpt_type, ckpt, meta_type, meta = row
        serde = self._serde_for(foreign)
        checkpoint = serde.loads_typed(expand(ckpt_type, ckpt))
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
            values[ch] = serde.loads_typed((typ, self._get_blob(oid)))
        checkpoint["channel_values"] = values
        writes = [(t, c, serde.loads_typed(expand(typ, v))) for t, c, typ, v, _p, _i in self.index.writes(thread_id, ns, cid)]
        return CheckpointTuple(
            config=config
            or {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": cid}},
            checkpoint=checkpoint,
            metadata=serde.loads_typed(expand(meta_type, meta)),
            parent_config=(
                {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": parent_id}}
                if parent_id
                else None
            ),
            pending_writes=writes,
        )

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint named by ``config`` (or the thread's newest); never touches files on disk."""
        self._check_open()
        conf = _configurable(config, "get_tuple")
        thread_id = str(conf["thread_id"])
        ns = conf.get("checkpoint_ns", "") or ""
        checkpoint_id = get_checkpoint_id(config)
        if checkpoint_id:  # one `agentsnap prune` marked since the saver opened is gone, as from list() (gc reclaims
            self._drop_pruned()  # its values: a replay of it stored checkpoints naming them). A thread's newest is kept
        row = self.index.get_row(thread_id, ns, checkpoint_id)
        if row is None:
            return None
        return self._tuple(row, config if checkpoint_id else None, bool(self._foreign(str(row[4]))))

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """Checkpoints newest first, by thread / namespace / id, metadata ``filter``, ``before`` and ``limit``."""
        conf = _configurable(config, "list") if config else {}
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)):
            raise InvalidInput(f"list(limit=...) takes a whole number of checkpoints or None, not {limit!r}")
        if filter is not None and not isinstance(filter, dict):
            raise InvalidInput(f"list(filter=...) takes a dict of metadata keys and values, not {filter!r}")
        thread_id = str(conf["thread_id"]) if conf.get("thread_id") is not None else None
        ns = conf.get("checkpoint_ns")
        checkpoint_id = conf.get("checkpoint_id")
        before_id = get_checkpoint_id(before) if before else None
        self._check_open()
        if limit is not None and limit <= 0:
            return
        self._drop_pruned()
        sql_limit = None if filter else limit
        count = 0
        foreign = self._foreign()
        for row in self.index.iter_rows(thread_id, ns, checkpoint_id, before_id, sql_limit):
            if filter:
                md = self._serde_for(str(row[4]) in foreign).loads_typed(expand(row[7], row[8]))
                if not all(md.get(k) == v for k, v in filter.items()):
                    continue
            yield self._tuple(row, foreign=str(row[4]) in foreign)
            count += 1
            if limit is not None and count >= limit:
                return

    # ------------------------------------------------------------------ async
    # Every async method runs its sync twin in the saver's worker thread: a put may fsync
    # (flush_interval=0), wait for the flush thread's locks, scan world_root or talk to a PostgreSQL
    # store, none of which may stall the event loop. One thread, first come first served (as
    # aiosqlite's): calls finish in the order the loop made them, as LangGraph's own tests expect of
    # concurrent tasks' writes. The sync methods are thread-safe (the flush thread runs beside it).
    async def _run(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, functools.partial(fn, *args, **kwargs))

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await self._run(self.get_tuple, config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        it = self.list(config, filter=filter, before=before, limit=limit)
        done = object()
        try:
            while (item := await self._run(next, it, done)) is not done:
                yield item  # type: ignore[misc]
        finally:
            if self._s.closed:
                it.close()
            else:
                await self._run(it.close)  # a half-read list's cleanup (its index cursor) runs off the loop too

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return await self._run(self.put, config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        await self._run(self.put_writes, config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        await self._run(self.delete_thread, thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await self._run(self.delete_for_runs, run_ids)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await self._run(self.copy_thread, source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await self._run(self.prune, thread_ids, strategy=strategy)

    async def aget_delta_channel_history(self, *, config: RunnableConfig, channels: Sequence[str]) -> Any:
        return await self._run(self.get_delta_channel_history, config=config, channels=channels)

    def get_next_version(self, current: str | int | None, channel: None = None) -> str:
        """``"<32-digit counter>.<random>"``: the format of LangGraph's InMemorySaver and SqliteSaver."""
        if current is None:
            number = 0
        elif isinstance(current, int):
            number = current
        else:
            number = int(str(current).split(".")[0])
        return f"{number + 1:032}.{random.random():016}"


def _configurable(config: Any, what: str) -> dict[str, Any]:
    """``config["configurable"]``, or an error naming the shape a LangGraph config has (a flat ``{"thread_id": ...}``
    would otherwise name no thread: ``list`` would list every thread's checkpoints)."""
    conf = config.get("configurable") if isinstance(config, dict) else None
    if not isinstance(conf, dict) or (what == "get_tuple" and "thread_id" not in conf):
        raise InvalidInput(
            f"PFSaver.{what} takes a LangGraph config {{'configurable': {{'thread_id': ...}}}}, not {config!r}"
        )
    return conf


def _redacted(md: CheckpointMetadata) -> CheckpointMetadata:
    """Checkpoint metadata with its secrets redacted (:func:`agentsnap_core.redact.redact`).

    LangGraph copies every string of ``config["configurable"]`` into the metadata a saver stores (an
    ``openai_api_key`` passed to the nodes, a database URL with its password), and a snapshot's content
    outlives the thread. A key that holds a secret, or a value shaped like one, is stored redacted; every
    other key keeps its value as given.
    """
    out: dict[str, Any] = dict(md)
    for key, value in md.items():
        found = redact({key: value})
        if found.paths:
            out[key] = found.value[key]
    return out  # type: ignore[return-value]


def _with_id(row: SnapshotRow, oid: str) -> SnapshotRow:
    return SnapshotRow(oid, row.parents, row.time, row.message, row.agent)


def _encrypts(serde: Any) -> bool:
    """Whether the LangGraph serializer encrypts (``EncryptedSerializer``, langgraph-checkpoint 4.x)."""
    from langgraph.checkpoint.serde.encrypted import EncryptedSerializer

    return isinstance(serde, EncryptedSerializer)
