"""fork_thread behaves like LangGraph's replay of the same checkpoint, subgraphs included (issue 22, item 1)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agentsnap_langgraph import PFSaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt
from typing_extensions import TypedDict


class Flow(TypedDict, total=False):
    request: str
    approved: str
    done: str


def approval_graph(checkpointer: Any) -> Any:
    """prep -> sub (a subgraph asking a human to approve) -> finish."""

    def ask(state: Flow) -> dict[str, Any]:
        return {"approved": str(interrupt(f"approve {state['request']}?"))}

    def act(state: Flow) -> dict[str, Any]:
        return {"done": f"{state['request']} ({state['approved']})"}

    sub = StateGraph(Flow)
    sub.add_node("ask", ask)
    sub.add_node("act", act)
    sub.add_edge(START, "ask")
    sub.add_edge("ask", "act")
    sub.add_edge("act", END)

    def prep(state: Flow) -> dict[str, Any]:
        return {"request": state["request"].upper()}

    root = StateGraph(Flow)
    root.add_node("prep", prep)
    root.add_node("sub", sub.compile())
    root.add_edge(START, "prep")
    root.add_edge("prep", "sub")
    root.add_edge("sub", END)
    return root.compile(checkpointer=checkpointer)


def test_fork_before_a_subgraph_stops_at_its_interrupt_like_replay(store: Path) -> None:
    with PFSaver(store) as saver:
        graph = approval_graph(saver)
        main = {"configurable": {"thread_id": "main"}}
        first = graph.invoke({"request": "deploy"}, main)
        assert "__interrupt__" in first
        graph.invoke(Command(resume="yes"), main)
        assert graph.get_state(main).values["done"] == "DEPLOY (yes)"
        before_sub = next(s for s in graph.get_state_history(main) if s.next == ("sub",))

        fork = saver.fork_thread(before_sub.config, 1)[0]
        out = graph.invoke(None, fork)
        assert "__interrupt__" in out, f"the fork reused the original thread's answer: {out}"
        assert "done" not in graph.get_state(fork).values
        graph.invoke(Command(resume="no"), fork)
        assert graph.get_state(fork).values["done"] == "DEPLOY (no)"
        assert graph.get_state(main).values["done"] == "DEPLOY (yes)"
        # as LangGraph's own replay of that checkpoint, which asks the human again
        assert "__interrupt__" in graph.invoke(None, before_sub.config)


def test_fork_after_a_subgraph_interrupt_keeps_the_subgraph_state(store: Path) -> None:
    with PFSaver(store) as saver:
        graph = approval_graph(saver)
        main = {"configurable": {"thread_id": "main"}}
        graph.invoke({"request": "ship"}, main)  # waits in the subgraph
        fork = saver.fork_thread(main, 1)[0]
        graph.invoke(Command(resume="later"), fork)
        assert graph.get_state(fork).values["done"] == "SHIP (later)"
        assert graph.get_state(main).next == ("sub",)
