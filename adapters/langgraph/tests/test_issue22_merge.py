"""merge_thread merges each channel three-way against the common checkpoint (issue 22, item 7)."""

from __future__ import annotations

import operator
from pathlib import Path
from typing import Annotated, Any

import pytest
from agentsnap_langgraph import PFSaver
from agentsnap_langgraph.merge import ThreadMergeConflict
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, RemoveMessage
from langgraph.graph.message import add_messages
from lg_kit import cfg, one_node_graph
from typing_extensions import TypedDict


class Counted(TypedDict, total=False):
    messages: Annotated[list[AnyMessage], add_messages]
    count: Annotated[int, operator.add]
    topic: str


def counted_graph(checkpointer: Any) -> Any:
    def bot(state: Counted) -> dict[str, Any]:
        last = state["messages"][-1]
        return {"messages": [AIMessage(content=f"re: {last.content}", id=f"a-{last.id}")], "count": 1}

    return one_node_graph(checkpointer, Counted, bot)


def forked(saver: PFSaver) -> tuple[Any, dict[str, Any], dict[str, Any]]:
    graph = counted_graph(saver)
    graph.invoke({"messages": [HumanMessage(content="hi", id="h1")]}, cfg("base"))
    target, source = saver.fork_thread(cfg("base"), 2)
    assert graph.get_state(target).values["count"] == 1
    return graph, target, source


def values(graph: Any, config: dict[str, Any]) -> dict[str, Any]:
    return dict(graph.get_state({"configurable": {"thread_id": config["configurable"]["thread_id"]}}).values)


def test_counter_changed_only_in_the_source_takes_the_source_value(store: Path) -> None:
    with PFSaver(store) as saver:
        graph, target, source = forked(saver)
        graph.update_state(source, {"count": 2}, as_node="bot")  # 1 -> 3
        saver.merge_thread(graph, target, source, as_node="bot")
        assert values(graph, target)["count"] == 3  # was 1 + 3 = 4


def test_counter_changed_on_both_sides_adds_both_changes(store: Path) -> None:
    with PFSaver(store) as saver:
        graph, target, source = forked(saver)
        graph.update_state(source, {"count": 2}, as_node="bot")  # 1 -> 3
        graph.update_state(target, {"count": 5}, as_node="bot")  # 1 -> 6
        saver.merge_thread(graph, target, source, as_node="bot")
        assert values(graph, target)["count"] == 8


def test_a_message_edited_in_the_source_is_merged(store: Path) -> None:
    with PFSaver(store) as saver:
        graph, target, source = forked(saver)
        graph.update_state(source, {"messages": [AIMessage(content="re: hi (fixed)", id="a-h1")]}, as_node="bot")
        graph.invoke({"messages": [HumanMessage(content="next", id="h2")]}, target)
        saver.merge_thread(graph, target, source, as_node="bot")
        got = values(graph, target)["messages"]
        assert [(m.id, m.content) for m in got] == [
            ("h1", "hi"), ("a-h1", "re: hi (fixed)"), ("h2", "next"), ("a-h2", "re: next")
        ]


def test_a_message_removed_in_the_source_is_removed(store: Path) -> None:
    with PFSaver(store) as saver:
        graph, target, source = forked(saver)
        graph.update_state(source, {"messages": [RemoveMessage(id="a-h1")]}, as_node="bot")
        saver.merge_thread(graph, target, source, as_node="bot")
        assert [m.id for m in values(graph, target)["messages"]] == ["h1"]


def test_a_message_edited_on_both_sides_is_a_conflict(store: Path) -> None:
    with PFSaver(store) as saver:
        graph, target, source = forked(saver)
        graph.update_state(source, {"messages": [AIMessage(content="source", id="a-h1")]}, as_node="bot")
        graph.update_state(target, {"messages": [AIMessage(content="target", id="a-h1")]}, as_node="bot")
        head = graph.get_state(target).config["configurable"]["checkpoint_id"]
        with pytest.raises(ThreadMergeConflict) as caught:
            saver.merge_thread(graph, target, source, as_node="bot")
        assert caught.value.channels == ["messages"]
        conflict = caught.value.conflicts[0]
        assert {"layer": "state", "kind": "modify/modify", "path": "messages/a-h1"}.items() <= conflict.items()
        assert "message" in conflict
        assert graph.get_state(target).config["configurable"]["checkpoint_id"] == head  # nothing written
        saver.merge_thread(graph, target, source, as_node="bot", prefer="source")
        assert [m.content for m in values(graph, target)["messages"]] == ["hi", "source"]


def test_removed_in_the_source_and_edited_in_the_target_is_a_conflict(store: Path) -> None:
    with PFSaver(store) as saver:
        graph, target, source = forked(saver)
        graph.update_state(source, {"messages": [RemoveMessage(id="a-h1")]}, as_node="bot")
        graph.update_state(target, {"messages": [AIMessage(content="kept", id="a-h1")]}, as_node="bot")
        with pytest.raises(ThreadMergeConflict) as caught:
            saver.merge_thread(graph, target, source, as_node="bot")
        assert caught.value.conflicts[0]["kind"] == "delete/modify"
        saver.merge_thread(graph, target, source, as_node="bot", prefer="target")
        assert [m.content for m in values(graph, target)["messages"]] == ["hi", "kept"]
