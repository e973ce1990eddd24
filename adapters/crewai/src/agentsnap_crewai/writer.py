"""Write-behind for CrewAI checkpoints: the call hands the checkpoint over, a background writer commits it.

CrewAI calls ``checkpoint()`` on its event-bus worker after every task and waits for it. Committing an agentsnap
snapshot makes it durable (objects fsync'd before the branch moves) and costs tens of milliseconds; CrewAI's own
JsonProvider writes a file without fsync in under one. So by default the provider only captures the checkpoint (the
JSON text CrewAI already made, an immutable ``str``: nothing is copied) and queues it; one writer thread per store
commits the queue in order: whatever is queued when it gets to it, in one batch (``Repo.batch()``: one pack, one
durability barrier, one SQLite transaction), so a writer that falls behind catches up in fewer, larger commits.

Durability (documented in the README): before the call returns, the checkpoint is appended to the process's journal
of the store (:mod:`agentsnap_crewai.journal`, no fsync: in the page cache, as JsonProvider's file), so a killed
process loses none; the next open of the store through this package replays what its writer had not committed. A
checkpoint is on disk, fsync'd, once its snapshot is committed: normally one snapshot commit after the call; always by
the end of ``kickoff()``, on ``flush()``, at interpreter exit (``atexit``), and before any read of checkpoints through
this package (``resume_crew``, ``checkpoint_path``, ``checkpoint_data``, ``from_checkpoint``, ``prune``,
``checkpoint_failures``: read-your-writes). Every committed snapshot is complete (the store never holds half a
checkpoint). The queue is bounded: a call finding ``max_pending`` checkpoints queued or being committed waits for
room.

A commit that fails is never only logged: it is noted as a failed checkpoint (``checkpoint_failures``, the run's
:class:`~agentsnap_crewai.CheckpointFailed` at the end of ``kickoff()``) and raised, as
:class:`CheckpointWriteFailed`, by the next ``checkpoint()`` call or ``flush()`` on that store.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from agentsnap_core import Repo
from agentsnap_core.errors import AgentSnapError

from .journal import Journal, Segment

#: seconds an idle writer thread waits for more work before it ends (a new checkpoint starts another)
IDLE_S = 2.0
#: checkpoint ids a writer remembers (the parent of the next checkpoint is almost always among them)
_IDS_KEPT = 4096


class CheckpointWriteFailed(AgentSnapError):
    """Checkpoint(s) handed to the background writer could not be committed (raised by the next call or flush)."""

    def __init__(self, failures: list[tuple[str, BaseException]]) -> None:
        self.failures = failures
        what, exc = failures[0]
        super().__init__(f"agentsnap: {len(failures)} CrewAI checkpoint(s) queued for {what} could not be written, "
                         f"the first: {type(exc).__name__}: {exc}")


@dataclass
class Pending:
    """One checkpoint handed over: everything the commit needs, and its outcome."""

    data: str
    ref: str
    branch: str
    parent_id: str | None
    trigger: str | None
    token: str | None  # the id the call returned (None: the call waits and returns the snapshot id)
    on_error: Callable[[BaseException], None]  # notes the failure where the run and a later resume see it
    frame: list[bytes] | None = None  # its journal entry (written behind only), appended before the call returns
    segment: Segment | None = None  # the journal file that holds it until it is committed
    done: bool = False
    oid: str | None = None
    error: BaseException | None = None


#: commits a batch of queued checkpoints: ``(repo, items, known ids) -> [(snapshot id, None) or (None, error)]``
Commit = Callable[[Repo, list[Pending], dict[str, str]], list[tuple[str | None, BaseException | None]]]


class Writer:
    """The background writer of one store: commits queued checkpoints in order, one thread while there is work."""

    def __init__(self, root: Path, commit: Commit, max_pending: int, journal: Journal | None = None) -> None:
        self.root = root
        self.journal = journal
        self.commit = commit
        self.max_pending = max(1, max_pending)
        self.cond = threading.Condition()
        self.queue: deque[Pending] = deque()
        self.inflight = 0  # checkpoints taken off the queue, being committed
        self.thread: threading.Thread | None = None
        self.errors: list[tuple[str, BaseException]] = []  # failed commits not yet raised to a caller
        self.ids: dict[str, str] = {}  # token -> snapshot id, for the checkpoints this writer committed

    def raise_errors(self) -> None:
        """Raise (once) the failures of commits since the last call that raised them. Caller holds ``cond``."""
        if self.errors:
            failures, self.errors = self.errors, []
            raise CheckpointWriteFailed(failures)

    def submit(self, item: Pending, *, wait: bool) -> None:
        """Queue ``item`` (waiting for room); with ``wait``, return once it is committed (raise if that failed)."""
        with self.cond:
            self.raise_errors()
            while len(self.queue) + self.inflight >= self.max_pending:
                self.cond.wait()
                self.raise_errors()
            if item.frame is not None and self.journal is not None:
                item.segment = self.journal.append(item.frame)  # in the page cache before the call returns
                item.frame = None
            self.queue.append(item)
            if self.thread is None:
                self.thread = threading.Thread(target=self._run, name=f"agentsnap-crewai-writer:{self.root}", daemon=True)
                self.thread.start()
            self.cond.notify_all()
            if wait:
                while not item.done:
                    self.cond.wait()
                if item.error is not None:
                    self.errors = [e for e in self.errors if e[1] is not item.error]
                    raise CheckpointWriteFailed([(str(self.root), item.error)])

    def settle(self) -> None:
        """Wait until every checkpoint queued so far is committed or failed (failures stay for the next call/flush)."""
        with self.cond:
            while self.queue or self.inflight:
                self.cond.wait()

    def flush(self) -> None:
        """:meth:`settle`, then raise the failures not yet raised."""
        with self.cond:
            while self.queue or self.inflight:
                self.cond.wait()
            self.raise_errors()

    def _tidy_journal(self) -> None:
        """Drop the journal entries committed. Caller holds ``cond``."""
        if self.journal is not None:
            try:
                self.journal.tidy()
            except OSError:  # noqa: S110 - a journal left over is replayed idempotently (the checkpoint id is the key)
                pass

    def close_journal(self) -> None:
        """At exit, after :meth:`flush`: remove this process's journal files of the store (all their entries are done)."""
        with self.cond:
            if self.journal is not None and not self.queue and not self.inflight:
                self.journal.close()

    def _run(self) -> None:
        repo: Repo | None = None
        try:
            while True:
                with self.cond:
                    while not self.queue:
                        if not self.cond.wait(IDLE_S) and not self.queue:
                            self.thread = None
                            return
                    items = list(self.queue)  # everything queued: committed together (one barrier, one transaction)
                    self.queue.clear()
                    self.inflight = len(items)
                    if self.journal is not None:
                        self.journal.batch_taken()
                try:
                    if repo is None:
                        repo = Repo.open(self.root)
                    results = self.commit(repo, items, self.ids)
                    if len(results) != len(items):
                        raise AgentSnapError(f"checkpoint writer: {len(results)} results for {len(items)} checkpoints")
                except BaseException as exc:  # noted and raised to the next caller: never only logged
                    results = [(None, exc)] * len(items)
                for item, (_oid, error) in zip(items, results, strict=True):
                    if error is not None:
                        try:
                            item.on_error(error)
                        except BaseException:  # noqa: S110 - the failure is still raised by the next call / flush
                            pass
                with self.cond:
                    self.inflight = 0
                    for item, (oid, error) in zip(items, results, strict=True):
                        item.done, item.oid, item.error = True, oid, error
                        if error is not None:
                            self.errors.append((str(self.root), error))
                        elif item.token:
                            self.ids[item.token] = str(oid)
                            if len(self.ids) > _IDS_KEPT:  # older ids are found in the store (meta.crewai_id)
                                del self.ids[next(iter(self.ids))]
                        if item.segment is not None:  # committed, or failed and raised: its entry is not replayed
                            item.segment.entries -= 1
                    self._tidy_journal()
                    self.cond.notify_all()
        finally:
            if repo is not None:
                repo.close()
            with self.cond:
                if self.thread is threading.current_thread():
                    self.thread = None
                    self.inflight = 0
                    if self.queue:  # an unexpected exit with work left: a fresh thread takes it over
                        self.thread = threading.Thread(target=self._run, name=f"agentsnap-crewai-writer:{self.root}", daemon=True)
                        self.thread.start()
                self.cond.notify_all()


_WRITERS: dict[str, Writer] = {}
_REGISTRY_LOCK = threading.Lock()


def _after_fork_in_child() -> None:
    """A forked child has none of its parent's writer threads: it starts its own writers and journals.

    The parent's queued checkpoints are the parent's to commit; the child closes its copies of the parent's journal
    fds (the parent's flock stays: it is released only when every fd of the file is closed, or by an explicit unlock).
    """
    global _REGISTRY_LOCK
    _REGISTRY_LOCK = threading.Lock()
    for writer in _WRITERS.values():
        for seg in writer.journal.segments if writer.journal is not None else []:
            try:
                os.close(seg.fd)
            except OSError:  # noqa: S110 - already closed
                pass
    _WRITERS.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)


def _key(root: Path) -> str:
    return str(Path(root).resolve())


def writer_for(root: Path, commit: Commit, max_pending: int, journal_dir: Path | None = None) -> Writer:
    """The process's writer of the store at ``root`` (one per store: its checkpoints commit in call order).

    ``journal_dir``: where its journal is kept (the first caller's is used; the store decides it).
    """
    key = _key(root)
    with _REGISTRY_LOCK:
        writer = _WRITERS.get(key)
        if writer is None:
            if not _WRITERS:
                atexit.register(_flush_at_exit)
            writer = _WRITERS[key] = Writer(Path(key), commit, max_pending, Journal(journal_dir) if journal_dir else None)
        writer.max_pending = max(writer.max_pending, max_pending)
        return writer


def existing_writer(root: Path) -> Writer | None:
    with _REGISTRY_LOCK:
        return _WRITERS.get(_key(root))


def settle(root: Path) -> None:
    """Read-your-writes: every checkpoint this process queued for the store at ``root`` is committed (or failed)."""
    writer = existing_writer(root)
    if writer is not None:
        writer.settle()


def flush_all() -> None:
    """Commit every queued checkpoint of every store; raise :class:`CheckpointWriteFailed` for any that failed."""
    with _REGISTRY_LOCK:
        writers = list(_WRITERS.values())
    failures: list[tuple[str, BaseException]] = []
    for writer in writers:
        try:
            writer.flush()
        except CheckpointWriteFailed as exc:
            failures += exc.failures
    if failures:
        raise CheckpointWriteFailed(failures)


def _flush_at_exit() -> None:
    try:
        flush_all()
    except CheckpointWriteFailed as exc:  # nobody is left to raise it to: said on stderr, and noted in the store
        print(f"{exc} (at exit; also noted in the store, where it still exists: agentsnap_crewai.checkpoint_failures)", file=sys.stderr)
    with _REGISTRY_LOCK:
        writers = list(_WRITERS.values())
    for writer in writers:
        try:
            writer.close_journal()
        except OSError:  # noqa: S110 - left over, it is replayed idempotently by the next open
            pass


def known_ids(root: Path) -> dict[str, str]:
    writer = existing_writer(root)
    if writer is None:
        return {}
    with writer.cond:
        return dict(writer.ids)

