"""Storage of the effects ledger's rows: the protocol every store's ledger implements, and the embedded one.

The ledger's meaning (entries, MACs, lineages, binding to snapshots) is :mod:`agentsnap_core.layers.effects_ledger`;
this module only keeps ``(body, mac)`` rows and one seal, durably, for the directory store. PostgreSQL and S3 stores
offer their own through ``effects_ledger()`` (:func:`agentsnap_core.stores.ledger_of`).
"""

from __future__ import annotations

import os
import sqlite3
import threading
from pathlib import Path
from typing import Protocol, runtime_checkable

from agentsnap_core.stores.base import connect_sqlite, sqlite_read_only

#: the embedded ledger's file in the store directory
LEDGER_FILE = "effects.sqlite"

@runtime_checkable
class LedgerStore(Protocol):
    """Append-only storage of ``(body, mac)`` rows numbered from 0, plus one seal value."""

    def count(self) -> int: """Number of rows."""
    def read(self, start: int = 0) -> list[tuple[bytes, bytes]]: """Rows ``start..`` in order."""
    def append(self, index: int, body: bytes, mac: bytes, seal: bytes) -> bool: """Add row ``index`` and replace the seal atomically, only if ``index`` is the next free one (else False). Durable on return."""
    def seal(self) -> bytes | None: """The current seal, or None."""

    # Optional: ``append_many(index, rows, seal) -> bool`` adds rows ``index..`` (``rows``: ``(body, mac)`` pairs)
    # and the seal after the last one in one atomic, durable write, or nothing (False) if ``index`` is not the
    # next free one. The ledger uses it where present (a fork of N branches: one commit instead of N).


class SqliteLedgerStore:
    """The embedded ledger: ``entries(idx, body, mac)`` and ``seal`` in one SQLite file."""

    _SCHEMA = (
        "CREATE TABLE IF NOT EXISTS entries (idx INTEGER PRIMARY KEY, body BLOB NOT NULL, mac BLOB NOT NULL);"
        "CREATE TABLE IF NOT EXISTS seal (id INTEGER PRIMARY KEY CHECK (id = 1), value BLOB NOT NULL);"
    )

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._local = threading.local()

    def _db(self, create: bool) -> sqlite3.Connection | None:
        db = getattr(self._local, "db", None)
        if db is not None and getattr(self._local, "pid", None) == os.getpid():
            return db
        if not create and not self.path.exists():
            return None
        read_only = sqlite_read_only(self.path)  # a read-only store still verifies
        db = connect_sqlite(self.path, read_only)
        if not read_only:
            db.executescript(self._SCHEMA)
        self._local.db, self._local.pid = db, os.getpid()
        return db

    def count(self) -> int:
        db = self._db(False)
        return 0 if db is None else int(db.execute("SELECT count(*) FROM entries").fetchone()[0])

    def read(self, start: int = 0) -> list[tuple[bytes, bytes]]:
        db = self._db(False)
        if db is None:
            return []
        rows = db.execute("SELECT body, mac FROM entries WHERE idx >= ? ORDER BY idx", (start,)).fetchall()
        return [(bytes(b), bytes(m)) for b, m in rows]

    def append(self, index: int, body: bytes, mac: bytes, seal: bytes) -> bool:
        return self.append_many(index, [(body, mac)], seal)

    def append_many(self, index: int, rows: list[tuple[bytes, bytes]], seal: bytes) -> bool:
        db = self._db(True)
        assert db is not None
        db.execute("BEGIN IMMEDIATE")
        try:
            n = db.execute("SELECT count(*) FROM entries").fetchone()[0]
            if n != index:
                db.execute("ROLLBACK")
                return False
            db.executemany("INSERT INTO entries (idx, body, mac) VALUES (?, ?, ?)",
                           [(index + k, body, mac) for k, (body, mac) in enumerate(rows)])  # fmt: skip
            db.execute("INSERT OR REPLACE INTO seal (id, value) VALUES (1, ?)", (seal,))
            db.execute("COMMIT")
            return True
        except BaseException:
            db.execute("ROLLBACK")
            raise

    def seal(self) -> bytes | None:
        db = self._db(False)
        if db is None:
            return None
        row = db.execute("SELECT value FROM seal WHERE id = 1").fetchone()
        return bytes(row[0]) if row else None

    def close(self) -> None:
        db = getattr(self._local, "db", None)
        if db is not None:
            db.close()
            self._local.db = None
