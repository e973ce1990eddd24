"""LangGraph-backed agents for agentsnap's conformance kit (importable by the kit's fresh process)."""

from __future__ import annotations

import operator
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Annotated, Any

from agentsnap_core.testing import AdapterCase
from agentsnap_langgraph import LangGraphThread, PFSaver
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages
from typing_extensions import TypedDict


class State(TypedDict, total=False):
    messages: Annotated[list[AnyMessage], add_messages]
    total: Annotated[int, operator.add]


def one_node_graph(checkpointer: Any, state: type, node: Any) -> Any:
    """A graph of one node, ``node`` (named after its function), run on every input: the shape most tests need."""
    builder = StateGraph(state)
    builder.add_node(node.__name__, node)
    builder.add_edge(START, node.__name__)
    return builder.compile(checkpointer=checkpointer)


def agentsnap_cli(store: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The ``agentsnap`` command of this environment run on ``store`` (what a user types), its output captured."""
    cli = Path(sys.executable).with_name("agentsnap")
    return subprocess.run([str(cli), "-C", str(store), *args], capture_output=True, text=True, timeout=300)


def cfg(thread: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread}}


def _graph(checkpointer: Any) -> Any:
    def echo(state: State) -> dict[str, Any]:
        last = state["messages"][-1]
        return {"messages": [AIMessage(content=f"echo: {last.content}", id=f"a-{last.id}")], "total": len(last.content)}

    return one_node_graph(checkpointer, State, echo)


def _step(thread: LangGraphThread, i: int) -> None:
    thread.invoke({"messages": [HumanMessage(content=f"message {i}" + "!" * i, id=f"h-{i}")]})


def _observe(thread: LangGraphThread) -> dict[str, Any]:
    values = thread.state().values
    return {
        "messages": [[m.type, m.content, m.id] for m in values.get("messages", [])],
        "total": values.get("total", 0),
    }


def memory_case() -> AdapterCase:
    """A graph on LangGraph's InMemorySaver: agentsnap carries the thread between savers and processes."""
    return AdapterCase(
        name="langgraph StateGraph (InMemorySaver)",
        make=lambda: LangGraphThread(_graph(InMemorySaver()), {"configurable": {"thread_id": "kit"}}),
        step=_step,
        observe=_observe,
        factory="lg_kit:memory_case",
    )


def pfsaver_case() -> AdapterCase:
    """The same graph with a PFSaver (its own store per agent)."""

    def make() -> LangGraphThread:
        d = tempfile.mkdtemp(prefix="lg-kit-")
        return LangGraphThread(_graph(PFSaver(d)), {"configurable": {"thread_id": "kit"}})

    return AdapterCase(
        name="langgraph StateGraph (PFSaver)",
        make=make,
        step=_step,
        observe=_observe,
        factory="lg_kit:pfsaver_case",
    )
