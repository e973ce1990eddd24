"""The embedded default store: a directory of objects plus a SQLite index.

Layout (format version in ``format.json``)::

    .agentsnap/
      format.json            {"format": "agentsnap-store", "version": 1}
      index.sqlite           refs, reflog, HEADs, snapshot index, config (WAL)
      objects/ab/cdef...     one file per object (see agentsnap_core.format.objects)
      objects/pack/pack-*.pack  small objects packed by gc, index inside (see agentsnap_core.stores.pack)
      wt/<worktree>/         per-worktree stat cache and pending trace

Write order (see docs/FORMAT.md): objects are written to a temp file and renamed into
place without fsync; before any ref moves, :meth:`LocalObjects.barrier` makes them durable
in one step (``syncfs`` where the OS has it, else fsync of each new file then each
directory); the ref update is a SQLite transaction with ``synchronous=FULL``.
"""

from __future__ import annotations

import ctypes
import json
import os
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from agentsnap_core.errors import AgentSnapError, ObjectMissing, RefConflict, UnsupportedFormat
from agentsnap_core.format import objects
from agentsnap_core.stores.base import ANY, ReflogEntry, RefUpdate, SnapshotRow, connect_sqlite, sqlite_read_only
from agentsnap_core.stores.pack import PACK_MAX_STORED, PackSet

__all__ = ["PACK_MAX_STORED", "LocalObjects", "LocalStore", "SqliteRefs"]

STORE_FORMAT = 1
INDEX_SCHEMA = 1

_syncfs: Any
try:
    _libc = ctypes.CDLL(None, use_errno=True)
    _syncfs = _libc.syncfs
except (OSError, AttributeError):  # pragma: no cover - non-Linux
    _syncfs = None


class LocalObjects:
    """Objects as files under ``root/objects/ab/cdef...``."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.dir = self.root / "objects"
        self._lock = threading.Lock()
        self._pending_files: list[str] = []
        self._pending_dirs: set[str] = set()
        self._known_dirs: set[str] = set()
        self._tmp_seq = 0
        self._aged: dict[str, int] = {}
        self.packs = PackSet(str(self.dir / "pack"))

    def _path(self, oid: str) -> str:
        return f"{self.dir}/{oid[:2]}/{oid[2:]}"

    def has(self, oid: str) -> bool:
        return os.path.exists(self._path(oid)) or self.packs.locate(oid) is not None

    def missing(self, oids: Iterable[str]) -> set[str]:
        out = {o for o in set(oids) if not os.path.exists(self._path(o))}
        return {o for o in out if self.packs.locate(o) is None} if out else out

    def get_stored(self, oid: str) -> bytes:
        if not objects.is_oid(oid):
            raise ObjectMissing(str(oid))
        try:
            with open(self._path(oid), "rb") as f:
                return f.read(objects.MAX_OBJECT_BYTES + objects.HEADER.size + 1024)
        except FileNotFoundError:
            pass
        hit = self.packs.locate(oid)  # loose first, then packs (re-scanned on a miss: another gc may have packed it)
        if hit is None:
            raise ObjectMissing(oid)
        pk, off, length = hit
        return pk.read(off, length)

    def get(self, oid: str) -> tuple[int, bytes]:
        return objects.decode(oid, self.get_stored(oid))

    def _reuse(self, oid: str, path: str) -> bool:
        """True when the object is already stored (loose or packed) and was marked re-used for gc's grace."""
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
        _, stored = objects.encode(kind, raw)
        self._write(oid, path, stored)
        return oid

    def put_stored(self, oid: str, stored: bytes) -> None:
        objects.verify_stored(oid, stored)  # verify before accepting (encrypted objects: what can be checked)
        path = self._path(oid)
        if self._reuse(oid, path):
            return
        self._write(oid, path, stored)

    def _write(self, oid: str, path: str, stored: bytes) -> None:
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
            view = memoryview(stored)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)
        os.replace(tmp, path)
        with self._lock:
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
            except FileNotFoundError:  # a fan-out directory gc emptied and removed
                continue
            for name in names:
                if not name.startswith(".tmp-"):
                    yield sub + name

    def iter_oids(self) -> Iterator[str]:
        packed = self.packs.all_oids()
        if not packed:
            yield from self.iter_loose()
            return
        yield from sorted(packed.union(self.iter_loose()))

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

    def barrier(self) -> None:
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
            db.close()
            self._local.db = None

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

    def get_head(self, worktree: str) -> tuple[str | None, str | None]:
        row = self._db().execute("SELECT symref, oid FROM heads WHERE worktree=?", (worktree,)).fetchone()
        return (row[0], row[1]) if row else (None, None)

    def set_head(self, worktree: str, symref: str | None, oid: str | None) -> None:
        with self._tx() as db:
            db.execute("INSERT OR REPLACE INTO heads VALUES (?, ?, ?)", (worktree, symref, oid))

    def list_heads(self) -> dict[str, tuple[str | None, str | None]]:
        return {w: (s, o) for w, s, o in self._db().execute("SELECT worktree, symref, oid FROM heads")}

    def delete_head(self, worktree: str) -> None:
        with self._tx() as db:
            db.execute("DELETE FROM heads WHERE worktree=?", (worktree,))

    def index_snapshot(self, row: SnapshotRow) -> None:
        with self._tx() as db:
            db.execute(
                "INSERT OR IGNORE INTO snapshots VALUES (?,?,?,?,?)",
                (row.id, json.dumps(list(row.parents)), row.time, row.message, row.agent),
            )

    def index_snapshots(self, rows: Iterable[SnapshotRow]) -> None:
        """Record many snapshots in one transaction (adapters that write snapshots in batches)."""
        with self._tx() as db:
            db.executemany(
                "INSERT OR IGNORE INTO snapshots VALUES (?,?,?,?,?)",
                [(r.id, json.dumps(list(r.parents)), r.time, r.message, r.agent) for r in rows],
            )

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


class LocalStore:
    """Objects in a directory and refs in SQLite, behind one object."""

    def __init__(self, root: str | os.PathLike[str], create: bool = False) -> None:
        self.root = Path(root)
        fmt = self.root / "format.json"
        if create:
            self.root.mkdir(parents=True, exist_ok=True)
            (self.root / "objects").mkdir(exist_ok=True)
            if not fmt.exists():
                tmp = self.root / "format.json.tmp"
                tmp.write_text(json.dumps({"format": "agentsnap-store", "version": STORE_FORMAT}) + "\n")
                os.replace(tmp, fmt)
        try:
            info = json.loads(fmt.read_text())
        except FileNotFoundError:
            from agentsnap_core.errors import StoreNotFound

            raise StoreNotFound(str(self.root)) from None
        except ValueError:
            raise AgentSnapError(f"{fmt} is not valid JSON; the store is damaged") from None
        if info.get("format") != "agentsnap-store":
            raise AgentSnapError(f"{self.root} is not an agentsnap store")
        if info.get("version") != STORE_FORMAT:
            raise UnsupportedFormat(f"store {self.root}", info.get("version"), STORE_FORMAT)
        self.objects = LocalObjects(self.root)
        self.refs = SqliteRefs(self.root / "index.sqlite")

    @property
    def url(self) -> str:
        return self.root.resolve().as_uri()

    def close(self) -> None:
        self.refs.close()
