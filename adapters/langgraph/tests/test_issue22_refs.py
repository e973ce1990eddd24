"""One ref per subgraph *node*, not per subgraph call: refs stay bounded on long threads (issue 22, item 9)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from agentsnap_core import Repo
from agentsnap_langgraph import PFSaver
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages
from typing_extensions import TypedDict


class Chat(TypedDict, total=False):
    messages: Annotated[list[AnyMessage], add_messages]


def sub_graph(checkpointer: Any) -> Any:
    def inner(state: Chat) -> dict[str, Any]:
        return {"messages": [AIMessage(content="inner", id=f"i{len(state['messages'])}")]}

    sub = StateGraph(Chat)
    sub.add_node("inner", inner)
    sub.add_edge(START, "inner")
    root = StateGraph(Chat)
    root.add_node("sub", sub.compile())
    root.add_edge(START, "sub")
    return root.compile(checkpointer=checkpointer)


def test_refs_do_not_grow_with_subgraph_calls(store: Path) -> None:
    turns = 20
    with PFSaver(store) as saver:
        graph = sub_graph(saver)
        cfg = {"configurable": {"thread_id": "long"}}
        for i in range(turns):
            graph.invoke({"messages": [HumanMessage(content=f"q{i}", id=f"h{i}")]}, cfg)
        namespaces = saver.index.namespaces("long")
        assert len(namespaces) == turns + 1  # LangGraph makes a namespace per call
        # every subgraph checkpoint still loads through LangGraph
        for ns in namespaces:
            assert list(saver.list({"configurable": {"thread_id": "long", "checkpoint_ns": ns}}))
    repo = Repo.open(store)
    refs = [n for n in repo.refs.list_refs() if "langgraph" in n]
    assert len(refs) == 2, refs  # the thread and its one subgraph node (was one per call)
    report = repo.verify()
    assert report["ok"], report
    # every subgraph call's snapshots stay reachable from the refs through parents (not only through the reflog)
    with PFSaver(store) as saver:
        snaps = {saver.index.snapshot_of("long", ns, r.config["configurable"]["checkpoint_id"])
                 for ns in saver.index.namespaces("long")
                 for r in saver.list({"configurable": {"thread_id": "long", "checkpoint_ns": ns}})}
    assert snaps <= _reachable_from_refs(repo)


def _reachable_from_refs(repo: Repo) -> set[str]:
    seen: set[str] = set()
    stack = [oid for name, oid in repo.refs.list_refs().items() if "langgraph" in name]
    while stack:
        oid = stack.pop()
        if oid in seen:
            continue
        seen.add(oid)
        stack.extend(repo.manifest(oid)["parents"])
    return seen
