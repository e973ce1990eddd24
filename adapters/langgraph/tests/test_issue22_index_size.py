"""The checkpoint index keeps only live data in its pages (issue 22, storage).

Until a flush, a checkpoint's state document and manifest wait in the index; after it they are objects. They
used to wait inside the checkpoint's own row, so every row kept the freed space: ``lg_checkpoints`` took ~6x
the bytes of its live columns. SQLite's ``dbstat`` table tells the pages a table uses, whatever the machine.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from agentsnap_langgraph import PFSaver
from test_issue22_api import chat, turns


def _pages_and_live(db_path: Path, table: str, live_sql: str) -> tuple[int, int]:
    db = sqlite3.connect(db_path)
    try:
        pages = db.execute("SELECT sum(pgsize) FROM dbstat WHERE name=?", (table,)).fetchone()[0] or 0
        live = db.execute(live_sql).fetchone()[0] or 0
    finally:
        db.close()
    return int(pages), int(live)


def test_flushed_checkpoints_leave_no_dead_bytes_in_the_index(store: Path) -> None:
    with PFSaver(store, flush_interval=3600) as saver:  # the rows wait for one flush, as between group commits
        graph = chat(saver)
        turns(graph, "t", 30)
        saver.flush()
        pending = saver.index.unflushed()
    assert pending == []
    db = store / ".agentsnap" / "langgraph.sqlite"
    pages, live = _pages_and_live(
        db, "lg_checkpoints",
        "SELECT sum(length(thread_id) + length(checkpoint_ns) + length(checkpoint_id) + coalesce(length(parent_id), 0)"
        " + length(snapshot) + coalesce(length(run_id), 0) + length(ckpt_type) + length(ckpt) + length(meta_type)"
        " + length(meta) + 16) FROM lg_checkpoints",
    )  # fmt: skip
    assert live > 0
    assert pages <= 2 * live + 8 * 4096, f"lg_checkpoints uses {pages} bytes of pages for {live} bytes of rows"
    pending_pages, left = _pages_and_live(db, "lg_pending", "SELECT count(*) FROM lg_pending")
    assert left == 0 and pending_pages <= 4 * 4096


def test_rows_of_a_schema_1_index_are_still_recovered(tmp_path: Path) -> None:
    """An index written before ``lg_pending`` (schema 1: the bytes inline in the row) that a crash left
    unflushed: the next open upgrades it and still finds those bytes, and the flush clears them."""
    from agentsnap_langgraph._index import SCHEMA_VERSION, SqliteIndex

    path = tmp_path / "langgraph.sqlite"
    index = SqliteIndex(path)
    with index.tx() as db:
        db.execute(
            "INSERT INTO lg_checkpoints (thread_id, checkpoint_ns, checkpoint_id, parent_id, snapshot, ckpt_type, ckpt, "
            "meta_type, meta, flushed, pending_state, pending_manifest) VALUES ('t','','c1',NULL,'s1','msgpack',x'00',"
            "'msgpack',x'00',0,x'0102',x'0304')"
        )
        db.execute("UPDATE lg_meta SET value='1' WHERE key='schema'")
    index.close()
    index = SqliteIndex(path)
    try:
        [(seq, thread, _ns, cid, snap, state, manifest)] = index.unflushed()
        assert (thread, cid, snap, bytes(state), bytes(manifest)) == ("t", "c1", "s1", b"\x01\x02", b"\x03\x04")
        with index.read() as db:
            assert db.execute("SELECT value FROM lg_meta WHERE key='schema'").fetchone()[0] == str(SCHEMA_VERSION)
        index.mark_flushed([seq])
        assert index.unflushed() == []
    finally:
        index.close()
