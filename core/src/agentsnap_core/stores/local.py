"""The embedded default store: a directory of objects plus a SQLite index.

Layout (format version in ``format.json``)::

    .agentsnap/
      format.json            {"format": "agentsnap-store", "version": 3}
      index.sqlite           refs, reflog, HEADs, snapshot index, config (WAL)
      config.json            the config and the branch each checkout is on, kept beside the index as well
                             (:func:`write_mirror`): a lost index takes them back
      objects/ab/cdef...     one file per large object (see agentsnap_core.format.objects)
      objects/pack/pack-*.pack  small objects, one pack per batch (merged by gc), index inside
                             (see agentsnap_core.stores.pack)
      wt/<worktree>/         per-worktree stat cache and pending trace

Format versions: 1 = objects loose only; 2 = objects may live in packs (pack version 1); 3 = packs may be
of version 2 (small objects compressed together in blocks). A store of an older version is marked 3 before
this code writes its first pack, so an agentsnap that does not know those packs refuses the store
(:class:`UnsupportedFormat`) instead of reporting packed objects missing.

Write order (see docs/FORMAT.md): inside a batch (:meth:`LocalObjects.batch`, opened by every
snapshot) new objects smaller than :data:`PACK_MAX_STORED` are kept in memory and readable at
once; :meth:`LocalObjects.barrier` writes them as ONE pack (fsync, rename, directory fsync) and
fsyncs the few large objects written loose meanwhile (``syncfs`` when there are many). Outside a
batch objects are written loose without fsync, made durable by the same barrier. Refs move only
after the barrier, in a SQLite transaction with ``synchronous=FULL``.
"""

from __future__ import annotations

import ctypes
import json
import os
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from agentsnap_core.errors import (
    AgentSnapError,
    ObjectCorrupt,
    ObjectMissing,
    RefConflict,
    StoreGone,
    UnsupportedFormat,
)
from agentsnap_core.format import objects
from agentsnap_core.format.encoding import unpack
from agentsnap_core.stores.base import (
    ANY,
    READ_ONLY_ON_A_FULL_DISK,
    HeldPaths,
    ReflogEntry,
    RefUpdate,
    SnapshotRow,
    connect_sqlite,
    sqlite_read_only,
)
from agentsnap_core.stores.pack import PACK_MAX_STORED, PackCorrupt, PackSet, is_pack_name, write_pack_file

__all__ = ["PACK_MAX_STORED", "LocalObjects", "LocalStore", "SqliteRefs"]

#: the format this code writes: objects loose or in packs whose small objects are compressed in blocks
STORE_FORMAT = 3
#: the formats this code reads (1: loose objects only; 2: packs of version 1 only; a store of either is marked 3
#: before this code writes its first pack)
STORE_FORMATS = (1, 2, 3)
#: format of stores that never hold packs (S3): an older agentsnap still opens them
LOOSE_FORMAT = 1
INDEX_SCHEMA = 1
#: a batch keeps at most this many bytes of new objects in memory; past it they go to a pack at once (fsynced
#: at the barrier with the rest)
BATCH_MAX_BYTES = 32 << 20
#: the index's WAL is checkpointed and truncated when it grows past this (and when the store is closed)
WAL_CHECKPOINT_BYTES = 1 << 20

_syncfs: Any
try:
    _libc = ctypes.CDLL(None, use_errno=True)
    _syncfs = _libc.syncfs
except (OSError, AttributeError):  # pragma: no cover - non-Linux
    _syncfs = None


class LocalObjects:
    """Objects as files under ``root/objects/ab/cdef...``."""

    def __init__(self, root: Path, before_first_pack: Any = None) -> None:
        self.root = Path(root)
        self.dir = self.root / "objects"
        self._lock = threading.Lock()
        self._pending_files: list[str] = []
        self._pending_dirs: set[str] = set()
        self._known_dirs: set[str] = set()
        self._tmp_seq = 0
        self._aged: dict[str, int] = {}
        self.packs = PackSet(str(self.dir / "pack"))
        #: open batches (any thread): while > 0, new small objects wait in ``_buffer`` for the barrier's pack
        self._batches = 0
        self._buffer: dict[str, bytes] = {}
        self._buffer_bytes = 0
        #: buffers being written as a pack right now: still readable from here until the pack is known
        self._inflight: list[dict[str, bytes]] = []
        #: one barrier at a time: a barrier that finds nothing left to write returns only once the one writing
        #: its objects (another thread's) has made them durable
        self._barrier_lock = threading.Lock()
        #: called once before this store writes its first pack of this format (marks the store format)
        self.packs.before_write = before_first_pack
        #: counters for benchmarks and tests: packs written by barriers, objects in them, barriers that wrote
        self.stats = {"packs": 0, "packed": 0, "barriers": 0}

    def _path(self, oid: str) -> str:
        return f"{self.dir}/{oid[:2]}/{oid[2:]}"

    @contextmanager
    def batch(self) -> Iterator[None]:
        """New small objects written meanwhile (by any thread) go into one pack at the next :meth:`barrier`.

        They are readable by this process at once and by others after the barrier; nothing names them before it.
        """
        with self._lock:
            self._batches += 1
        try:
            yield
        finally:
            with self._lock:
                self._batches -= 1

    def _held(self, oid: str) -> bytes | None:
        """The stored bytes of an object written in a batch and not yet in a pack this process knows."""
        held = self._buffer.get(oid)
        if held is None and self._inflight:
            for items in list(self._inflight):
                held = items.get(oid)
                if held is not None:
                    break
        return held

    def has(self, oid: str) -> bool:
        return (self._held(oid) is not None or os.path.exists(self._path(oid))
                or self.packs.locate(oid) is not None)

    def missing(self, oids: Iterable[str]) -> set[str]:
        out = {o for o in set(oids) if self._held(o) is None and not os.path.exists(self._path(o))}
        return {o for o in out if self.packs.locate(o) is None} if out else out

    def get_stored(self, oid: str) -> bytes:
        if not objects.is_oid(oid):
            raise ObjectMissing(str(oid))
        held = self._held(oid)
        if held is not None:
            return held
        try:
            with open(self._path(oid), "rb") as f:
                # read what the file holds, bounded (a planted huge file is refused later, never read whole): asking
                # read() for the bound itself made every read allocate ~32 MiB first (half a KV restore's time)
                size = os.fstat(f.fileno()).st_size
                return f.read(min(size, objects.MAX_OBJECT_BYTES + objects.HEADER.size + 1024))
        except FileNotFoundError:
            pass
        hit = self.packs.locate(oid)  # loose first, then packs (re-scanned on a miss: another gc may have packed it)
        if hit is None:
            raise ObjectMissing(oid)
        pk, loc = hit
        try:
            return pk.read(loc)
        except PackCorrupt as exc:  # a damaged block: the object cannot be read from there
            raise ObjectCorrupt(oid, oid, "?", str(exc)) from None

    def get(self, oid: str) -> tuple[int, bytes]:
        return objects.decode(oid, self.get_stored(oid))

    def stored_size(self, oid: str) -> int:
        """Bytes the object takes in this store (its file, or its share of its pack), for ``du``."""
        held = self._held(oid)
        if held is not None:
            return len(held)
        try:
            return os.stat(self._path(oid)).st_size
        except FileNotFoundError:
            pass
        hit = self.packs.locate(oid)
        if hit is None:
            raise ObjectMissing(oid)
        return hit[0].share(hit[1])

    def read_into(self, oid: str, head: int, views: list[memoryview]) -> tuple[bytes, bytes] | None:
        """A loose object's stored bytes read with one scatter read: its first ``head`` bytes returned, the next
        ones straight into ``views`` (writable, in order), the rest returned; ``(head bytes, rest)``, unverified.

        For :func:`agentsnap_core.format.content.get_raw_into` (which verifies what landed). None when the object
        has no loose file here (packed, held in a batch) or the file is shorter than ``head`` plus the views:
        the caller then reads it the ordinary way.
        """
        if not objects.is_oid(oid) or self._held(oid) is not None or not hasattr(os, "preadv"):
            return None
        try:
            fd = os.open(self._path(oid), os.O_RDONLY)
        except FileNotFoundError:
            return None
        try:
            size = os.fstat(fd).st_size
            want = head + sum(v.nbytes for v in views)
            if size < want or size > objects.MAX_OBJECT_BYTES + objects.HEADER.size + 1024:
                return None
            header = os.pread(fd, head, 0)
            pending, first, pos = [v for v in views if v.nbytes], 0, head
            while first < len(pending):
                n = os.preadv(fd, pending[first : first + 1024], pos)
                if n <= 0:  # the file shrank under us
                    return None
                pos += n
                while n and first < len(pending):
                    if n >= pending[first].nbytes:
                        n -= pending[first].nbytes
                        first += 1
                    else:
                        pending[first], n = pending[first][n:], 0
            rest = os.pread(fd, size - want, want) if size > want else b""
            if len(header) != head or len(rest) != size - want:
                return None
            return header, rest
        finally:
            os.close(fd)

    def _reuse(self, oid: str, path: str) -> bool:
        """True when the object is already stored (loose or packed) and was marked re-used for gc's grace."""
        if self._held(oid) is not None:  # written in this batch: its pack will be new
            return True
        if os.path.exists(path) and _freshen(path):
            return True
        for _ in range(2):  # a pack retired between the lookup and the refresh: look again in the new packs
            hit = self.packs.locate(oid)
            if hit is None:
                return False
            if _freshen(hit[0].path):  # the pack's mtime is the newest re-use of any object in it
                return True
            self.packs.rescan()
        return False

    def put(self, kind: int, raw: bytes | memoryview) -> str:
        oid = objects.digest(kind, raw)
        path = self._path(oid)
        if self._reuse(oid, path):
            return oid
        # an object a batch will pack goes into a block compressed as a whole: compressing it alone first is waste
        blocked = self._batches > 0 and len(raw) + objects.HEADER.size < PACK_MAX_STORED
        _, stored = objects.encode(kind, raw, compress=not blocked, oid=oid)  # (oid: hashed above, from raw)
        self._write(oid, path, stored)
        return oid

    def put_stored(self, oid: str, stored: bytes) -> None:
        objects.verify_stored(oid, stored)  # verify before accepting (encrypted objects: what can be checked)
        path = self._path(oid)
        if self._reuse(oid, path):
            return
        self._write(oid, path, stored)

    def put_hashed(self, oid: str, stored: bytes, durable: bool = False) -> None:
        """Store encoded bytes whose id the caller computed from these very bytes (no second hash).

        For :func:`agentsnap_core.format.content.put_raw`, which encodes and hashes a raw blob itself; bytes from
        anyone else go through :meth:`put_stored` (verified). ``durable``: a loose object's file is fsynced here
        (on the caller's thread, before it is renamed into place); only its directory waits for the next
        :meth:`barrier`, which the caller still runs before anything names the object.
        """
        path = self._path(oid)
        if self._reuse(oid, path):
            return
        if durable and not (self._batches and len(stored) < PACK_MAX_STORED):
            self._write_loose(oid, path, stored, fsync=True)
        else:
            self._write(oid, path, stored)

    def _write(self, oid: str, path: str, stored: bytes) -> None:
        if self._batches and len(stored) < PACK_MAX_STORED:
            with self._lock:
                if oid not in self._buffer:
                    self._buffer[oid] = bytes(stored)
                    self._buffer_bytes += len(stored)
                spill = self._buffer_bytes > BATCH_MAX_BYTES
            if spill:
                with self._barrier_lock:  # a barrier running now waits for this pack, and fsyncs it
                    self._spill(durable=False)
            return
        self._write_loose(oid, path, stored)

    def loose_copy(self, oid: str) -> str:
        """The object's own file, written from its pack when it has none (for tests that damage or age one
        object: reads take the loose copy first)."""
        path = self._path(oid)
        if not os.path.exists(path):
            self._write_loose(oid, path, self.get_stored(oid))
        return path

    def _write_loose(self, oid: str, path: str, stored: bytes, fsync: bool = False) -> None:
        d = f"{self.dir}/{oid[:2]}"
        if d not in self._known_dirs:
            if not os.path.isdir(d):
                os.makedirs(d, exist_ok=True)
                with self._lock:
                    self._pending_dirs.add(str(self.dir))
            self._known_dirs.add(d)
        with self._lock:
            self._tmp_seq += 1
            tmp = f"{d}/.tmp-{os.getpid()}-{threading.get_ident()}-{self._tmp_seq}"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o444)
        except FileNotFoundError:  # gc removed the fan-out directory after packing what was in it
            os.makedirs(d, exist_ok=True)
            with self._lock:
                self._pending_dirs.add(str(self.dir))
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o444)
        try:
            try:
                view = memoryview(stored)
                while view:
                    view = view[os.write(fd, view) :]
                if fsync:
                    os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, path)
        except BaseException:  # (a full disk: the part written would hold space the user is trying to free)
            os.unlink(tmp)
            raise
        with self._lock:
            if not fsync:
                self._pending_files.append(path)
            self._pending_dirs.add(d)

    def iter_loose(self) -> Iterator[str]:
        """Ids of the objects stored one file each (sorted)."""
        if not self.dir.is_dir():
            return
        for sub in sorted(os.listdir(self.dir)):
            if len(sub) != 2:
                continue
            try:
                names = sorted(os.listdir(self.dir / sub))
            except (NotADirectoryError, FileNotFoundError):  # a fan-out directory gc emptied and removed; a file
                continue
            for name in names:
                if objects.is_oid(sub + name):  # (an editor's or a user's file is not an object)
                    yield sub + name

    def foreign_files(self) -> list[str]:
        """Files in the object fan-out directories that are neither objects nor a writer's temp files (a note, a
        swap file, a copy): no verb reads, counts or deletes them; verify and gc name them. Before, verify called
        each "object a0notes.txt ... missing from the store" and gc deleted it as an unreachable object."""
        out: list[str] = []
        if not self.dir.is_dir():
            return out
        for sub in sorted(os.listdir(self.dir)):
            if len(sub) != 2 or not objects.is_oid(sub + "0" * 62):
                continue
            try:
                names = sorted(os.listdir(self.dir / sub))
            except (NotADirectoryError, FileNotFoundError):
                continue
            out += [f"{sub}/{n}" for n in names if not n.startswith(".tmp-") and not objects.is_oid(sub + n)]
        return out

    def iter_oids(self) -> Iterator[str]:
        """Every object id once: the loose ones by id, then the packed ones in the order their packs hold them, so
        that reading every object (verify, du) decompresses each block of a pack once, not once per object."""
        seen: set[str] = set()
        for oid in self.iter_loose():
            seen.add(oid)
            yield oid
        for oid in self.packs.oids_in_order():
            if oid not in seen:
                seen.add(oid)
                yield oid

    def temp_files(self) -> list[str]:
        """Temp files left by an interrupted writer (gc removes old ones)."""
        if not self.dir.is_dir():
            return []
        out = []
        for sub in os.listdir(self.dir):
            p = self.dir / sub
            try:
                out += [str(p / n) for n in os.listdir(p) if n.startswith(".tmp-")]
            except (NotADirectoryError, FileNotFoundError):  # a fan-out directory gc emptied and removed
                pass
        return out

    def pack_live(self, live: set[str], drop_before: float | None,
                  max_stored: int = PACK_MAX_STORED) -> dict[str, int]:
        """gc: pack the live loose objects smaller than ``max_stored`` with the existing packs into one pack.

        Packed objects not in ``live`` are left out only when ``drop_before`` is given (no writer is running) and
        their pack was not re-used after it (the grace period); otherwise they are kept.
        """
        add: dict[str, str] = {}
        for oid in self.iter_loose():
            if oid in live:
                path = self._path(oid)
                try:
                    if os.stat(path).st_size < max_stored:
                        add[oid] = path
                except FileNotFoundError:
                    pass
        drop = None if drop_before is None else (lambda o: o not in live)
        return self.packs.repack(add, drop, drop_before=drop_before)

    def footprint(self) -> dict[str, int]:
        """Files and bytes the objects take on disk (loose files, packs), for gc's report and benchmarks."""
        files = size = 0
        for dirpath, _dirs, names in os.walk(self.dir):
            for n in names:
                try:
                    size += os.lstat(os.path.join(dirpath, n)).st_size
                    files += 1
                except FileNotFoundError:
                    pass
        return {"files": files, "bytes": size}

    def verify_packs(self) -> tuple[int, list[dict[str, Any]]]:
        """``(packed entries, problems)``: every pack's index, and every packed copy no plain read reaches."""
        return self.packs.verify(lambda o: os.path.exists(self._path(o)))

    def _stat(self, oid: str) -> os.stat_result:
        """The loose file's stat, else its pack's (a pack's mtime is the newest re-use of anything in it)."""
        try:
            return os.stat(self._path(oid))
        except FileNotFoundError:
            pass
        hit = self.packs.locate(oid)
        try:
            if hit is not None:
                return os.stat(hit[0].path)
        except FileNotFoundError:
            pass
        raise ObjectMissing(oid)

    def age(self, oid: str) -> float:
        st = self._stat(oid)
        with self._lock:
            self._aged[oid] = st.st_mtime_ns  # delete() spares the object if a writer re-uses it after this
        return time.time() - st.st_mtime

    def delete(self, oid: str) -> None:
        """Remove an object unless a writer re-used it since :meth:`age` looked (gc's race with ``put``).

        The object is first renamed aside, then its mtime is compared with the one ``age`` saw: a
        ``put`` that refreshed it in between wins and the object is put back; a ``put`` that comes
        after the rename finds no file to refresh and writes the object again.
        """
        path = self._path(oid)
        with self._lock:
            seen = self._aged.pop(oid, None)
            self._tmp_seq += 1
            trash = f"{self.dir}/{oid[:2]}/.tmp-gc-{os.getpid()}-{threading.get_ident()}-{self._tmp_seq}"
        if self.packs.locate(oid) is not None:  # a packed copy: rewrite its packs without it (gc drops in bulk)
            self.packs.repack({}, drop=lambda o: o == oid, seen_ns=seen, consolidate=False)
        try:
            os.rename(path, trash)
        except FileNotFoundError:
            return
        if seen is not None and os.stat(trash).st_mtime_ns != seen and not os.path.exists(path):
            os.rename(trash, path)  # re-used after gc looked: keep it
            return
        os.unlink(trash)

    def _spill(self, durable: bool) -> None:
        """Write the buffered objects as one pack; ``durable``: fsync it now (else at the next barrier)."""
        with self._lock:
            items, self._buffer, self._buffer_bytes = self._buffer, {}, 0
            if items:
                self._inflight.append(items)
        if not items:
            return
        try:
            path, made_dir = write_pack_file(self.packs, items.items(), durable=durable)
        except BaseException:
            with self._lock:  # nothing was published: keep them for the next try
                self._inflight.remove(items)
                items.update(self._buffer)
                self._buffer = items
                self._buffer_bytes = sum(len(v) for v in items.values())
            raise
        with self._lock:
            self._inflight.remove(items)
        self.stats["packs"] += 1
        self.stats["packed"] += len(items)
        if not durable:
            with self._lock:
                self._pending_files.append(path)
                self._pending_dirs.add(self.packs.dir)
                if made_dir:
                    self._pending_dirs.add(str(self.dir))

    def barrier(self) -> None:
        with self._barrier_lock:
            self._barrier()

    def _barrier(self) -> None:
        self.stats["barriers"] += 1
        if self._buffer:
            self._spill(durable=True)
            self.packs.maybe_consolidate()
        with self._lock:
            files, dirs = self._pending_files, self._pending_dirs
            self._pending_files, self._pending_dirs = [], set()
        if not files and not dirs:
            return
        if _syncfs is not None and len(files) > 8:
            fd = os.open(self.dir, os.O_RDONLY)
            try:
                if _syncfs(fd) == 0:
                    return
            finally:
                os.close(fd)
        for path in files:
            _fsync_path(path, os.O_RDONLY)
        for d in sorted(dirs, key=len, reverse=True):
            _fsync_path(d, os.O_RDONLY | os.O_DIRECTORY)


def _fsync_path(path: str, flags: int) -> None:
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _freshen(path: str) -> bool:
    """Re-used objects get a new mtime so a concurrent gc's grace period protects them.

    False when the file is gone (a gc took it between the caller's check and now): write it again.
    """
    try:
        os.utime(path)
    except FileNotFoundError:
        return False
    except OSError:
        pass
    return True


_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS refs (name TEXT PRIMARY KEY, oid TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS reflog (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT NOT NULL, old TEXT, new TEXT,
    time REAL NOT NULL, message TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS reflog_name ON reflog(name, seq);
CREATE TABLE IF NOT EXISTS heads (worktree TEXT PRIMARY KEY, symref TEXT, oid TEXT);
CREATE TABLE IF NOT EXISTS snapshots (
    id TEXT PRIMARY KEY, parents TEXT NOT NULL, time REAL NOT NULL, message TEXT NOT NULL,
    agent TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS snapshots_time ON snapshots(time);
CREATE TABLE IF NOT EXISTS config (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""


class SqliteRefs:
    """Refs, reflog, HEADs and the snapshot index in one SQLite file (WAL, synchronous=FULL)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._local = threading.local()
        #: a store this user cannot write is opened read-only, so that log/show/diff/status/verify still work
        self.read_only = sqlite_read_only(self.path)
        db = self._db()
        #: the index was opened read-only because its disk was full (stores/base.py): reads see it as it was then,
        #: writes fail; a process that keeps stores open between calls must open this one again next time
        self.full_disk = str(self.path) in READ_ONLY_ON_A_FULL_DISK
        if not self.read_only:
            db.executescript(_SCHEMA)
        row = db.execute("SELECT value FROM meta WHERE key='schema'").fetchone()
        if row is None and not self.read_only:
            db.execute("INSERT OR IGNORE INTO meta VALUES ('schema', ?)", (str(INDEX_SCHEMA),))
            db.commit()
        elif int(row[0]) > INDEX_SCHEMA:
            raise UnsupportedFormat(f"index {self.path}", int(row[0]), INDEX_SCHEMA)

    def _db(self) -> sqlite3.Connection:
        db = getattr(self._local, "db", None)
        if db is None or getattr(self._local, "pid", None) != os.getpid():
            db = connect_sqlite(self.path, self.read_only)
            self._local.db, self._local.pid = db, os.getpid()
        return db

    def close(self) -> None:
        db = getattr(self._local, "db", None)
        if db is not None:
            if not self.read_only and getattr(self._local, "pid", None) == os.getpid():
                self.checkpoint()
            db.close()
            self._local.db = None

    def checkpoint(self) -> None:
        """Copy the WAL into the database and truncate it (best effort: a reader in another process may hold it)."""
        try:
            self._db().execute("PRAGMA wal_checkpoint(TRUNCATE)")
        except sqlite3.Error:
            pass

    def _after_commit(self) -> None:
        """Checkpoint once the WAL has grown past :data:`WAL_CHECKPOINT_BYTES` (SQLite's own automatic checkpoint
        never shrinks the file, and cannot finish while another connection reads)."""
        self._commits = getattr(self, "_commits", 0) + 1
        if self._commits % 16:
            return
        try:
            big = os.stat(f"{self.path}-wal").st_size > WAL_CHECKPOINT_BYTES
        except OSError:
            return
        if big:
            self.checkpoint()

    class _Tx:
        def __init__(self, db: sqlite3.Connection) -> None:
            self.db = db

        def __enter__(self) -> sqlite3.Connection:
            self.db.execute("BEGIN IMMEDIATE")
            return self.db

        def __exit__(self, et: object, *_: object) -> None:
            self.db.execute("ROLLBACK" if et else "COMMIT")

    def _tx(self) -> SqliteRefs._Tx:
        return SqliteRefs._Tx(self._db())

    def get_ref(self, name: str) -> str | None:
        row = self._db().execute("SELECT oid FROM refs WHERE name=?", (name,)).fetchone()
        return row[0] if row else None

    def list_refs(self, prefix: str = "") -> dict[str, str]:
        rows = self._db().execute(
            "SELECT name, oid FROM refs WHERE substr(name, 1, ?) = ? ORDER BY name", (len(prefix), prefix)
        )
        return dict(rows.fetchall())

    def update_refs(self, updates: list[RefUpdate], message: str) -> None:
        now = time.time()
        with self._tx() as db:
            for u in updates:
                row = db.execute("SELECT oid FROM refs WHERE name=?", (u.name,)).fetchone()
                current = row[0] if row else None
                if u.expected != ANY and u.expected != current:
                    raise RefConflict(u.name, u.expected, current)
                if u.new is None:
                    db.execute("DELETE FROM refs WHERE name=?", (u.name,))
                else:
                    db.execute("INSERT OR REPLACE INTO refs VALUES (?, ?)", (u.name, u.new))
                db.execute(
                    "INSERT INTO reflog (name, old, new, time, message) VALUES (?,?,?,?,?)",
                    (u.name, current, u.new, now, message),
                )
        self._after_commit()

    def reflog(self, name: str | None = None, limit: int | None = None) -> list[ReflogEntry]:
        q = "SELECT seq, name, old, new, time, message FROM reflog"
        args: list[object] = []
        if name is not None:
            q += " WHERE name=?"
            args.append(name)
        q += " ORDER BY seq DESC"
        if limit is not None:
            q += " LIMIT ?"
            args.append(limit)
        return [ReflogEntry(*r) for r in self._db().execute(q, args).fetchall()]

    def edit_reflog(self, drop: Iterable[int], clear_old: Iterable[int] = (), clear_new: Iterable[int] = ()) -> None:
        """``reflog expire``: remove the entries numbered ``drop``, and forget the old (new) id of the entries
        numbered ``clear_old`` (``clear_new``), in one transaction; entries written meanwhile are not touched."""
        with self._tx() as db:
            db.executemany("DELETE FROM reflog WHERE seq=?", [(n,) for n in drop])
            db.executemany("UPDATE reflog SET old=NULL WHERE seq=?", [(n,) for n in clear_old])
            db.executemany("UPDATE reflog SET new=NULL WHERE seq=?", [(n,) for n in clear_new])
        self._after_commit()

    def get_head(self, worktree: str) -> tuple[str | None, str | None]:
        row = self._db().execute("SELECT symref, oid FROM heads WHERE worktree=?", (worktree,)).fetchone()
        return (row[0], row[1]) if row else (None, None)

    def set_head(self, worktree: str, symref: str | None, oid: str | None) -> None:
        with self._tx() as db:
            self._put_head(db, worktree, symref, oid)

    def _put_head(self, db: sqlite3.Connection, worktree: str, symref: str | None, oid: str | None) -> None:
        """A HEAD row; the mirror is written again when the branch the checkout is on changed (not when a detached
        HEAD only moved: that is every snapshot of a detached checkout)."""
        row = db.execute("SELECT symref FROM heads WHERE worktree=?", (worktree,)).fetchone()
        db.execute("INSERT OR REPLACE INTO heads VALUES (?, ?, ?)", (worktree, symref, oid))
        if (row[0] if row else None) != symref:
            self._mirror(db)

    def list_heads(self) -> dict[str, tuple[str | None, str | None]]:
        return {w: (s, o) for w, s, o in self._db().execute("SELECT worktree, symref, oid FROM heads")}

    def delete_head(self, worktree: str) -> None:
        with self._tx() as db:
            if db.execute("DELETE FROM heads WHERE worktree=? AND symref IS NOT NULL", (worktree,)).rowcount:
                self._mirror(db)
            db.execute("DELETE FROM heads WHERE worktree=?", (worktree,))

    def commit_snapshots(
        self, rows: list[SnapshotRow], updates: list[tuple[RefUpdate, str]],
        heads: list[tuple[str, str | None, str | None]],
    ) -> None:
        """A batch's index rows, ref updates and HEAD moves in ONE transaction (one WAL fsync).

        The ref updates apply in order, each checked against the value the previous ones left (a chain of
        snapshots on one branch); if any check fails none of them and no HEAD move is applied, the index rows are
        still committed (the snapshots exist, as after a single snapshot's conflict), and :class:`RefConflict`
        is raised.
        """
        now = time.time()
        conflict: RefConflict | None = None
        with self._tx() as db:
            if rows:
                db.executemany(
                    "INSERT OR IGNORE INTO snapshots VALUES (?,?,?,?,?)",
                    [(r.id, json.dumps(list(r.parents)), r.time, r.message, r.agent) for r in rows],
                )
            state: dict[str, str | None] = {}
            for u, _msg in updates:
                if u.name not in state:
                    row = db.execute("SELECT oid FROM refs WHERE name=?", (u.name,)).fetchone()
                    state[u.name] = row[0] if row else None
                if u.expected != ANY and u.expected != state[u.name]:
                    conflict = RefConflict(u.name, u.expected, state[u.name])
                    break
                state[u.name] = u.new
            if conflict is None:
                state.clear()
                for u, msg in updates:
                    if u.name not in state:
                        row = db.execute("SELECT oid FROM refs WHERE name=?", (u.name,)).fetchone()
                        state[u.name] = row[0] if row else None
                    if u.new is None:
                        db.execute("DELETE FROM refs WHERE name=?", (u.name,))
                    else:
                        db.execute("INSERT OR REPLACE INTO refs VALUES (?, ?)", (u.name, u.new))
                    db.execute(
                        "INSERT INTO reflog (name, old, new, time, message) VALUES (?,?,?,?,?)",
                        (u.name, state[u.name], u.new, now, msg),
                    )
                    state[u.name] = u.new
                for wt, symref, oid in heads:
                    self._put_head(db, wt, symref, oid)
        self._after_commit()
        if conflict is not None:
            raise conflict

    def index_snapshot(self, row: SnapshotRow) -> None:
        with self._tx() as db:
            db.execute(
                "INSERT OR IGNORE INTO snapshots VALUES (?,?,?,?,?)",
                (row.id, json.dumps(list(row.parents)), row.time, row.message, row.agent),
            )
        self._after_commit()

    def index_snapshots(self, rows: Iterable[SnapshotRow]) -> None:
        """Record many snapshots in one transaction (adapters that write snapshots in batches)."""
        with self._tx() as db:
            db.executemany(
                "INSERT OR IGNORE INTO snapshots VALUES (?,?,?,?,?)",
                [(r.id, json.dumps(list(r.parents)), r.time, r.message, r.agent) for r in rows],
            )
        self._after_commit()

    def snapshots_with_prefix(self, prefix: str, limit: int = 2) -> list[str]:
        hi = prefix + "g"
        rows = self._db().execute(
            "SELECT id FROM snapshots WHERE id >= ? AND id < ? ORDER BY id LIMIT ?", (prefix, hi, limit)
        )
        return [r[0] for r in rows.fetchall()]

    def list_snapshots(self, limit: int | None = None, offset: int = 0) -> list[SnapshotRow]:
        rows = self._db().execute(
            "SELECT id, parents, time, message, agent FROM snapshots ORDER BY time DESC, id LIMIT ? OFFSET ?",
            (-1 if limit is None else limit, offset),
        )
        return [SnapshotRow(i, tuple(json.loads(p)), t, m, a) for i, p, t, m, a in rows.fetchall()]

    def get_config(self, key: str) -> str | None:
        row = self._db().execute("SELECT value FROM config WHERE key=?", (key,)).fetchone()
        return row[0] if row else None

    def set_config(self, key: str, value: str) -> None:
        with self._tx() as db:
            db.execute("INSERT OR REPLACE INTO config VALUES (?, ?)", (key, value))
            self._mirror(db, durable=True)

    def _mirror(self, db: sqlite3.Connection, durable: bool = False) -> None:
        """Write :data:`MIRROR` from the rows ``db``'s transaction sees (inside it: its write lock orders the
        writers, and a mirror that cannot be written rolls the change back)."""
        write_mirror(self.path.parent, dict(db.execute("SELECT key, value FROM config").fetchall()),
                     {w: s for w, s in db.execute("SELECT worktree, symref FROM heads WHERE symref IS NOT NULL")},
                     durable)

    def keep_mirror(self) -> None:
        """Write :data:`MIRROR` if this index holds config or HEADs and the file is missing (a store made before
        it existed, or the file deleted); best effort."""
        try:
            if self._db().execute("SELECT 1 FROM config UNION ALL SELECT 1 FROM heads WHERE symref IS NOT NULL "
                                  "LIMIT 1").fetchone():
                with self._tx() as db:
                    self._mirror(db)
        except (OSError, sqlite3.Error):
            pass

    def take_mirror(self, mirror: dict[str, dict[str, str]]) -> None:
        """Into a new index: the config and HEADs :func:`read_mirror` read (never over rows already here)."""
        with self._tx() as db:
            db.executemany("INSERT OR IGNORE INTO config VALUES (?, ?)", mirror["config"].items())
            db.executemany("INSERT OR IGNORE INTO heads VALUES (?, ?, NULL)", mirror["heads"].items())


class LocalStore:
    """Objects in a directory and refs in SQLite, behind one object."""

    def __init__(self, root: str | os.PathLike[str], create: bool = False) -> None:
        self.root = Path(root)
        fmt = self.root / "format.json"
        if create:
            self.root.mkdir(parents=True, exist_ok=True)
            (self.root / "objects").mkdir(exist_ok=True)
            if not fmt.exists():
                write_format(self.root, STORE_FORMAT, durable=False)
        try:
            info = json.loads(fmt.read_text())
        except FileNotFoundError:
            from agentsnap_core.errors import StoreNotFound

            raise StoreNotFound(str(self.root)) from None
        except ValueError:
            raise AgentSnapError(f"{fmt} is not valid JSON; the store is damaged") from None
        if info.get("format") != "agentsnap-store":
            raise AgentSnapError(f"{self.root} is not an agentsnap store")
        if info.get("version") not in STORE_FORMATS:
            raise UnsupportedFormat(f"store {self.root}", info.get("version"), STORE_FORMAT)
        self.format = int(info["version"])
        self.objects = LocalObjects(self.root, None if self.format >= STORE_FORMAT else self._mark_packed)
        index = self.root / "index.sqlite"
        new_index = _empty_index(index)
        lost = new_index and self._holds_objects()
        self.refs = SqliteRefs(index)
        #: the settings (config keys) a new index took back from :data:`MIRROR` (the old one was lost)
        self.restored: list[str] = []
        if not self.refs.read_only:
            mirror = read_mirror(self.root) if new_index else None
            if mirror is not None:
                self.refs.take_mirror(mirror)
                self.restored = sorted(mirror["config"])
            elif not os.path.exists(self.root / MIRROR):
                self.refs.keep_mirror()
        #: the store directory and its index as opened: a write refuses to go on into deleted files (check_present)
        self.held = HeldPaths(*(p for p in (self.root, index) if p.exists()))
        #: branches this open gave the snapshots of a store whose index was missing (:meth:`_recover_index`)
        self.recovered: list[str] = []
        #: whether those objects were encrypted (the store's encryption setting, lost with the index, was restored)
        self.recovered_encrypted = False
        if lost and not self.refs.read_only:
            self.recovered = self._recover_index()

    def _holds_objects(self) -> bool:
        if next(self.objects.iter_loose(), None) is not None:
            return True
        try:
            return any(is_pack_name(n) for n in os.listdir(self.objects.packs.dir))
        except (FileNotFoundError, NotADirectoryError):
            return False

    def _recover_index(self) -> list[str]:
        """``index.sqlite`` was missing while objects remain (deleted as if it were a cache, left out of a copy): a
        new, empty index had been made in silence, ``verify`` said "ok" and ``gc`` deleted every snapshot as
        unreachable. Now every snapshot found among the objects is indexed again and each one no other has as a
        parent is named by a branch ``lost-found/<id>`` (its reflog entry says why); the names the index held are
        gone with it. Returns the new branches."""
        rows: list[SnapshotRow] = []
        unread: list[str] = []  # manifests that cannot be read here (encrypted, damaged): named each, never lost
        for oid in self.objects.iter_oids():
            try:
                stored = self.objects.get_stored(oid)
            except AgentSnapError:
                continue
            if not self.recovered_encrypted and objects.is_sealed(stored):  # it was, and stays so
                self.recovered_encrypted = True
                self._open_sealed_manifests()
            if len(stored) < objects.HEADER.size or stored[4] != objects.Kind.MANIFEST:  # (the kind: in the clear)
                continue
            try:
                doc = unpack(objects.decode(oid, stored)[1], f"manifest {oid[:12]}")
            except AgentSnapError:
                unread.append(oid)
                continue
            if not isinstance(doc, dict) or doc.get("format") != "agentsnap-manifest" \
                    or not isinstance(doc.get("parents"), list):
                unread.append(oid)
                continue
            t = doc.get("time")
            rows.append(SnapshotRow(oid, tuple(p for p in doc["parents"] if isinstance(p, str)),
                                    float(t) if isinstance(t, (int, float)) else 0.0,
                                    str(doc.get("message", "")), str(doc.get("agent", ""))))
        if self.recovered_encrypted:  # (before anything is written: never a plain object into an encrypted store;
            from agentsnap_core.format import crypto  # the key's fingerprint is learnt by the first open with the key)

            self.refs.set_config(crypto.CONFIG_ENCRYPT, "aes-gcm")
        if rows:
            self.refs.index_snapshots(rows)
        parents = {p for r in rows for p in r.parents}
        branches = {f"refs/heads/lost-found/{oid[:12]}": oid
                    for oid in [r.id for r in rows if r.id not in parents] + [o for o in unread if o not in parents]}
        if branches:
            self.refs.update_refs([RefUpdate(name, oid, ANY) for name, oid in sorted(branches.items())],
                                  "recovered: index.sqlite was missing; every snapshot no other has as a parent "
                                  "got a lost-found/ branch")
        return sorted(branches)

    @staticmethod
    def _open_sealed_manifests() -> None:
        """With the key in this process's environment, the recovery reads sealed manifests (their parents link the
        snapshots, so only each line's tip gets a ``lost-found/`` branch, not every snapshot); a wrong key or none
        leaves them unread, each named by its own branch."""
        from agentsnap_core.format import crypto

        key = crypto.load_key() if objects.encrypted_opener is None else None
        if key is not None:
            crypto.install_key(key)

    def _mark_packed(self) -> None:
        """Before the first pack: mark the store format 2, so an agentsnap that reads only loose objects
        refuses the store instead of reporting its packed objects missing."""
        write_format(self.root, STORE_FORMAT)
        self.format = STORE_FORMAT

    @property
    def url(self) -> str:
        return self.root.resolve().as_uri()

    def check_present(self) -> None:
        """Raise :class:`StoreGone` when the store directory or its index was deleted or replaced since this open
        (``rm -rf .agentsnap`` under a running agent): a write now would go into deleted files and be lost in
        silence, or write objects into a new store and refs into the deleted index."""
        if self.held.gone():
            raise StoreGone(str(self.root))

    def close(self) -> None:
        try:
            # objects written in a batch no barrier ended: keep them readable (not into a store deleted since:
            # that would make its directories again, a store with objects and no index)
            if self.objects._buffer and not self.held.gone():
                self.objects.barrier()
        finally:
            self.held.close()
            self.refs.close()


def _empty_index(index: Path) -> bool:
    """No index, or an empty file with no WAL beside it (truncated, or copied as nothing): SQLite would take either
    for a new database, with no refs."""
    try:
        if os.stat(index).st_size:
            return False
    except FileNotFoundError:
        return True
    try:
        return os.stat(f"{index}-wal").st_size == 0
    except FileNotFoundError:
        return True


#: beside the index: its config and the branch each checkout is on, as JSON, so that an index lost (deleted as if
#: it were a cache, left out of a copy) takes them back - the settings a user chose (which files a snapshot holds),
#: remotes, signing and encryption, and for a checkout bound to a shared store (``store.url``) where its snapshots are
MIRROR = "config.json"


def write_mirror(root: Path, config: dict[str, str], heads: dict[str, str], durable: bool = False) -> None:
    """Write :data:`MIRROR` atomically (mode 0600: a remote's URL may hold a password); ``durable``: fsynced."""
    tmp = root / f"{MIRROR}.{os.getpid()}.{threading.get_ident()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        try:
            os.write(fd, json.dumps({"format": "agentsnap-config", "config": config, "heads": heads},
                                    sort_keys=True, indent=1).encode() + b"\n")
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, root / MIRROR)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if durable:
        _fsync_path(str(root), os.O_RDONLY | os.O_DIRECTORY)


def read_mirror(root: Path) -> dict[str, dict[str, str]] | None:
    """What :data:`MIRROR` holds (``config``, ``heads``), or None: no such file, or not one this code wrote."""
    try:
        doc = json.loads((root / MIRROR).read_bytes())
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict) or doc.get("format") != "agentsnap-config":
        return None
    parts: dict[str, dict[str, str]] = {}
    for part in ("config", "heads"):
        value = doc.get(part)
        if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
            return None
        parts[part] = value
    return parts


def write_format(root: Path, version: int, durable: bool = True) -> None:
    """Write ``format.json`` (atomically; ``durable``: fsynced with its directory entry)."""
    tmp = root / "format.json.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, (json.dumps({"format": "agentsnap-store", "version": version}) + "\n").encode())
        if durable:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, root / "format.json")
    if durable:
        _fsync_path(str(root), os.O_RDONLY | os.O_DIRECTORY)
