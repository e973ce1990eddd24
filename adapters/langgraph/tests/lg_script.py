"""One LangGraph script run against several checkpointers: tools, interrupt/resume in a subgraph,
``Send`` fan-out, time travel. Offline: the model is LangChain's ``GenericFakeChatModel``."""

from __future__ import annotations

import operator
import sys
from typing import Annotated, Any

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langchain_core.tools import tool
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.types import Command, Send, interrupt
from typing_extensions import TypedDict

THREAD = {"configurable": {"thread_id": "script"}}


class State(TypedDict, total=False):
    messages: Annotated[list[AnyMessage], add_messages]
    results: Annotated[list[str], operator.add]
    approved: str
    items: list[str]


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def build(checkpointer: Any) -> Any:
    """The graph: agent <-> tools, then a subgraph that asks a human, then a Send fan-out."""
    model = GenericFakeChatModel(
        messages=iter(
            [
                AIMessage(content="", tool_calls=[{"name": "add", "args": {"a": 2, "b": 3}, "id": "call-1"}]),
                AIMessage(content="2 + 3 = 5"),
                AIMessage(content="spare answer"),
            ]
        )
    )

    def agent(state: State) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    def review(state: State) -> dict[str, Any]:
        answer = interrupt({"question": "approve the answer?", "last": state["messages"][-1].content})
        return {"approved": str(answer)}

    def finalize(state: State) -> dict[str, Any]:
        return {"items": ["a", "b", "c"] if state.get("approved") == "yes" else ["x"]}

    sub = StateGraph(State)
    sub.add_node("review", review)
    sub.add_node("finalize", finalize)
    sub.add_edge(START, "review")
    sub.add_edge("review", "finalize")
    sub.add_edge("finalize", END)

    def fan_out(state: State) -> list[Send]:
        return [Send("work", {"items": [item]}) for item in state.get("items", [])]

    def work(state: State) -> dict[str, Any]:
        return {"results": [f"done {state['items'][0]}"]}

    builder = StateGraph(State)
    builder.add_node("agent", agent)
    builder.add_node("tools", ToolNode([add]))
    builder.add_node("approval", sub.compile())
    builder.add_node("work", work)
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition, {"tools": "tools", END: "approval"})
    builder.add_edge("tools", "agent")
    builder.add_conditional_edges("approval", fan_out, ["work"])
    builder.add_edge("work", END)
    return builder.compile(checkpointer=checkpointer)


def phase1(graph: Any) -> Any:
    """Run until the human-in-the-loop interrupt inside the subgraph."""
    return graph.invoke({"messages": [HumanMessage(content="what is 2 + 3?", id="h-1")]}, THREAD)


def phase2(graph: Any) -> Any:
    """Resume, then time-travel: fork from the checkpoint before the fan-out with update_state, and
    resume from an earlier checkpoint."""
    out = graph.invoke(Command(resume="yes"), THREAD)
    history = list(graph.get_state_history(THREAD))
    before_fanout = next(s for s in history if s.next == ("work", "work", "work"))
    forked = graph.update_state(before_fanout.config, {"results": ["edited"]})
    graph.invoke(None, forked)
    at_interrupt = next(s for s in history if s.tasks and any(t.interrupts for t in s.tasks))
    graph.invoke(Command(resume="no"), at_interrupt.config)
    return out


def _msg(m: Any) -> dict[str, Any]:
    return {
        "type": m.type,
        "content": m.content,
        "tool_calls": [(c["name"], c["args"], c["id"]) for c in getattr(m, "tool_calls", []) or []],
        "tool_call_id": getattr(m, "tool_call_id", None),
    }


def _value(v: Any) -> Any:
    if isinstance(v, list):
        return [_value(x) for x in v]
    if hasattr(v, "type") and hasattr(v, "content"):
        return _msg(v)
    return v


def normalize(graph: Any, config: dict[str, Any] = THREAD) -> list[dict[str, Any]]:
    """``get_state_history`` (with subgraph state) with ids and timestamps replaced by positions."""
    history = list(graph.get_state_history(config))
    pos = {s.config["configurable"]["checkpoint_id"]: i for i, s in enumerate(history)}
    out = []
    for s in history:
        parent = s.parent_config["configurable"]["checkpoint_id"] if s.parent_config else None
        out.append(
            {
                "values": {k: _value(v) for k, v in sorted(s.values.items())},
                "next": list(s.next),
                "source": s.metadata.get("source"),
                "step": s.metadata.get("step"),
                "parent": pos.get(parent, "missing") if parent else None,
                "tasks": [(t.name, [i.value for i in t.interrupts], t.error is not None) for t in s.tasks],
            }
        )
    state = graph.get_state(config, subgraphs=True)
    out.append({"final_next": list(state.next), "final_values": {k: _value(v) for k, v in sorted(state.values.items())}})
    return out


def main() -> None:
    """``python lg_script.py <phase> <store dir | store URL> [worker dir]``: one phase with a PFSaver, as its own process."""
    from agentsnap_langgraph import PFSaver

    phase, where = sys.argv[1], sys.argv[2]
    saver = PFSaver.from_url(where, path=sys.argv[3]) if "://" in where else PFSaver(where)
    with saver:
        graph = build(saver)
        if phase == "1":
            phase1(graph)
        else:
            phase2(graph)


if __name__ == "__main__":
    main()
