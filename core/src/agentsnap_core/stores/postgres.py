"""PostgreSQL store: refs, reflog, HEADs, snapshot index and config (and optionally objects) in tables.

psycopg 3 with a connection pool (one per process; re-made after ``fork``). A ref update is one
transaction that takes a transaction-scoped advisory lock per ref name (in sorted order, so two
writers never deadlock), compares every expected value and writes the refs plus their reflog rows:
compare-and-swap, all-or-nothing. The schema is versioned (``<schema>.meta``, key ``schema``) and
migrated forward under an advisory lock, so many workers may open a fresh database at once.
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
import time
from collections.abc import Iterable, Iterator
from typing import Any

from agentsnap_core.errors import ObjectMissing, RefConflict, UnsupportedFormat
from agentsnap_core.stores import EncodedObjects, InvalidStoreURL, StoreUnavailable, mask_url, parse_query
from agentsnap_core.stores.base import ANY, ReflogEntry, RefUpdate, SnapshotRow

#: the pool logs every failed reconnect; with no logging configured Python prints each one to stderr, which
#: buries the one line the CLI gives (the error that reaches the caller says it once). Configured logging still sees them.
logging.getLogger("psycopg.pool").addHandler(logging.NullHandler())

#: schema migrations, applied in order; the schema's version is the number applied
MIGRATIONS: list[str] = [
    """
    CREATE TABLE IF NOT EXISTS {s}.refs (name TEXT PRIMARY KEY, oid TEXT NOT NULL);
    CREATE TABLE IF NOT EXISTS {s}.reflog (
        seq BIGSERIAL PRIMARY KEY, name TEXT NOT NULL, old TEXT, new TEXT,
        time DOUBLE PRECISION NOT NULL, message TEXT NOT NULL);
    CREATE INDEX IF NOT EXISTS reflog_name ON {s}.reflog (name, seq);
    CREATE TABLE IF NOT EXISTS {s}.heads (worktree TEXT PRIMARY KEY, symref TEXT, oid TEXT);
    CREATE TABLE IF NOT EXISTS {s}.snapshots (
        id TEXT PRIMARY KEY, parents TEXT NOT NULL, time DOUBLE PRECISION NOT NULL,
        message TEXT NOT NULL, agent TEXT NOT NULL);
    CREATE INDEX IF NOT EXISTS snapshots_time ON {s}.snapshots (time);
    CREATE TABLE IF NOT EXISTS {s}.config (key TEXT PRIMARY KEY, value TEXT NOT NULL);
    CREATE TABLE IF NOT EXISTS {s}.objects (
        oid TEXT PRIMARY KEY, data BYTEA NOT NULL, mtime DOUBLE PRECISION NOT NULL);
    """,
    """
    CREATE TABLE IF NOT EXISTS {s}.ledger (idx BIGINT PRIMARY KEY, body BYTEA NOT NULL, mac BYTEA NOT NULL);
    CREATE TABLE IF NOT EXISTS {s}.ledger_seal (id INT PRIMARY KEY CHECK (id = 1), value BYTEA NOT NULL);
    """,
]
SCHEMA_VERSION = len(MIGRATIONS)
_IDENT = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
_LOCK_MIGRATE = 0x61676E73  # "agns"


class PostgresDB:
    """A per-process connection pool on one database and schema."""

    def __init__(self, url: str) -> None:
        base, params = parse_query(url)
        self.url = url
        self.schema = params.pop("schema", "agentsnap")
        params.pop("objects", None)
        if not _IDENT.match(self.schema):
            raise InvalidStoreURL(url, f"schema {self.schema!r} must be a lower-case SQL identifier")
        self.max_size = int(params.pop("pool", "4"))
        self.conninfo = base + ("?" + "&".join(f"{k}={v}" for k, v in params.items()) if params else "")
        self._pool: Any = None
        self._pid = -1
        self._lock = threading.Lock()
        try:
            import psycopg
            import psycopg_pool  # noqa: F401
        except ImportError:
            raise StoreUnavailable(url, "PostgreSQL support is not installed (pip install 'agentsnap-core[postgres]')") from None
        try:  # one direct connection first: a clear error for a bad host, password or database
            with psycopg.connect(self.conninfo, connect_timeout=10, autocommit=True) as conn:
                conn.execute("SELECT 1")
        except psycopg.Error as exc:
            raise StoreUnavailable(url, _first_line(exc)) from None
        except (ValueError, TypeError) as exc:
            raise InvalidStoreURL(url, _first_line(exc)) from None

    def pool(self) -> Any:
        if self._pool is None or self._pid != os.getpid():
            with self._lock:
                if self._pool is None or self._pid != os.getpid():
                    from psycopg_pool import ConnectionPool

                    self._pool = ConnectionPool(
                        self.conninfo, min_size=1, max_size=self.max_size, open=True, timeout=60,
                        kwargs={"autocommit": True, "connect_timeout": 10}, name="agentsnap",
                    )  # fmt: skip
                    self._pid = os.getpid()
        return self._pool

    def connection(self) -> Any:
        return self.pool().connection()

    def migrate(self) -> None:
        s = self.schema
        with self.connection() as conn, conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK_MIGRATE,))
            conn.execute(f"CREATE SCHEMA IF NOT EXISTS {s}")
            conn.execute(f"CREATE TABLE IF NOT EXISTS {s}.meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
            row = conn.execute(f"SELECT value FROM {s}.meta WHERE key='schema'").fetchone()
            version = int(row[0]) if row else 0
            if version > SCHEMA_VERSION:
                raise UnsupportedFormat(f"PostgreSQL store {mask_url(self.url)}", version, SCHEMA_VERSION)
            for sql in MIGRATIONS[version:]:
                conn.execute(sql.format(s=s))
            if version != SCHEMA_VERSION:
                conn.execute(
                    f"INSERT INTO {s}.meta VALUES ('schema', %s) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                    (str(SCHEMA_VERSION),),
                )

    def version(self) -> int:
        with self.connection() as conn:
            exists = conn.execute("SELECT to_regclass(%s)", (f"{self.schema}.meta",)).fetchone()[0]
            if exists is None:
                return 0
            row = conn.execute(f"SELECT value FROM {self.schema}.meta WHERE key='schema'").fetchone()
            return int(row[0]) if row else 0

    def close(self) -> None:
        if self._pool is not None and self._pid == os.getpid():
            self._pool.close()
        self._pool = None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]


class PostgresRefs:
    """:class:`~agentsnap_core.stores.base.RefStore` on PostgreSQL."""

    def __init__(self, db: PostgresDB) -> None:
        self.db = db
        self.s = db.schema

    def get_ref(self, name: str) -> str | None:
        with self.db.connection() as conn:
            row = conn.execute(f"SELECT oid FROM {self.s}.refs WHERE name = %s", (name,)).fetchone()
        return row[0] if row else None

    def list_refs(self, prefix: str = "") -> dict[str, str]:
        with self.db.connection() as conn:
            rows = conn.execute(
                f"SELECT name, oid FROM {self.s}.refs WHERE left(name, %s) = %s ORDER BY name", (len(prefix), prefix)
            ).fetchall()
        return dict(rows)

    def update_refs(self, updates: list[RefUpdate], message: str) -> None:
        now = time.time()
        s = self.s
        with self.db.connection() as conn, conn.transaction():
            for name in sorted({u.name for u in updates}):
                conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (f"{s}:{name}",))
            for u in updates:
                row = conn.execute(f"SELECT oid FROM {s}.refs WHERE name = %s", (u.name,)).fetchone()
                current = row[0] if row else None
                if u.expected != ANY and u.expected != current:
                    raise RefConflict(u.name, u.expected, current)
                if u.new is None:
                    conn.execute(f"DELETE FROM {s}.refs WHERE name = %s", (u.name,))
                else:
                    conn.execute(
                        f"INSERT INTO {s}.refs VALUES (%s, %s) ON CONFLICT (name) DO UPDATE SET oid = excluded.oid",
                        (u.name, u.new),
                    )
                conn.execute(
                    f"INSERT INTO {s}.reflog (name, old, new, time, message) VALUES (%s, %s, %s, %s, %s)",
                    (u.name, current, u.new, now, message),
                )

    def reflog(self, name: str | None = None, limit: int | None = None) -> list[ReflogEntry]:
        q = f"SELECT seq, name, old, new, time, message FROM {self.s}.reflog"
        args: list[Any] = []
        if name is not None:
            q += " WHERE name = %s"
            args.append(name)
        q += " ORDER BY seq DESC"
        if limit is not None:
            q += " LIMIT %s"
            args.append(limit)
        with self.db.connection() as conn:
            return [ReflogEntry(*r) for r in conn.execute(q, args).fetchall()]

    def get_head(self, worktree: str) -> tuple[str | None, str | None]:
        with self.db.connection() as conn:
            row = conn.execute(f"SELECT symref, oid FROM {self.s}.heads WHERE worktree = %s", (worktree,)).fetchone()
        return (row[0], row[1]) if row else (None, None)

    def set_head(self, worktree: str, symref: str | None, oid: str | None) -> None:
        with self.db.connection() as conn:
            conn.execute(
                f"INSERT INTO {self.s}.heads VALUES (%s, %s, %s) "
                "ON CONFLICT (worktree) DO UPDATE SET symref = excluded.symref, oid = excluded.oid",
                (worktree, symref, oid),
            )

    def list_heads(self) -> dict[str, tuple[str | None, str | None]]:
        with self.db.connection() as conn:
            rows = conn.execute(f"SELECT worktree, symref, oid FROM {self.s}.heads").fetchall()
        return {w: (sr, o) for w, sr, o in rows}

    def delete_head(self, worktree: str) -> None:
        with self.db.connection() as conn:
            conn.execute(f"DELETE FROM {self.s}.heads WHERE worktree = %s", (worktree,))

    def index_snapshot(self, row: SnapshotRow) -> None:
        with self.db.connection() as conn:
            conn.execute(
                f"INSERT INTO {self.s}.snapshots VALUES (%s, %s, %s, %s, %s) ON CONFLICT (id) DO NOTHING",
                (row.id, json.dumps(list(row.parents)), row.time, row.message, row.agent),
            )

    def index_snapshots(self, rows: Iterable[SnapshotRow]) -> None:
        """Index many snapshots in one transaction."""
        args = [(r.id, json.dumps(list(r.parents)), r.time, r.message, r.agent) for r in rows]
        if not args:
            return
        with self.db.connection() as conn, conn.transaction(), conn.cursor() as cur:
            cur.executemany(
                f"INSERT INTO {self.s}.snapshots VALUES (%s, %s, %s, %s, %s) ON CONFLICT (id) DO NOTHING", args
            )

    def snapshots_with_prefix(self, prefix: str, limit: int = 2) -> list[str]:
        with self.db.connection() as conn:
            rows = conn.execute(
                f"SELECT id FROM {self.s}.snapshots WHERE id >= %s AND id < %s ORDER BY id LIMIT %s",
                (prefix, prefix + "g", limit),
            ).fetchall()
        return [r[0] for r in rows]

    def list_snapshots(self, limit: int | None = None, offset: int = 0) -> list[SnapshotRow]:
        with self.db.connection() as conn:
            rows = conn.execute(
                f"SELECT id, parents, time, message, agent FROM {self.s}.snapshots "
                "ORDER BY time DESC, id LIMIT %s OFFSET %s",
                (limit, offset),
            ).fetchall()
        return [SnapshotRow(i, tuple(json.loads(p)), t, m, a) for i, p, t, m, a in rows]

    def get_config(self, key: str) -> str | None:
        with self.db.connection() as conn:
            row = conn.execute(f"SELECT value FROM {self.s}.config WHERE key = %s", (key,)).fetchone()
        return row[0] if row else None

    def set_config(self, key: str, value: str) -> None:
        with self.db.connection() as conn:
            conn.execute(
                f"INSERT INTO {self.s}.config VALUES (%s, %s) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                (key, value),
            )

    def close(self) -> None:
        self.db.close()


class PostgresObjects(EncodedObjects):
    """:class:`~agentsnap_core.stores.base.ObjectStore` in a ``bytea`` table (stored bytes, as on disk).

    Every put commits on its own, so :meth:`barrier` has nothing to do.
    """

    def __init__(self, db: PostgresDB) -> None:
        self.db = db
        self.s = db.schema

    def has(self, oid: str) -> bool:
        with self.db.connection() as conn:
            return conn.execute(f"SELECT 1 FROM {self.s}.objects WHERE oid = %s", (oid,)).fetchone() is not None

    def missing(self, oids: Iterable[str]) -> set[str]:
        wanted = sorted(set(oids))
        present: set[str] = set()
        with self.db.connection() as conn:
            for i in range(0, len(wanted), 5000):
                rows = conn.execute(
                    f"SELECT oid FROM {self.s}.objects WHERE oid = ANY(%s)", (wanted[i : i + 5000],)
                ).fetchall()
                present.update(r[0] for r in rows)
        return set(wanted) - present

    def get_stored(self, oid: str) -> bytes:
        with self.db.connection() as conn:
            row = conn.execute(f"SELECT data FROM {self.s}.objects WHERE oid = %s", (oid,)).fetchone()
        if row is None:
            raise ObjectMissing(oid)
        return bytes(row[0])

    def _write(self, oid: str, stored: bytes) -> None:
        with self.db.connection() as conn:
            conn.execute(
                f"INSERT INTO {self.s}.objects VALUES (%s, %s, %s) ON CONFLICT (oid) DO UPDATE SET mtime = excluded.mtime",
                (oid, stored, time.time()),
            )

    def iter_oids(self) -> Iterator[str]:
        with self.db.connection() as conn:
            cur = conn.execute(f"SELECT oid FROM {self.s}.objects ORDER BY oid")
            rows = cur.fetchall()
        for (oid,) in rows:
            yield oid

    def age(self, oid: str) -> float:
        with self.db.connection() as conn:
            row = conn.execute(f"SELECT mtime FROM {self.s}.objects WHERE oid = %s", (oid,)).fetchone()
        if row is None:
            raise ObjectMissing(oid)
        return time.time() - float(row[0])

    def delete(self, oid: str) -> None:
        with self.db.connection() as conn:
            conn.execute(f"DELETE FROM {self.s}.objects WHERE oid = %s", (oid,))

    def barrier(self) -> None:
        return None

    def temp_files(self) -> list[str]:
        return []


class PostgresLedgerStore:
    """The effects ledger (:class:`agentsnap_core.stores.ledger.LedgerStore`) in two tables."""

    def __init__(self, db: PostgresDB) -> None:
        self.db = db
        self.s = db.schema

    def count(self) -> int:
        with self.db.connection() as conn:
            return int(conn.execute(f"SELECT count(*) FROM {self.s}.ledger").fetchone()[0])

    def read(self, start: int = 0) -> list[tuple[bytes, bytes]]:
        with self.db.connection() as conn:
            rows = conn.execute(f"SELECT body, mac FROM {self.s}.ledger WHERE idx >= %s ORDER BY idx", (start,)).fetchall()
        return [(bytes(b), bytes(m)) for b, m in rows]

    def append(self, index: int, body: bytes, mac: bytes, seal: bytes) -> bool:
        return self.append_many(index, [(body, mac)], seal)

    def append_many(self, index: int, rows: list[tuple[bytes, bytes]], seal: bytes) -> bool:
        with self.db.connection() as conn, conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (f"{self.s}:ledger",))
            n = conn.execute(f"SELECT count(*) FROM {self.s}.ledger").fetchone()[0]
            if n != index:
                return False
            with conn.cursor() as cur:
                cur.executemany(f"INSERT INTO {self.s}.ledger VALUES (%s, %s, %s)",
                                [(index + k, body, mac) for k, (body, mac) in enumerate(rows)])  # fmt: skip
            conn.execute(
                f"INSERT INTO {self.s}.ledger_seal VALUES (1, %s) ON CONFLICT (id) DO UPDATE SET value = excluded.value",
                (seal,),
            )
        return True

    def seal(self) -> bytes | None:
        with self.db.connection() as conn:
            row = conn.execute(f"SELECT value FROM {self.s}.ledger_seal WHERE id = 1").fetchone()
        return bytes(row[0]) if row else None


class PostgresStore:
    """Refs and objects in PostgreSQL; with ``?objects=s3://...`` objects in S3 (the combined store)."""

    def __init__(self, url: str, create: bool = False) -> None:
        self._url = url
        _, params = parse_query(url)
        self.db = PostgresDB(url)
        try:
            self.db.migrate()  # migrations are idempotent and forward-only; a fresh database is set up here
        except Exception as exc:
            self.db.close()
            if isinstance(exc, UnsupportedFormat):
                raise
            raise StoreUnavailable(url, _first_line(exc)) from None
        self.refs = PostgresRefs(self.db)
        self.objects: Any
        self.object_store: Any = None
        if "objects" in params:
            from agentsnap_core.stores.s3 import S3Store

            if not params["objects"].startswith("s3://"):
                self.db.close()
                raise InvalidStoreURL(url, "objects= must name an s3:// URL")
            try:
                self.object_store = S3Store(params["objects"], create=create, objects_only=True)
            except BaseException:
                self.db.close()
                raise
            self.objects = self.object_store.objects
        else:
            self.objects = PostgresObjects(self.db)

    def effects_ledger(self) -> PostgresLedgerStore:
        """The effects ledger lives beside the refs, shared by every worker."""
        return PostgresLedgerStore(self.db)

    @property
    def url(self) -> str:
        return mask_url(self._url)

    def close(self) -> None:
        self.db.close()
        if self.object_store is not None:
            self.object_store.close()


def open_postgres(url: str, create: bool = False) -> PostgresStore:
    return PostgresStore(url, create=create)
