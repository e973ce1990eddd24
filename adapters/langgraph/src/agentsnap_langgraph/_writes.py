"""Pending writes that travel with a thread (mixed into :class:`~agentsnap_langgraph.saver.PFSaver`).

A run that stops with writes on its newest checkpoint - a human-approval ``interrupt()``, or a super-step where one
node raised after others finished - leaves state LangGraph needs to go on: the question asked (and its interrupt id),
the finished nodes' outputs. Those writes live in the checkpoint index, which ``agentsnap push`` / ``clone`` do not
carry. So when such a run has stopped, the next flush records the writes as a small snapshot on the thread's branch
(a child of the checkpoint they belong to), and a saver that adopts the branch (:meth:`PFSaver._adopt_branches`)
indexes them again. The thread's next checkpoint follows the checkpoint itself, not that snapshot: the branch moves on
and the writes, consumed, stay reachable only through the reflog, as any earlier position of a branch.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from agentsnap_core.errors import AgentSnapError, RefConflict
from agentsnap_core.repository import journals
from agentsnap_core.store import RefUpdate, SnapshotRow
from langgraph.checkpoint.base import WRITES_IDX_MAP

from ._store import ChannelMap, thread_ref

if TYPE_CHECKING:
    from agentsnap_core.repo import Repo

    from ._index import CheckpointIndex
    from ._store import Shared, Written

WRITES_FORMAT = "agentsnap-langgraph-writes"
#: the special channels whose write means the run stopped there (LangGraph's INTERRUPT and ERROR)
STOPS = frozenset(c for c in ("__interrupt__", "__error__") if c in WRITES_IDX_MAP)
#: ``lg_meta`` key prefix: ``pw:<thread>`` -> the writes snapshot this index holds the writes of
CARRIED = "pw:"
#: the adapter's name in core's journal convention (``<store>/langgraph/journal/*.journal``)
ADAPTER = "langgraph"


class CarriedWrites:
    """Record a stopped run's pending writes in the store, and index them again from a branch that carries them."""

    if TYPE_CHECKING:
        repo: Repo
        index: CheckpointIndex
        _s: Shared

        def _write_snapshot(self, state_doc: dict[str, Any], channels: ChannelMap, parents: list[str],
                            meta: dict[str, Any], world_rec: dict[str, Any] | None, defer: bool = False,
                            message: str | None = None, keep: Sequence[str] = ()) -> Written: ...

        def _index_snapshots(self, rows: list[SnapshotRow]) -> None: ...

        def _writing(self) -> AbstractContextManager[None]: ...

        def flush(self) -> None: ...

    # ---------------------------------------------------------------- the journal of a saver's threads
    # A process killed before its saver closed (SIGKILL, the OOM killer, SIGTERM without a handler) leaves checkpoints
    # in the index that no branch names yet (they wait for the next flush) and writes on a tip nothing recorded
    # (close() records them: _note_cut_short). Core's write-behind convention (agentsnap_core.repository.journals)
    # makes that visible: each saver holds a journal under <store>/langgraph/journal/ with a lock for its life and
    # writes each thread it touches into it once; status, log and push name a journal no live process holds, and the
    # next saver on the store records those threads and removes it.

    def _open_journal(self) -> None:
        folder = journals.journal_dir(self.repo.store_dir, ADAPTER)
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{os.getpid()}-{os.urandom(6).hex()}{journals.SUFFIX}"  # (not uuid4: tests patch it)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # (held until close: a live saver's journal is never taken for a dead one)
        except OSError:
            pass  # a filesystem without flock: core then names it while it lives (an unneeded warning, never a gap)
        self._s.journal = (fd, path)

    def _journal(self, thread_id: str) -> None:
        """Called by put / put_writes: the thread goes into this saver's journal (once)."""
        if thread_id in self._s.journaled or self._s.journal is None:
            return
        with self._s.lock:
            if thread_id not in self._s.journaled:
                os.write(self._s.journal[0], json.dumps(thread_id).encode() + b"\n")
                self._s.journaled.add(thread_id)

    def _close_journal(self, keep: bool) -> None:
        """At close: remove the journal (``keep``: the closing flush failed, so the next saver does its work)."""
        journal, self._s.journal = self._s.journal, None
        if journal is None:
            return
        if not keep:
            journal[1].unlink(missing_ok=True)
        os.close(journal[0])

    def _replay_journals(self) -> None:
        """At open: for each journal no live saver holds, record its threads (their newest checkpoints, flushed by the
        recovery before this; the writes on a tip) and remove it."""
        folder = journals.journal_dir(self.repo.store_dir, ADAPTER)
        try:
            names = sorted(n for n in os.listdir(folder) if n.endswith(journals.SUFFIX))
        except OSError:
            return
        for name in names:
            path = folder / name
            try:
                fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
            except OSError:
                continue
            try:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    continue  # a live saver's
                threads = set()
                for line in path.read_bytes().splitlines():
                    try:
                        thread = json.loads(line)
                    except ValueError:
                        continue  # (a line the kill cut short)
                    if isinstance(thread, str):
                        threads.add(thread)
                stops = [(t, ns, newest[0]) for t in sorted(threads) for ns in self.index.namespaces(t)
                         if (newest := self.index.latest_snapshot(t, ns)) is not None]
                with self._s.lock:
                    self._s.stopped.update(stops)
                self.flush()
                path.unlink(missing_ok=True)
            finally:
                os.close(fd)

    def _note_stop(self, thread_id: str, ns: str, checkpoint_id: str, channels: Iterable[str]) -> None:
        """Called by ``put_writes``: a write on a stopping channel marks its checkpoint for the flush (a subgraph's
        too: an interrupt inside a subgraph stops the subgraph at its checkpoint and the parent at its own); any
        write is remembered for :meth:`_note_cut_short`."""
        stop = bool(STOPS.intersection(channels))
        with self._s.lock:
            self._s.written[(thread_id, ns)] = checkpoint_id
            if stop:
                self._s.stopped.add((thread_id, ns, checkpoint_id))

    def _note_cut_short(self) -> None:
        """Called by ``close()`` before its flush: a run can stop with writes on its newest checkpoint and no stop
        write - Ctrl-C during a super-step raises KeyboardInterrupt in the caller's thread while the nodes in worker
        threads finish and store their writes, with no new checkpoint and no ``__error__``. Every checkpoint this
        saver wrote writes to is taken for a stop; the flush records those still at their thread's tip with writes
        (a finished run's tip has none) and not recorded already."""
        with self._s.lock:
            self._s.stopped.update((t, ns, cid) for (t, ns), cid in self._s.written.items())
            self._s.written.clear()

    def _carry_writes(self, stopped: Sequence[tuple[str, str, str]]) -> list[tuple[str, str, str]]:
        """Write the pending writes of each stopped checkpoint still at its thread's tip as a snapshot on the thread's
        branch (after the flush that made the checkpoint durable), with the stopped subgraph checkpoints of the same
        run (their newest, with their writes) as further parents, so their namespaces travel too. A thread that moved
        on since is left alone: the writes were consumed by its next checkpoint. Returns the subgraph stops whose
        parent's stop has not come yet (the flush keeps them for the next one)."""
        made: list[tuple[str, str, str, str | None]] = []  # (thread, ref, writes snapshot, the ref's old value)
        rows: list[SnapshotRow] = []
        roots = {t: cid for t, ns, cid in stopped if not ns}
        later = [e for e in stopped if e[1] and e[0] not in roots]
        with self._writing():
            for thread_id, cid in sorted(roots.items()):
                name = thread_ref(thread_id, "")
                current = self.repo.refs.get_ref(name)
                base = self._checkpoint_at(current, cid)
                if base is None:
                    continue
                writes = self.index.writes(thread_id, "", cid)
                if not writes or current != base and _recorded(self.repo.manifest(str(current)), len(writes)):
                    continue  # (no writes; or the branch names these writes already: an interrupt, then close())
                parents, namespaces = [base], {}
                for _t, ns, ncid in sorted(e for e in stopped if e[0] == thread_id and e[1]):
                    newest = self.index.latest_snapshot(thread_id, ns)
                    if newest is None or newest[0] != ncid:
                        continue  # (that subgraph went on: its stop was answered)
                    parents.append(newest[1])
                    namespaces[ns] = {"checkpoint_id": ncid, "snapshot": newest[1],
                                      "writes": _doc_writes(self.index.writes(thread_id, ns, ncid))}
                doc = {
                    "format": WRITES_FORMAT,
                    "v": 1,
                    "thread_id": thread_id,
                    "checkpoint_ns": "",
                    "checkpoint_id": cid,
                    "writes": _doc_writes(writes),
                    "namespaces": namespaces,
                }
                step = (self.repo.manifest(base).get("meta") or {}).get("step")
                stop = " and ".join(sorted(c.strip("_") for _t, c, *_ in writes if c in STOPS)) or "pending writes"
                meta = {"thread_id": thread_id, "checkpoint_id": cid, "writes_of": cid, "step": step,
                        "stopped": stop, "writes": len(writes)}
                at = f" step {step}" if isinstance(step, int) else ""
                # the branch names this snapshot, not the checkpoints it stopped at: agentsnap prune protects what a
                # ref names, so those checkpoints were pruned and gc took their values (the thread's newest checkpoint,
                # its question with it, was gone). Their objects are listed here and their files are this snapshot's,
                # so they stay while the branch is here; _drop_pruned keeps their rows (held_by_a_stop)
                keep, world_rec = _layers_of(self.repo, parents)
                snap = self._write_snapshot(doc, {}, parents, {k: v for k, v in meta.items() if v is not None},
                                            world_rec, keep=keep,
                                            message=f"langgraph {thread_id}{at}: stopped ({stop}), its pending writes")
                made.append((thread_id, name, snap.id, current))
                rows.append(snap.row)
            if not made:
                return later
            self.repo.objects.barrier()
            self._index_snapshots(rows)
            for thread_id, name, oid, current in made:
                try:
                    self.repo.refs.update_refs([RefUpdate(name, oid, current)], "langgraph: pending writes")
                except RefConflict:  # another writer moved the thread on: its checkpoint consumed these writes
                    continue
                with self.index.tx() as db:
                    db.execute("INSERT OR REPLACE INTO lg_meta VALUES (?,?)", (CARRIED + thread_id, oid))
        return later

    def _checkpoint_at(self, tip: str | None, cid: str) -> str | None:
        """The snapshot of checkpoint ``cid`` when the branch's tip ``tip`` is it, or writes recorded for it."""
        if tip is None:
            return None
        if self.index.checkpoint_of_snapshot(tip) == cid:
            return tip
        manifest = self.repo.manifest(tip)
        parents = manifest.get("parents") or []
        if (manifest.get("meta") or {}).get("writes_of") == cid and parents:
            return str(parents[0])
        return None

    def _carried(self, db: Any) -> dict[str, str]:
        """``{thread: writes snapshot}`` whose writes this index already holds."""
        return {str(k)[len(CARRIED):]: str(v) for k, v in
                db.execute("SELECT key, value FROM lg_meta WHERE key LIKE ?", (CARRIED + "%",)).fetchall()}


def _layers_of(repo: Repo, snapshots: Sequence[str]) -> tuple[list[str], dict[str, Any] | None]:
    """The objects the state layers of ``snapshots`` (checkpoints) name, and the files of the first one."""
    keep: set[str] = set()
    world_rec = None
    for i, oid in enumerate(snapshots):
        layers = repo.manifest(oid).get("layers") or {}
        state = layers.get("state") or {}
        keep.update(x for x in [state.get("content"), *(state.get("refs") or [])] if isinstance(x, str))
        if i == 0 and isinstance(layers.get("world"), dict):
            world_rec = dict(layers["world"])
    return sorted(keep), world_rec


def held_by_a_stop(repo: Repo, thread_id: str) -> set[str]:
    """The checkpoint snapshots a thread's branch holds through the stopped run's writes snapshot at its tip (the
    checkpoint it stopped at and its stopped subgraphs'), or none when the tip is a checkpoint."""
    tip = repo.refs.get_ref(thread_ref(thread_id, ""))
    if tip is None:
        return set()
    try:
        manifest = repo.manifest(tip)
    except AgentSnapError:  # (a tip that cannot be read: nothing is held)
        return set()
    if not (manifest.get("meta") or {}).get("writes_of"):
        return set()
    return {p for p in manifest.get("parents") or [] if isinstance(p, str)}


def _recorded(manifest: dict[str, Any], count: int) -> bool:
    """Whether a writes snapshot (the branch's tip, a child of the stopped checkpoint) holds ``count`` writes."""
    return (manifest.get("meta") or {}).get("writes") == count


def _doc_writes(writes: Sequence[tuple[str, str, str, bytes, str, int]]) -> list[list[Any]]:
    return [[t, i, c, typ, bytes(v), p] for t, c, typ, v, p, i in writes]


def adopted_writes(thread_id: str, doc: dict[str, Any]) -> Iterator[tuple[Any, ...]]:
    """``lg_writes`` rows (under the branch's thread) of a writes snapshot's document, its subgraphs' included."""
    parts = [("", doc)] + [(ns, part) for ns, part in (doc.get("namespaces") or {}).items()]
    for ns, part in parts:
        for task_id, idx, channel, typ, value, path in part.get("writes", []):
            yield (thread_id, ns, part["checkpoint_id"], task_id, idx, channel, typ, bytes(value), path)


def subgraph_tips(doc: dict[str, Any]) -> list[tuple[str, str]]:
    """``(namespace, snapshot)`` of each stopped subgraph checkpoint a writes snapshot's document names."""
    return sorted((ns, str(part["snapshot"])) for ns, part in (doc.get("namespaces") or {}).items())
