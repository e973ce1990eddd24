"""The store interface: objects plus refs.

A store is two parts that implementations may put on different engines:

* :class:`ObjectStore` - content-addressed objects (immutable, idempotent writes);
* :class:`RefStore` - mutable names (branches, tags, per-worktree HEADs) updated by
  compare-and-swap, their reflog, and an index of snapshots for fast lookups.

The embedded default is :class:`agentsnap_core.stores.local.LocalStore` (a directory plus SQLite).
Every implementation runs the same contract tests (:mod:`agentsnap_core.testing.store_contract`).
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

#: sentinel for :meth:`RefStore.update_ref`: do not check the old value
ANY = "*any*"


class HeldPaths:
    """Directories and files as a store handle opened them: :meth:`gone` says whether any was deleted or replaced
    since (``rm -rf .agentsnap`` under a running agent, a new store made at the same path). Two ``stat`` calls
    each: cheap enough for every write.

    A directory is held open (its inode cannot be reused by a new directory while we hold it). A file is only
    remembered by its identity, never opened: closing any descriptor of a file drops every POSIX lock this process
    holds on it, and SQLite's locks on an index are such locks (a held index descriptor, closed by one handle,
    let another handle's writes corrupt the database). The files named here are SQLite databases whose own open
    connection keeps their inode from being reused.
    """

    def __init__(self, *paths: str | os.PathLike[str]) -> None:
        self.held: list[tuple[str, int | None, tuple[int, int]]] = []
        try:
            for path in paths:
                if os.path.isdir(path):
                    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
                    st = os.fstat(fd)
                    self.held.append((os.fspath(path), fd, (st.st_dev, st.st_ino)))
                else:
                    st = os.stat(path)
                    self.held.append((os.fspath(path), None, (st.st_dev, st.st_ino)))
        except OSError:
            self.close()
            raise

    def gone(self) -> bool:
        for path, _fd, then in self.held:
            try:
                now = os.stat(path)
            except OSError:
                return True
            if (now.st_dev, now.st_ino) != then:
                return True
        return False

    def close(self) -> None:
        held, self.held = self.held, []
        for _path, fd, _then in held:
            if fd is not None:
                os.close(fd)


@dataclass(frozen=True)
class RefUpdate:
    name: str
    new: str | None  #: None deletes the ref
    expected: str | None = ANY  #: None = must not exist; ANY = no check


@dataclass(frozen=True)
class ReflogEntry:
    seq: int
    name: str
    old: str | None
    new: str | None
    time: float
    message: str


@dataclass(frozen=True)
class SnapshotRow:
    id: str
    parents: tuple[str, ...]
    time: float
    message: str
    agent: str


@runtime_checkable
class ObjectStore(Protocol):
    def has(self, oid: str) -> bool: """True when the object is present (not verified)."""
    def missing(self, oids: Iterable[str]) -> set[str]: """The subset of ``oids`` not present."""
    def get(self, oid: str) -> tuple[int, bytes]: """``(kind, raw)``, re-verified against ``oid``."""
    def get_stored(self, oid: str) -> bytes: """The stored (encoded) bytes, for transfer."""
    def put(self, kind: int, raw: bytes | memoryview) -> str: """Store an object; return its id."""
    def put_stored(self, oid: str, stored: bytes) -> None: """Verify and store encoded bytes."""
    def iter_oids(self) -> Iterator[str]: """Every object id present."""
    def age(self, oid: str) -> float: """Seconds since the object was last written or re-used."""
    def delete(self, oid: str) -> None: """Remove an object (gc only)."""
    def barrier(self) -> None: """Make every object written so far durable."""
    def temp_files(self) -> list[str]: """Leftovers of interrupted writers that gc may remove (paths)."""


@runtime_checkable
class RefStore(Protocol):
    def get_ref(self, name: str) -> str | None: """The id a ref points at, or None."""
    def list_refs(self, prefix: str = "") -> dict[str, str]: """Refs whose name starts with prefix."""
    def update_refs(self, updates: list[RefUpdate], message: str) -> None: """Apply all updates atomically (CAS) or raise RefConflict."""
    def reflog(self, name: str | None = None, limit: int | None = None) -> list[ReflogEntry]: """Newest first."""
    def get_head(self, worktree: str) -> tuple[str | None, str | None]: """``(symbolic ref, detached id)`` of a worktree."""
    def set_head(self, worktree: str, symref: str | None, oid: str | None) -> None: """Point a worktree's HEAD."""
    def list_heads(self) -> dict[str, tuple[str | None, str | None]]: """Every worktree's HEAD (gc roots)."""
    def delete_head(self, worktree: str) -> None: """Forget a worktree's HEAD."""
    def index_snapshot(self, row: SnapshotRow) -> None: """Record a snapshot in the index."""
    def snapshots_with_prefix(self, prefix: str, limit: int = 2) -> list[str]: """Ids starting with prefix."""
    def list_snapshots(self, limit: int | None = None, offset: int = 0) -> list[SnapshotRow]: """Newest first."""
    def get_config(self, key: str) -> str | None: """A store setting."""
    def set_config(self, key: str, value: str) -> None: """Change a store setting."""


def sqlite_read_only(path: Path) -> bool:
    """True when ``path`` exists but this user cannot write it (or its directory): open it read-only."""
    return path.exists() and not (os.access(path, os.W_OK) and os.access(path.parent, os.W_OK))


def enable_wal(db: sqlite3.Connection, timeout: float = 60.0) -> None:
    """Put the database in WAL mode, waiting for other processes doing the same.

    Processes opening a new database file at once (two agents' first snapshot, a pool of workers forking from a
    fresh store) each ask for the switch; SQLite answers all but one "database is locked" at once, without its busy
    handler (waiting could deadlock there), even with a timeout set. Once one has switched, the others' switch is a
    no-op: so ask again, briefly, until the timeout."""
    deadline = time.monotonic() + timeout
    pause = 0.001
    while True:
        try:
            db.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, 0.05)


def connect_sqlite(path: Path, read_only: bool) -> sqlite3.Connection:
    """A connection in the store's mode: WAL and ``synchronous=FULL``, or read-only when the store is.

    Read-only opens are ``immutable`` (no ``-shm``/``-wal`` can be made in a directory this user cannot
    write), so ``log``, ``show``, ``diff``, ``status`` and ``verify`` work on a store mounted read-only.
    """
    if read_only:
        uri = f"{Path(path).resolve().as_uri()}?mode=ro&immutable=1"
        db = sqlite3.connect(uri, uri=True, timeout=60, isolation_level=None, check_same_thread=False)
    else:
        db = sqlite3.connect(path, timeout=60, isolation_level=None, check_same_thread=False)
        try:
            enable_wal(db)
            db.execute("PRAGMA synchronous=FULL")
            db.execute("PRAGMA journal_size_limit=1048576")  # a checkpointed WAL is cut back to 1 MiB
        except sqlite3.OperationalError as exc:
            db.close()
            if not readable_on_a_full_disk(Path(path), exc):
                raise
            READ_ONLY_ON_A_FULL_DISK.add(str(path))
            return connect_sqlite(path, True)
        READ_ONLY_ON_A_FULL_DISK.discard(str(path))  # (opened for writing again: the disk has room now)
    db.execute("PRAGMA busy_timeout=60000")
    return db


#: databases this process opened read-only because their disk is full (a write through them fails as "readonly":
#: the CLI says it is the full disk, not a read-only store). Such a connection reads the file as it was (immutable):
#: a long-lived process must not keep it (:attr:`agentsnap_core.stores.local.SqliteRefs.full_disk`)
READ_ONLY_ON_A_FULL_DISK: set[str] = set()


def disk_full(directory: Path) -> bool:
    """Whether the file system holding ``directory`` has no free block left (for anyone, or for this user)."""
    try:
        st = os.statvfs(directory)
    except OSError:
        return False
    return st.f_bavail == 0 or st.f_bfree == 0


def readable_on_a_full_disk(path: Path, exc: sqlite3.OperationalError) -> bool:
    """Whether a database that cannot be opened for writing because its disk is full (SQLite cannot size its
    ``-shm`` file) may be read as it is: only when its ``-wal`` holds nothing, so the main file is the whole state
    (an immutable read ignores the WAL). Then ``log``, ``status``, ``show`` still work when an agent filled the disk,
    as git's do, and a verb that writes fails on its first write (said as a full disk)."""
    if "disk I/O" not in str(exc) and "disk is full" not in str(exc):
        return False
    try:
        wal = os.stat(f"{path}-wal").st_size
    except FileNotFoundError:
        wal = 0
    except OSError:
        return False
    return wal == 0 and disk_full(path.parent)
