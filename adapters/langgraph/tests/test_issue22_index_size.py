"""The checkpoint index keeps only live data in its pages (issue 22, storage).

Until a flush, a checkpoint's state document and manifest wait in the index; after it they are objects. They
used to wait inside the checkpoint's own row, so every row kept the freed space: ``lg_checkpoints`` took ~6x
the bytes of its live columns. SQLite's ``dbstat`` table tells the pages a table uses, whatever the machine.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Annotated, Any

import pytest
from agentsnap_langgraph import PFSaver
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages
from test_issue22_api import cfg, chat, turns
from typing_extensions import TypedDict


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


# ------------------------------------------------------------------ storage: what the index rows hold
class _Catalogue(TypedDict, total=False):
    messages: Annotated[list[AnyMessage], add_messages]
    context: str


BIG = "catalogue entry: " + "lorem ipsum dolor sit amet " * 8000  # ~216 KB, as repetitive as real documents are


def _catalogue(checkpointer: Any) -> Any:
    def reply(state: dict[str, Any]) -> dict[str, Any]:
        n = len(state["messages"])
        return {"messages": [AIMessage(content=f"reply {n}", id=f"a{n}")], "context": BIG + str(n)}

    builder = StateGraph(_Catalogue)
    builder.add_node("reply", reply)
    builder.add_edge(START, "reply")
    return builder.compile(checkpointer=checkpointer)


def _column_bytes(db_path: Path, sql: str) -> int:
    db = sqlite3.connect(db_path)
    try:
        return int(db.execute(sql).fetchone()[0] or 0)
    finally:
        db.close()


def test_a_large_value_a_task_writes_is_kept_compressed_in_the_index(store: Path) -> None:
    """A task's writes were kept in ``lg_writes`` as serialized: a 216 KB document written each turn took
    216 KB of the index per turn (5 MB of the 8.7 MB index in benchmarks/langgraph_bench.py --issue22)."""
    with PFSaver(store) as saver:
        graph = _catalogue(saver)
        for i in range(5):
            graph.invoke({"messages": [HumanMessage(content=f"q{i}", id=f"h{i}")]}, cfg("t"))
        saver.flush()
        written = [w for tup in saver.list(cfg("t")) for w in tup.pending_writes or [] if w[1] == "context"]
        assert graph.get_state(cfg("t")).values["context"] == BIG + "9"
    assert sorted(v for _t, _c, v in written) == sorted(BIG + str(n) for n in (1, 3, 5, 7, 9))
    db = store / ".agentsnap" / "langgraph.sqlite"
    stored = _column_bytes(db, "SELECT sum(length(value)) FROM lg_writes WHERE channel='context'")
    assert 0 < stored < 5 * len(BIG) // 50, f"{stored} bytes of lg_writes for 5 writes of {len(BIG)} bytes"
    with PFSaver(store) as again:  # a fresh process's reads: nothing cached
        assert _catalogue(again).get_state(cfg("t")).values["context"] == BIG + "9"
        assert sum(1 for tup in again.list(cfg("t")) for w in tup.pending_writes or [] if w[1] == "context") == 5


def test_checkpoints_are_kept_compressed_in_the_index(store: Path) -> None:
    """A checkpoint's serialized form (channel versions, versions seen: long, repetitive ids) took ~570 bytes
    of every ``lg_checkpoints`` row; LangGraph reads it back unchanged."""
    with PFSaver(store) as saver:
        graph = chat(saver)
        turns(graph, "t", 20)
        saver.flush()
        history = [(s.config, s.values, s.metadata) for s in graph.get_state_history(cfg("t"))]
        raw = sum(
            len(saver.serde.dumps_typed({k: v for k, v in t.checkpoint.items() if k != "channel_values"})[1])
            for t in saver.list(cfg("t"))
        )
    with PFSaver(store) as again:
        assert [(s.config, s.values, s.metadata) for s in chat(again).get_state_history(cfg("t"))] == history
    stored = _column_bytes(store / ".agentsnap" / "langgraph.sqlite", "SELECT sum(length(ckpt)) FROM lg_checkpoints")
    assert stored < 0.75 * raw, f"lg_checkpoints holds {stored} bytes of checkpoints for {raw} serialized"


def test_a_value_waiting_for_the_flush_is_kept_compressed_and_read_back_whole(store: Path) -> None:
    """Until a flush, the values a put wrote wait in ``lg_pending_blobs`` (recovery and other processes read
    them there): at every put of a growing thread, the whole value, so the index file kept the high-water
    mark of that traffic (2.6 MB of free pages after the benchmark). A plain row (schema 3) still reads."""
    from agentsnap_core.errors import ObjectCorrupt
    from agentsnap_core.format import content

    with PFSaver(store, flush_interval=3600) as saver:
        _catalogue(saver).invoke({"messages": [HumanMessage(content="q", id="h")]}, cfg("t"))
        db = store / ".agentsnap" / "langgraph.sqlite"
        waiting = _column_bytes(db, "SELECT sum(length(data)) FROM lg_pending_blobs")
        assert 0 < waiting < len(BIG) // 20, f"{waiting} bytes wait in lg_pending_blobs for a {len(BIG)}-byte value"
        oid = content.put_bytes(None, saver.serde.dumps_typed(BIG + "1")[1])
        assert saver.index.pending_blob(oid) == saver.serde.dumps_typed(BIG + "1")[1]
        [seq] = [row[0] for row in saver.index.unflushed()][-1:]
        assert saver.serde.dumps_typed(BIG + "1")[1] in saver.index.pending_blobs(seq)
        plain = b"a value written by schema 3" * 20
        plain_oid = content.put_bytes(None, plain)
        with saver.index.tx() as tx:
            tx.execute("INSERT INTO lg_pending_blobs (seq, oid, data) VALUES (?,?,?)", (seq, plain_oid, plain))
            tx.execute(
                "INSERT INTO lg_pending_blobs (seq, oid, data) VALUES (?,?,?)", (seq, "ab" * 32, b"\x28\xb5\x2f\xfd!")
            )
        assert saver.index.pending_blob(plain_oid) == plain
        with pytest.raises(ObjectCorrupt):
            saver.index.pending_blob("ab" * 32)
        with saver.index.tx() as tx:
            tx.execute("DELETE FROM lg_pending_blobs WHERE oid=?", ("ab" * 32,))


def test_a_serializer_type_that_looks_compressed_is_read_back_as_it_was() -> None:
    from agentsnap_langgraph._typed import expand, shrink

    for typ, data in (("zstd+msgpack", b"x"), ("zstd+msgpack", b"y" * 5000), ("msgpack", b"z" * 5000), ("json", b"{}")):
        assert expand(*shrink(typ, data)) == (typ, data)
