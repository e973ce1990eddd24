"""The checkpoint index in PostgreSQL: many workers on one store share threads.

Used when the saver's repository is bound to a ``postgresql://`` store (``PFSaver.from_url``). The
tables live in the store's schema next to core's; the queries of :class:`CheckpointIndex` are
translated from SQLite's dialect (``?`` -> ``%s``, ``INSERT OR REPLACE`` / ``OR IGNORE`` ->
``ON CONFLICT``). Text keys use the ``C`` collation so ids sort as in SQLite.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from ._index import CheckpointIndex

_SCHEMA = """
CREATE TABLE IF NOT EXISTS lg_meta (key TEXT COLLATE "C" PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS lg_checkpoints (
    seq BIGSERIAL PRIMARY KEY,
    thread_id TEXT COLLATE "C" NOT NULL,
    checkpoint_ns TEXT COLLATE "C" NOT NULL,
    checkpoint_id TEXT COLLATE "C" NOT NULL,
    parent_id TEXT COLLATE "C",
    snapshot TEXT COLLATE "C" NOT NULL,
    run_id TEXT COLLATE "C",
    ckpt_type TEXT NOT NULL,
    ckpt BYTEA NOT NULL,
    meta_type TEXT NOT NULL,
    meta BYTEA NOT NULL,
    flushed INTEGER NOT NULL DEFAULT 0,
    pending_state BYTEA,
    pending_manifest BYTEA,
    UNIQUE (thread_id, checkpoint_ns, checkpoint_id)
);
CREATE INDEX IF NOT EXISTS lg_checkpoints_run ON lg_checkpoints(run_id);
CREATE INDEX IF NOT EXISTS lg_checkpoints_snapshot ON lg_checkpoints(snapshot);
CREATE INDEX IF NOT EXISTS lg_checkpoints_unflushed ON lg_checkpoints(flushed) WHERE flushed = 0;
CREATE TABLE IF NOT EXISTS lg_pending (seq BIGINT PRIMARY KEY, state BYTEA NOT NULL, manifest BYTEA NOT NULL);
CREATE TABLE IF NOT EXISTS lg_pending_blobs (seq BIGINT NOT NULL, oid TEXT COLLATE "C" NOT NULL, data BYTEA NOT NULL,
    PRIMARY KEY (seq, oid));
CREATE INDEX IF NOT EXISTS lg_pending_blobs_oid ON lg_pending_blobs(oid);
CREATE TABLE IF NOT EXISTS lg_blobs (
    thread_id TEXT COLLATE "C" NOT NULL,
    checkpoint_ns TEXT COLLATE "C" NOT NULL,
    channel TEXT COLLATE "C" NOT NULL,
    version TEXT COLLATE "C" NOT NULL,
    type TEXT NOT NULL,
    oid TEXT,
    PRIMARY KEY (thread_id, checkpoint_ns, channel, version)
);
CREATE TABLE IF NOT EXISTS lg_writes (
    thread_id TEXT COLLATE "C" NOT NULL,
    checkpoint_ns TEXT COLLATE "C" NOT NULL,
    checkpoint_id TEXT COLLATE "C" NOT NULL,
    task_id TEXT COLLATE "C" NOT NULL,
    idx INTEGER NOT NULL,
    channel TEXT NOT NULL,
    type TEXT NOT NULL,
    value BYTEA NOT NULL,
    task_path TEXT COLLATE "C" NOT NULL DEFAULT '',
    PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id, task_id, idx)
);
"""

#: table -> (conflict key, columns in declaration order without serial ones)
_TABLES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "lg_meta": (("key",), ("key", "value")),
    "lg_checkpoints": (("thread_id", "checkpoint_ns", "checkpoint_id"), ()),
    "lg_pending": (("seq",), ("seq", "state", "manifest")),
    "lg_pending_blobs": (("seq", "oid"), ("seq", "oid", "data")),
    "lg_blobs": (
        ("thread_id", "checkpoint_ns", "channel", "version"),
        ("thread_id", "checkpoint_ns", "channel", "version", "type", "oid"),
    ),
    "lg_writes": (
        ("thread_id", "checkpoint_ns", "checkpoint_id", "task_id", "idx"),
        ("thread_id", "checkpoint_ns", "checkpoint_id", "task_id", "idx", "channel", "type", "value", "task_path"),
    ),
}
_INSERT = re.compile(r"^\s*INSERT OR (REPLACE|IGNORE) INTO (\w+)\s*(?:\(([^)]*)\))?")
_LOCK = 0x6C67_6978  # "lgix": serialises creating the tables
#: seconds between the plain VACUUMs a flushing saver runs on the tables its flushes churn (and one at close)
VACUUM_EVERY = 5.0


def translate(sql: str) -> str:
    """SQLite-dialect SQL of the index as PostgreSQL SQL."""
    m = _INSERT.match(sql)
    if m:
        verb, table, cols = m.group(1), m.group(2), m.group(3)
        keys, declared = _TABLES[table]
        columns = [c.strip() for c in cols.split(",")] if cols else list(declared)
        sql = "INSERT INTO " + sql[m.start(2) :]
        if verb == "IGNORE":
            sql += " ON CONFLICT DO NOTHING"
        else:
            updates = ", ".join(f"{c} = EXCLUDED.{c}" for c in columns if c not in keys)
            sql += f" ON CONFLICT ({', '.join(keys)}) DO UPDATE SET {updates}"
    return sql.replace("?", "%s")


class _Conn:
    """A psycopg connection that speaks the index's SQLite dialect."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    def execute(self, sql: str, args: Iterable[Any] = ()) -> Any:
        cur = self.conn.cursor()
        params = tuple(args)
        cur.execute(translate(sql), params or None)
        return cur

    def executemany(self, sql: str, rows: Iterable[Iterable[Any]]) -> Any:
        cur = self.conn.cursor()
        batch = [tuple(r) for r in rows]
        if batch:
            cur.executemany(translate(sql), batch)
        return cur


class PostgresIndex(CheckpointIndex):
    """The index tables in the store's PostgreSQL schema, through a small connection pool."""

    #: every write is a transaction committed on the server before it returns (as PostgresSaver's): PFSaver's
    #: durable mode needs no flush inside each put on this store
    commits_durable = True

    def __init__(self, conninfo: str, schema: str, where: str) -> None:
        from psycopg_pool import ConnectionPool

        self.where = where
        self._vacuumed = time.monotonic()
        self._vacuum_off = False
        self.pool = ConnectionPool(
            conninfo,
            min_size=1,
            max_size=4,
            open=True,
            timeout=60,
            kwargs={"autocommit": True, "connect_timeout": 10, "options": f"-c search_path={schema}"},
            name="agentsnap-langgraph",
        )
        with self.tx() as db:
            db.execute("SELECT pg_advisory_xact_lock(?)", (_LOCK,))
            db.conn.execute(_SCHEMA)
            self._check_schema(db)

    @contextmanager
    def tx(self) -> Iterator[_Conn]:
        with self.pool.connection() as conn, conn.transaction():
            yield _Conn(conn)

    def mark_flushed(self, seqs: Sequence[int]) -> None:
        """As on SQLite; then, at most every :data:`VACUUM_EVERY` seconds, a plain ``VACUUM`` of the tables the
        flush churns. PostgreSQL keeps a deleted or updated row's old version until a vacuum: every checkpoint
        passes through ``lg_pending`` (deleted by its flush) and has its row updated once, so without it those
        tables held 3.7 MB of dead rows after the 600-checkpoint benchmark run (autovacuum wakes once a minute),
        more than PostgresSaver's whole schema holds. An emptied ``lg_pending`` shrinks back to nothing."""
        super().mark_flushed(seqs)
        if seqs:
            self._vacuum(force=False)

    def _vacuum(self, force: bool) -> None:
        now = time.monotonic()
        if self._vacuum_off or (not force and now - self._vacuumed < VACUUM_EVERY):
            return
        self._vacuumed = now
        try:
            with self.pool.connection() as conn:  # autocommit: VACUUM cannot run inside a transaction
                conn.execute("VACUUM lg_pending, lg_pending_blobs, lg_checkpoints")
        except Exception as exc:  # (a role that may not vacuum only gets a notice): autovacuum reclaims it later
            self._vacuum_off = True
            import warnings

            warnings.warn(f"agentsnap-langgraph: VACUUM of the checkpoint index failed ({type(exc).__name__}: "
                          f"{exc}); not tried again by this saver: PostgreSQL's autovacuum reclaims the space later",
                          RuntimeWarning, stacklevel=2)

    @contextmanager
    def read(self) -> Iterator[_Conn]:
        with self.pool.connection() as conn:
            yield _Conn(conn)

    def close(self) -> None:
        try:
            self._vacuum(force=True)
        finally:
            self.pool.close()
