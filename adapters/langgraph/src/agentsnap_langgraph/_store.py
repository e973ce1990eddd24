"""Store plumbing shared by the saver's modules: ref names, opening the store, shared mutable state."""

from __future__ import annotations

import getpass
import os
import re
import socket
import sys
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentsnap_core.errors import AgentSnapError, InvalidInput, StoreGone, StoreNotFound
from agentsnap_core.localstore import LocalStore
from agentsnap_core.repo import PRIMARY, STORE_DIR, Repo
from agentsnap_core.store import SnapshotRow

from ._index import CheckpointIndex, SqliteIndex

if TYPE_CHECKING:
    from .saver import PFSaver

STATE_FORMAT = "agentsnap-langgraph-checkpoint"
STATE_VERSION = 1
INDEX_FILE = "langgraph.sqlite"
ROOT_REF_PREFIX = "refs/heads/langgraph/"
NS_REF_PREFIX = "refs/langgraph-ns/"
_SAFE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]*$")

#: ``lg_meta`` key prefix: ``fx:<snapshot id>``, a checkpoint this index adopted from elsewhere (a clone, a pull, a
#: merge: ``PFSaver._adopt_branches``), read with LangGraph's strict msgpack allowlist (``PFSaver._strict``); a new
#: snapshot written for such a checkpoint (``prune(keep_latest)`` re-roots it) is marked too
FOREIGN = "fx:"

Pending = tuple[str, str, tuple[str, ...]]
ChannelMap = dict[str, tuple[str, str, str | None]]  # channel -> (version key, type, object id)


def encode_name(value: str) -> str:
    """A thread id or namespace as one ref-name component (hex-escaped with '@' when unsafe)."""
    if _SAFE.match(value) and ".." not in value and not value.endswith(".lock") and len(value) <= 200:
        return value
    return "@" + value.encode().hex()


def decode_name(component: str) -> str | None:
    """The thread id (or namespace) :func:`encode_name` made ``component`` of; None for one it never makes."""
    if component.startswith("@"):
        try:
            return bytes.fromhex(component[1:]).decode()
        except ValueError:
            return None
    return component if component and "/" not in component else None


def stable_ns(checkpoint_ns: str) -> str:
    """A namespace without its task ids (``"sub:<task id>|inner:<task id>"`` -> ``"sub|inner"``): the same for
    every call of a subgraph node (as LangGraph's ``ReplayState`` names it), so refs do not grow per call."""
    return "|".join(part.split(":", 1)[0] for part in checkpoint_ns.split("|"))


def thread_ref(thread_id: str, checkpoint_ns: str = "") -> str:
    """The ref naming the newest snapshot of a thread, or of one subgraph node's calls in it."""
    if not checkpoint_ns:
        return ROOT_REF_PREFIX + encode_name(thread_id)
    return f"{NS_REF_PREFIX}{encode_name(thread_id)}/{encode_name(stable_ns(checkpoint_ns))}"


def author_name() -> str:
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
    if store_dir.name == STORE_DIR and (store_dir.is_file() or not store_dir.exists()):
        # a tree whose store is outside it (agentsnap init --store-dir): its link, or the link it lost
        repo = Repo.open_at(store_dir.parent)
        if repo is not None and repo.worktree == PRIMARY:
            return repo
        if repo is not None:
            repo.close()  # (a fork's worktree: not this project's own store)
    if store_dir.is_file():
        raise AgentSnapError(f"{store_dir} is a linked worktree file; give the store directory instead")
    for above in (store_dir, *store_dir.parents):  # a file where the store or a folder above it would go
        if above.exists() and not above.is_dir():
            raise InvalidInput(f"PFSaver: {above} is a file, not a directory; give a project or store directory")
        if above.exists():
            break
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


class Shared:
    """Mutable state shared by a saver and its ``with_allowlist`` clones."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.flush_lock = threading.Lock()
        #: ref -> [(snapshot, checkpoint id, parent snapshots)] written since the last flush
        self.pending_refs: dict[str, list[Pending]] = {}
        self.pending_rows: list[SnapshotRow] = []
        self.pending_seqs: list[int] = []
        #: (state document, manifest) bytes of new snapshots, written as objects by the next flush
        self.pending_objects: list[tuple[bytes, bytes]] = []
        #: (thread, ns) -> (checkpoint id, snapshot, channel map) of the newest put
        self.last: dict[tuple[str, str], tuple[str, str, ChannelMap]] = {}
        #: subgraph node ref -> (checkpoint id, snapshot) of the newest put of any of its calls
        self.node_tips: dict[str, tuple[str, str]] = {}
        #: (thread, ns) -> extra parent snapshot for the next put (merge_thread)
        self.extra_parents: dict[tuple[str, str], str] = {}
        #: (thread, checkpoint namespace, checkpoint id) whose run stopped with pending writes (an interrupt, a failed
        #: node): the next flush records them in the store so they travel with the thread (``_writes.CarriedWrites``)
        self.stopped: set[tuple[str, str, str]] = set()
        #: (thread, ns) -> checkpoint id of the newest put_writes, since the last close: at close each is taken for a
        #: stop (a run cut short with no stop write: Ctrl-C); only those still at their thread's tip are recorded
        self.written: dict[tuple[str, str], str] = {}
        #: this saver's journal (core's write-behind convention): ``(fd, path)`` while open, and the threads in it
        self.journal: tuple[int, Path] | None = None
        self.journaled: set[str] = set()
        self.cache: OrderedDict[str, bytes] = OrderedDict()
        #: object id -> time.monotonic() when this process last stored it
        self.stored: dict[str, float] = {}
        self.cache_bytes = 0
        self.closed = False
        self.wake = threading.Event()
        #: callables run by the next flush once its objects are durable (world stat-cache saves)
        self.after_barrier: list[Callable[[], None]] = []
        #: the store's object batch, open while the saver is: what puts write waits in memory for the flush's
        #: pack (one file per flush; readable here at once, by other processes after the flush)
        self.objects_batch: Any = None
        #: core's writer session (repository/writers.py), held from the first put after a quiet moment until a flush
        #: has named everything written or re-used since: ``gc --prune now`` keeps what the next flush names
        self.writer: Any = None
        self.active_puts = 0
        self.last_put = 0.0
        #: the error of the last background flush, while no flush has succeeded since (the next put retries the
        #: flush first and raises FlushFailed if it fails again), and when flushes started failing
        self.flush_error: BaseException | None = None
        self.failing_since = 0.0



def open_index(repo: Repo) -> CheckpointIndex:
    """The checkpoint index for ``repo``: SQLite in its store directory, or PostgreSQL when bound to one."""
    shared = getattr(repo.store, "shared", None)
    if shared is None:
        return SqliteIndex(repo.store_dir / INDEX_FILE)
    db = getattr(shared, "db", None)
    if db is None or not hasattr(db, "conninfo"):
        raise AgentSnapError(
            f"PFSaver keeps its checkpoint index in SQL: use the embedded store or a postgresql:// store, "
            f"not {getattr(shared, 'url', 'this store')}"
        )
    from ._pgindex import PostgresIndex

    return PostgresIndex(db.conninfo, db.schema, shared.url)


class Written:
    """A snapshot just written: its id and its row for the core snapshot index."""

    __slots__ = ("id", "row", "pending")

    def __init__(self, oid: str, row: SnapshotRow, pending: tuple[bytes, bytes] | None = None) -> None:
        self.id, self.row = oid, row
        #: (state document, manifest) bytes not written yet: the next flush writes them
        self.pending = pending


def flush_loop(ref: weakref.ReferenceType[PFSaver], shared: Shared, interval: float) -> None:
    """The background group commit: flush every ``interval`` seconds until the saver closes."""
    while not shared.closed:
        due = time.monotonic() + interval
        while not shared.closed and (left := due - time.monotonic()) > 0:
            shared.wake.wait(min(left, 3600.0))  # a long (or infinite) interval: threading's timeout has a limit
        saver = ref()
        if saver is None or shared.closed:
            return
        try:
            saver.flush()
            saver.release_idle_writer()
        except Exception as e:  # its work stays queued; retried here, by the next put (which raises if it fails
            if shared.flush_error is None:  # again: saver.FlushFailed) and at close()
                shared.failing_since = time.time()
            shared.flush_error = e
        del saver


def close_at_exit(ref: weakref.ReferenceType[PFSaver]) -> None:
    """The last flush of a saver left open; a failure is said on stderr (nothing is lost: see the message)."""
    saver = ref()
    if saver is not None:
        try:
            saver.close()
        except StoreGone as e:
            sys.stderr.write(f"agentsnap-langgraph: {e}\n")
        except Exception as e:
            sys.stderr.write(
                f"agentsnap-langgraph: PFSaver could not flush to {saver.repo.store_dir} at exit: {e}. The checkpoints "
                f"put since its last flush are kept in its checkpoint index and are written when the store is next "
                f"opened by PFSaver.\n"
            )
