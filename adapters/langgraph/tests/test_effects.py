"""The effects ledger around LangGraph ``ToolNode`` tools: restoring in the middle of a tool loop sends one email.

The agent's tool loop: the model asks for ``lookup_address`` (a pure tool), the run stops after the tools
node (the kit snapshots there, mid-loop), then the model asks for ``send_email`` (guarded by
``agentsnap_core.effects.wrap_tool``) and answers. The model is LangChain's ``GenericFakeChatModel`` fed by a
generator that decides from the conversation so far, so a restored agent asks for the same calls.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated, Any

import pytest
from agentsnap_core.effects import Effects
from agentsnap_core.testing.effects import EffectsCase, assert_effects
from agentsnap_langgraph import LangGraphThread, PFSaver, guard_tools
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langchain_core.tools import StructuredTool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.prebuilt import ToolNode, tools_condition
from typing_extensions import TypedDict


class State(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


def _model(seen: dict[str, Any]) -> GenericFakeChatModel:
    def decide() -> Iterator[AIMessage]:
        while True:
            tools_done = sum(1 for m in seen["messages"] if m.type == "tool")
            if tools_done == 0:
                call = {"name": "lookup_address", "args": {"name": "Bob"}, "id": "call-lookup"}
                yield AIMessage(content="", tool_calls=[call], id="ai-1")
            elif tools_done == 1:
                body = f"Hi Bob{seen['variant'] or ','} the report is ready"
                call = {"name": "send_email", "args": {"to": "bob@example.com", "body": body}, "id": "call-send"}
                yield AIMessage(content="", tool_calls=[call], id="ai-2")
            else:
                yield AIMessage(content="Sent.", id="ai-3")

    return GenericFakeChatModel(messages=decide())


def make_agent(checkpointer: Any) -> Callable[[Callable[..., Any], Effects], LangGraphThread]:
    def make(send: Callable[..., Any], fx: Effects) -> LangGraphThread:
        seen: dict[str, Any] = {"messages": [], "variant": ""}
        model = _model(seen)

        def lookup_address(name: str) -> str:
            """Look up an email address."""
            return f"{name.lower()}@example.com"

        def send_email(to: str, body: str) -> dict[str, Any]:
            """Send an email."""
            return send(to, body)

        tools = ToolNode([StructuredTool.from_function(lookup_address), StructuredTool.from_function(send_email)])
        guard_tools(tools, fx, names={"send_email"}, simulate=lambda to, body: {"status": "deferred"})

        def agent(state: State) -> dict[str, Any]:
            seen["messages"] = state["messages"]
            return {"messages": [model.invoke(state["messages"])]}

        builder = StateGraph(State)
        builder.add_node("agent", agent)
        builder.add_node("tools", tools)
        builder.add_edge(START, "agent")
        builder.add_conditional_edges("agent", tools_condition, {"tools": "tools", END: END})
        builder.add_edge("tools", "agent")
        thread = LangGraphThread(builder.compile(checkpointer=checkpointer()), {"configurable": {"thread_id": "mail"}})
        thread.seen = seen  # type: ignore[attr-defined]
        return thread

    return make


def step(thread: LangGraphThread, i: int, variant: str) -> None:
    if i == 0:
        thread.invoke({"messages": [HumanMessage(content="email Bob the report", id="h-1")]}, interrupt_after=["tools"])
    else:
        thread.seen["variant"] = variant  # type: ignore[attr-defined]
        thread.invoke(None)


@pytest.mark.parametrize(
    "checkpointer",
    [InMemorySaver, lambda: PFSaver(tempfile.mkdtemp(prefix="lg-effects-"))],
    ids=["inmemory", "pfsaver"],
)
def test_restore_mid_tool_loop_sends_one_email(checkpointer: Callable[[], Any], tmp_path: Path) -> None:
    assert_effects(EffectsCase("langgraph ToolNode", make_agent(checkpointer), step, send_step=1), tmp_path)


def test_the_loop_really_pauses_between_the_two_tool_calls(tmp_path: Path) -> None:
    """Guard for the test above: after step 0 the thread waits in the tool loop with one tool result."""
    from agentsnap_core import Repo

    sent: list[Any] = []
    fx = Effects(Repo.init(tmp_path / "repo"))
    thread = make_agent(InMemorySaver)(lambda to, body: sent.append((to, body)) or {"status": "sent"}, fx)
    with fx.step(0):
        step(thread, 0, "")
    state = thread.state()
    assert state.next == ("agent",)
    assert [m.type for m in state.values["messages"]] == ["human", "ai", "tool"]
    assert not sent
    with fx.step(1):
        step(thread, 1, "")
    assert sent == [("bob@example.com", "Hi Bob, the report is ready")]
    assert thread.state().values["messages"][-1].content == "Sent."


def test_guard_tools_refuses_unknown_names() -> None:
    from agentsnap_core.errors import InvalidInput

    def ping() -> str:
        """Ping."""
        return "pong"

    with pytest.raises(InvalidInput, match="no tool named nope"):
        guard_tools(ToolNode([StructuredTool.from_function(ping)]), None, names={"nope"})
