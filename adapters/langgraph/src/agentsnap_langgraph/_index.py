"""The checkpoint index: a SQLite file inside the store directory (``langgraph.sqlite``).

It answers LangGraph's queries fast (latest checkpoint of a thread, listing, pending writes);
the checkpoints themselves are agentsnap snapshots and their channel values content-addressed
objects, named here by id. Commits use WAL with ``synchronous=NORMAL`` (no fsync per put):
durability comes from :meth:`PFSaver.flush`, which makes the objects durable and then moves the
thread refs in one compare-and-swap transaction. Until then a row also carries its snapshot's
manifest and state document (``pending_*``): the flush writes them as objects. A row never flushed
is finished on the next open (see :meth:`CheckpointIndex.unflushed`). In durable mode (``flush_interval=0``) every
commit is ``synchronous=FULL`` instead (:meth:`SqliteIndex.make_durable`): the row and the bytes its snapshot needs
survive a power cut when ``put`` returns, and the group commit follows.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

from agentsnap_core.stores.base import enable_wal

from . import _typed

#: 2: a checkpoint's pre-flush bytes live in ``lg_pending`` (deleted at the flush), not in its row
#: 3: so do the channel values a put wrote (``lg_pending_blobs``): on the embedded store they reach the object
#: store only with the flush's pack, and a killed process's next open writes them from here
#: 4: a row's checkpoint, metadata or write value may be zstd-compressed (a ``zstd+`` type, :mod:`._typed`);
#: ``lg_blobs`` and ``lg_writes`` of a new index are ``WITHOUT ROWID`` (their key is their only index); a value waiting
#: in ``lg_pending_blobs`` may be zstd-compressed (:func:`._typed.squeeze`; a schema-3 row is read as it is)
SCHEMA_VERSION = 4
#: rows per query of a streamed listing
PAGE = 64

_SCHEMA = """
CREATE TABLE IF NOT EXISTS lg_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS lg_checkpoints (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    thread_id TEXT NOT NULL,
    checkpoint_ns TEXT NOT NULL,
    checkpoint_id TEXT NOT NULL,
    parent_id TEXT,
    snapshot TEXT NOT NULL,
    run_id TEXT,
    ckpt_type TEXT NOT NULL,
    ckpt BLOB NOT NULL,
    meta_type TEXT NOT NULL,
    meta BLOB NOT NULL,
    flushed INTEGER NOT NULL DEFAULT 0,
    pending_state BLOB,
    pending_manifest BLOB,
    UNIQUE (thread_id, checkpoint_ns, checkpoint_id)
);
CREATE INDEX IF NOT EXISTS lg_checkpoints_run ON lg_checkpoints(run_id);
CREATE INDEX IF NOT EXISTS lg_checkpoints_snapshot ON lg_checkpoints(snapshot);
CREATE INDEX IF NOT EXISTS lg_checkpoints_unflushed ON lg_checkpoints(flushed) WHERE flushed = 0;
CREATE TABLE IF NOT EXISTS lg_pending (seq INTEGER PRIMARY KEY, state BLOB NOT NULL, manifest BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS lg_pending_blobs (seq INTEGER NOT NULL, oid TEXT NOT NULL, data BLOB NOT NULL,
    PRIMARY KEY (seq, oid));
CREATE INDEX IF NOT EXISTS lg_pending_blobs_oid ON lg_pending_blobs(oid);
CREATE TABLE IF NOT EXISTS lg_blobs (
    thread_id TEXT NOT NULL,
    checkpoint_ns TEXT NOT NULL,
    channel TEXT NOT NULL,
    version TEXT NOT NULL,
    type TEXT NOT NULL,
    oid TEXT,
    PRIMARY KEY (thread_id, checkpoint_ns, channel, version)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS lg_writes (
    thread_id TEXT NOT NULL,
    checkpoint_ns TEXT NOT NULL,
    checkpoint_id TEXT NOT NULL,
    task_id TEXT NOT NULL,
    idx INTEGER NOT NULL,
    channel TEXT NOT NULL,
    type TEXT NOT NULL,
    value BLOB NOT NULL,
    task_path TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id, task_id, idx)
) WITHOUT ROWID;
"""

CheckpointRow = tuple[str, str, str, str | None, str, str, bytes, str, bytes]
"""(thread_id, checkpoint_ns, checkpoint_id, parent_id, snapshot, ckpt_type, ckpt, meta_type, meta)"""

_ROW_COLS = "thread_id, checkpoint_ns, checkpoint_id, parent_id, snapshot, ckpt_type, ckpt, meta_type, meta"


def version_key(version: object) -> str:
    """A channel version as a text key that keeps ``1`` and ``"1"`` apart."""
    return json.dumps(version)


class CheckpointIndex:
    """The index queries, on any SQL engine; subclasses give :meth:`tx` and :meth:`read`.

    SQL here is written in SQLite's dialect (``?`` parameters, ``INSERT OR REPLACE`` / ``OR IGNORE``);
    the PostgreSQL index (:mod:`agentsnap_langgraph._pgindex`) translates it.
    """

    where = "index"

    def tx(self) -> AbstractContextManager[Any]:
        """A write transaction: ``with index.tx() as db: db.execute(sql, args)``."""
        raise NotImplementedError

    def read(self) -> AbstractContextManager[Any]:
        """A connection for reads."""
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def sync(self) -> None:
        """Make every committed row durable (a no-op where each commit already is)."""

    def setup(self) -> None:
        """Create the tables and indexes if missing (they are created on open: idempotent)."""

    def _check_schema(self, db: Any) -> None:
        row = db.execute("SELECT value FROM lg_meta WHERE key='schema'").fetchone()
        if row is None:
            db.execute("INSERT OR IGNORE INTO lg_meta VALUES ('schema', ?)", (str(SCHEMA_VERSION),))
        elif int(row[0]) > SCHEMA_VERSION:
            from agentsnap_core.errors import UnsupportedFormat

            raise UnsupportedFormat(f"LangGraph index {self.where}", int(row[0]), SCHEMA_VERSION)
        elif int(row[0]) < SCHEMA_VERSION:  # 1 -> 2: the new table exists now; rows of 1 keep their bytes inline
            db.execute("UPDATE lg_meta SET value=? WHERE key='schema'", (str(SCHEMA_VERSION),))

    # ------------------------------------------------------------------ writes
    def insert_checkpoint(
        self,
        row: CheckpointRow,
        run_id: str | None,
        blobs: Sequence[tuple[str, str, str, str | None]],
        pending: tuple[bytes, bytes] | None = None,
        pending_blobs: Sequence[tuple[str, bytes]] = (),
    ) -> int:
        """Insert (or replace) a checkpoint and its new channel blobs in one transaction; return its seq.

        ``pending`` (the state document and manifest the next flush writes as objects) goes to ``lg_pending``,
        whose row the flush deletes: kept in the checkpoint's row, the freed space stayed in its pages.
        """
        thread_id, ns = row[0], row[1]
        with self.tx() as db:
            cur = db.execute(
                f"INSERT OR REPLACE INTO lg_checkpoints ({_ROW_COLS}, run_id, flushed, pending_state, pending_manifest) "
                "VALUES (?,?,?,?,?,?,?,?,?,?,0,NULL,NULL)",
                (*row, run_id),
            )
            seq = getattr(cur, "lastrowid", None)
            if blobs:
                db.executemany(
                    "INSERT OR REPLACE INTO lg_blobs VALUES (?,?,?,?,?,?)",
                    [(thread_id, ns, ch, ver, typ, oid) for ch, ver, typ, oid in blobs],
                )
            if not seq:
                seq = db.execute(
                    "SELECT seq FROM lg_checkpoints WHERE thread_id=? AND checkpoint_ns=? AND checkpoint_id=?",
                    (thread_id, ns, row[2]),
                ).fetchone()[0]
            if pending is not None:
                db.execute("INSERT OR REPLACE INTO lg_pending (seq, state, manifest) VALUES (?,?,?)", (seq, *pending))
            if pending_blobs:
                db.executemany(
                    "INSERT OR IGNORE INTO lg_pending_blobs (seq, oid, data) VALUES (?,?,?)",
                    [(seq, oid, _typed.squeeze(data)) for oid, data in pending_blobs],
                )
        return int(seq)

    def pending_blobs(self, seq: int) -> list[bytes]:
        """The channel values a not yet flushed checkpoint wrote (written as objects by recovery)."""
        with self.read() as db:
            rows = db.execute("SELECT oid, data FROM lg_pending_blobs WHERE seq=?", (seq,)).fetchall()
        return [_typed.unsqueeze(oid, data) for oid, data in rows]

    def pending_blob(self, oid: str) -> bytes | None:
        """A channel value another process wrote and has not flushed yet, or None."""
        with self.read() as db:
            row = db.execute("SELECT data FROM lg_pending_blobs WHERE oid=? LIMIT 1", (oid,)).fetchone()
        return None if row is None else _typed.unsqueeze(oid, row[0])

    def insert_writes(self, rows: Sequence[tuple[Any, ...]], replace: Sequence[bool]) -> None:
        """Store writes; rows with ``replace`` overwrite, the others are kept if already present."""
        overwrite = [r for r, rep in zip(rows, replace, strict=True) if rep]
        keep = [r for r, rep in zip(rows, replace, strict=True) if not rep]
        with self.tx() as db:
            if keep:
                db.executemany("INSERT OR IGNORE INTO lg_writes VALUES (?,?,?,?,?,?,?,?,?)", keep)
            if overwrite:
                db.executemany("INSERT OR REPLACE INTO lg_writes VALUES (?,?,?,?,?,?,?,?,?)", overwrite)

    # ------------------------------------------------------------------ reads
    def get_row(self, thread_id: str, ns: str, checkpoint_id: str | None) -> CheckpointRow | None:
        with self.read() as db:
            if checkpoint_id:
                cur = db.execute(
                    f"SELECT {_ROW_COLS} FROM lg_checkpoints WHERE thread_id=? AND checkpoint_ns=? AND checkpoint_id=?",
                    (thread_id, ns, checkpoint_id),
                )
            else:
                cur = db.execute(
                    f"SELECT {_ROW_COLS} FROM lg_checkpoints WHERE thread_id=? AND checkpoint_ns=? "
                    "ORDER BY checkpoint_id DESC LIMIT 1",
                    (thread_id, ns),
                )
            return cur.fetchone()

    def iter_rows(
        self,
        thread_id: str | None,
        ns: str | None,
        checkpoint_id: str | None,
        before: str | None,
        limit: int | None,
    ) -> Iterator[CheckpointRow]:
        where: list[str] = []
        args: list[Any] = []
        for col, val in (("thread_id", thread_id), ("checkpoint_ns", ns), ("checkpoint_id", checkpoint_id)):
            if val is not None:
                where.append(f"{col}=?")
                args.append(val)
        if before is not None:
            where.append("checkpoint_id<?")
            args.append(before)
        # streamed in pages (keyset on the sort order), the lock held only while a page is read: a caller
        # may stop early or put checkpoints between items
        last: tuple[str, str, str] | None = None
        left = limit
        while left is None or left > 0:
            page = PAGE if left is None else min(PAGE, left)
            cond, cargs = list(where), list(args)
            if last is not None:
                cond.append("(checkpoint_id<? OR (checkpoint_id=? AND (thread_id>? OR (thread_id=? AND checkpoint_ns>?))))")
                cargs += [last[0], last[0], last[1], last[1], last[2]]
            q = f"SELECT {_ROW_COLS} FROM lg_checkpoints"
            if cond:
                q += " WHERE " + " AND ".join(cond)
            q += " ORDER BY checkpoint_id DESC, thread_id, checkpoint_ns LIMIT ?"
            with self.read() as db:
                rows = db.execute(q, [*cargs, page]).fetchall()
            yield from rows
            if len(rows) < page:
                return
            last = (rows[-1][2], rows[-1][0], rows[-1][1])
            if left is not None:
                left -= len(rows)

    def blob(self, thread_id: str, ns: str, channel: str, version: str) -> tuple[str, str | None] | None:
        with self.read() as db:
            return db.execute(
                "SELECT type, oid FROM lg_blobs WHERE thread_id=? AND checkpoint_ns=? AND channel=? AND version=?",
                (thread_id, ns, channel, version),
            ).fetchone()

    def writes(self, thread_id: str, ns: str, checkpoint_id: str) -> list[tuple[str, str, str, bytes, str, int]]:
        """``(task_id, channel, type, value, task_path, idx)`` in LangGraph's ``writes_sort_key`` order."""
        with self.read() as db:
            return db.execute(
                "SELECT task_id, channel, type, value, task_path, idx FROM lg_writes "
                "WHERE thread_id=? AND checkpoint_ns=? AND checkpoint_id=? ORDER BY task_path, task_id, idx",
                (thread_id, ns, checkpoint_id),
            ).fetchall()

    def snapshot_of(self, thread_id: str, ns: str, checkpoint_id: str) -> str | None:
        with self.read() as db:
            row = db.execute(
                "SELECT snapshot FROM lg_checkpoints WHERE thread_id=? AND checkpoint_ns=? AND checkpoint_id=?",
                (thread_id, ns, checkpoint_id),
            ).fetchone()
        return row[0] if row else None

    def latest_snapshot(self, thread_id: str, ns: str) -> tuple[str, str] | None:
        """``(checkpoint_id, snapshot)`` of the newest checkpoint of a thread namespace."""
        with self.read() as db:
            return db.execute(
                "SELECT checkpoint_id, snapshot FROM lg_checkpoints WHERE thread_id=? AND checkpoint_ns=? "
                "ORDER BY checkpoint_id DESC LIMIT 1",
                (thread_id, ns),
            ).fetchone()

    def checkpoint_of_snapshot(self, snapshot: str) -> str | None:
        with self.read() as db:
            row = db.execute("SELECT checkpoint_id FROM lg_checkpoints WHERE snapshot=? LIMIT 1", (snapshot,)).fetchone()
        return row[0] if row else None

    def namespaces(self, thread_id: str) -> list[str]:
        with self.read() as db:
            rows = db.execute(
                "SELECT DISTINCT checkpoint_ns FROM lg_checkpoints WHERE thread_id=? ORDER BY checkpoint_ns", (thread_id,)
            ).fetchall()
        return [r[0] for r in rows]

    def thread_ids(self) -> list[str]:
        with self.read() as db:
            return [r[0] for r in db.execute("SELECT DISTINCT thread_id FROM lg_checkpoints ORDER BY thread_id")]

    def unflushed(self) -> list[tuple[int, str, str, str, str, bytes | None, bytes | None]]:
        """``(seq, thread_id, ns, checkpoint_id, snapshot, state bytes, manifest bytes)`` of rows not yet flushed."""
        with self.read() as db:
            return db.execute(
                "SELECT c.seq, c.thread_id, c.checkpoint_ns, c.checkpoint_id, c.snapshot, "
                "COALESCE(p.state, c.pending_state), COALESCE(p.manifest, c.pending_manifest) "
                "FROM lg_checkpoints c LEFT JOIN lg_pending p ON p.seq = c.seq WHERE c.flushed=0 ORDER BY c.seq"
            ).fetchall()

    def mark_flushed(self, seqs: Sequence[int]) -> None:
        if not seqs:
            return
        with self.tx() as db:
            db.executemany(
                "UPDATE lg_checkpoints SET flushed=1, pending_state=NULL, pending_manifest=NULL WHERE seq=?",
                [(s,) for s in seqs],
            )
            db.executemany("DELETE FROM lg_pending WHERE seq=?", [(s,) for s in seqs])
            db.executemany("DELETE FROM lg_pending_blobs WHERE seq=?", [(s,) for s in seqs])


class SqliteIndex(CheckpointIndex):
    """The embedded index: ``langgraph.sqlite`` in the store directory (one connection, one lock)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.where = str(self.path)
        self.lock = threading.RLock()
        self.durable = False
        self.db = sqlite3.connect(self.path, timeout=60, isolation_level=None, check_same_thread=False)
        enable_wal(self.db)  # (processes opening a new index at once: see core)
        self.db.execute("PRAGMA synchronous=NORMAL")
        self.db.execute("PRAGMA busy_timeout=60000")
        with self.lock:
            self.db.executescript(_SCHEMA)
            self._check_schema(self.db)

    @contextmanager
    def tx(self) -> Iterator[sqlite3.Connection]:
        with self.lock:
            self.db.execute("BEGIN IMMEDIATE")
            try:
                yield self.db
            except BaseException:
                self.db.execute("ROLLBACK")
                raise
            self.db.execute("COMMIT")

    @contextmanager
    def read(self) -> Iterator[sqlite3.Connection]:
        with self.lock:
            yield self.db

    def make_durable(self) -> None:
        """Every later commit reaches the disk before it returns (``synchronous=FULL``: one WAL fsync each)."""
        with self.lock:
            self.db.execute("PRAGMA synchronous=FULL")
            self.durable = True

    def sync(self) -> None:
        """One commit with ``synchronous=FULL``: the WAL, and every row committed before, reaches the disk."""
        if self.durable:
            return  # every commit already did
        with self.lock:
            self.db.execute("PRAGMA synchronous=FULL")
            try:
                with self.tx() as db:
                    db.execute("UPDATE lg_meta SET value=value WHERE key='schema'")
            finally:
                self.db.execute("PRAGMA synchronous=NORMAL")

    def close(self) -> None:
        with self.lock:
            self.db.close()
