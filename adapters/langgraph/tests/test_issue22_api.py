"""PFSaver's own API matches PostgresSaver / SqliteSaver (issue 22, items 2, 3, 6, 9).

Real StateGraphs (langgraph 1.2.22), the checkpointer under test is PFSaver on a fresh embedded store.
"""

from __future__ import annotations

import operator
import sqlite3
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import quote

import pytest
from agentsnap_langgraph import PFSaver
from agentsnap_langgraph._store import INDEX_FILE
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.channels import DeltaChannel
from langgraph.graph.message import add_messages
from lg_kit import cfg, one_node_graph
from typing_extensions import TypedDict


class Chat(TypedDict, total=False):
    messages: Annotated[list[AnyMessage], add_messages]
    total: Annotated[int, operator.add]


def _delta_reducer(state: list[Any] | None, writes: list[Any]) -> list[Any]:
    out = list(state or [])
    for w in writes:
        out.extend(w if isinstance(w, list) else [w])
    return out


class DeltaChat(TypedDict, total=False):
    messages: Annotated[list[Any], DeltaChannel(_delta_reducer, snapshot_frequency=1000)]


def chat(checkpointer: Any, state: type = Chat) -> Any:
    def echo(s: dict[str, Any]) -> dict[str, Any]:
        last = s["messages"][-1]
        content = last.content if hasattr(last, "content") else str(last)
        return {"messages": [AIMessage(content=f"echo: {content}", id=f"a{len(s['messages'])}")]}

    return one_node_graph(checkpointer, state, echo)


def turns(graph: Any, thread: str, n: int) -> None:
    for i in range(n):
        graph.invoke({"messages": [HumanMessage(content=f"m{i}", id=f"h{thread}{i}")]}, cfg(thread))


# ------------------------------------------------------------------ item 2
def test_prune_refuses_a_string_of_thread_ids(store: Path) -> None:
    with PFSaver(store) as saver:
        graph = chat(saver)
        for t in ("x", "y", "xy"):
            turns(graph, t, 1)
        with pytest.raises(TypeError, match="not a str"):
            saver.prune("xy", strategy="delete")
        with pytest.raises(TypeError, match="not a str"):
            saver.delete_for_runs("xy")
        assert all(graph.get_state(cfg(t)).values["messages"] for t in ("x", "y", "xy"))


async def test_async_prune_refuses_a_string_of_thread_ids(store: Path) -> None:
    with PFSaver(store) as saver:
        graph = chat(saver)
        await graph.ainvoke({"messages": [HumanMessage(content="hi", id="h")]}, cfg("x"))
        with pytest.raises(TypeError):
            await saver.aprune("x", strategy="delete")
        with pytest.raises(TypeError):
            await saver.adelete_for_runs("x")
        assert (await graph.aget_state(cfg("x"))).values["messages"]


# ------------------------------------------------------------------ item 3
def test_keep_latest_refuses_delta_channel_threads(store: Path) -> None:
    with PFSaver(store) as saver:
        graph = chat(saver, DeltaChat)
        turns(graph, "d", 3)
        turns(chat(saver), "plain", 2)
        assert len(graph.get_state(cfg("d")).values["messages"]) == 6
        with pytest.raises(NotImplementedError, match="DeltaChannel.*d"):
            saver.prune(["plain", "d"], strategy="keep_latest")
        # nothing pruned: not even the thread before it in the batch
        assert len(graph.get_state(cfg("d")).values["messages"]) == 6
        assert len(list(saver.list(cfg("plain")))) > 1
        saver.prune(["d"], strategy="delete")  # delete is fine
        assert graph.get_state(cfg("d")).values == {}


# ------------------------------------------------------------------ item 9
def test_unknown_prune_strategy_is_a_value_error(store: Path) -> None:
    with PFSaver(store) as saver:
        with pytest.raises(ValueError, match="strategy"):
            saver.prune(["t"], strategy="keep_oldest")


def test_setup_is_there_and_idempotent(store: Path) -> None:
    saver = PFSaver(store)
    saver.setup()
    saver.setup()
    graph = chat(saver)
    turns(graph, "t", 1)
    saver.close()


async def test_asetup(store: Path) -> None:
    async with PFSaver(store) as saver:
        await saver.asetup()


def test_from_url_percent_decodes_file_urls(tmp_path: Path) -> None:
    where = tmp_path / "my project"
    url = "file://" + quote(str(where))
    assert "%20" in url
    with PFSaver.from_url(url) as saver:
        turns(chat(saver), "t", 1)
    assert (where / ".agentsnap" / INDEX_FILE).exists()
    assert not (tmp_path / "my%20project").exists()


def test_list_streams_rows(store: Path) -> None:
    """list() reads the index a page at a time: the first checkpoint comes before every row was read,
    and SQLite is asked for more rows only as the caller goes on (no fetchall of the whole thread)."""
    with PFSaver(store) as saver:
        graph = chat(saver)
        turns(graph, "t", 30)  # 3 checkpoints a turn
        total = len(list(saver.list(cfg("t"))))
        assert total == 90
        selects: list[str] = []
        saver.index.db.set_trace_callback(  # type: ignore[attr-defined]
            lambda sql: selects.append(sql) if sql.lstrip().upper().startswith("SELECT") and "lg_checkpoints" in sql else None
        )
        it = saver.list(cfg("t"))
        first = next(it)
        assert first.checkpoint is not None
        assert len(selects) == 1 and "LIMIT" in selects[0].upper(), selects
        assert len(list(it)) == total - 1
        assert len(selects) > 1
        ids = [t.config["configurable"]["checkpoint_id"] for t in saver.list(cfg("t"))]
        assert ids == sorted(ids, reverse=True) and len(set(ids)) == total


# ------------------------------------------------------------------ item 6
def test_snapshot_lookup_uses_an_index(store: Path) -> None:
    with PFSaver(store) as saver:
        turns(chat(saver), "t", 1)
        db = sqlite3.connect(saver.repo.store_dir / INDEX_FILE)
        try:
            plan = db.execute(
                "EXPLAIN QUERY PLAN SELECT checkpoint_id FROM lg_checkpoints WHERE snapshot=? LIMIT 1", ("x",)
            ).fetchall()
        finally:
            db.close()
    detail = " ".join(str(r[-1]) for r in plan)
    assert "USING INDEX" in detail or "USING COVERING INDEX" in detail, detail
