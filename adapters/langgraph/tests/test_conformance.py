"""agentsnap's adapter conformance kit on LangGraph threads."""

from __future__ import annotations

from pathlib import Path

import lg_kit  # noqa: E402
import pytest
from agentsnap_core import Repo
from agentsnap_core.testing import assert_conformance
from agentsnap_langgraph import LangGraphThread  # noqa: E402


@pytest.mark.parametrize("factory", [lg_kit.memory_case, lg_kit.pfsaver_case], ids=["inmemory", "pfsaver"])
def test_agentsnap_conformance_kit(factory: object, tmp_path: Path) -> None:
    assert_conformance(factory(), tmp_path)  # type: ignore[operator]


def test_trace_layer_lists_the_messages_channel(tmp_path: Path) -> None:
    case = lg_kit.memory_case()
    thread = case.make()
    for i in range(2):
        case.step(thread, i)
    repo = Repo.init(tmp_path / "repo")
    snap = repo.capture(thread, "two turns")
    trace = repo.read_layer(snap, "trace")
    assert [(m["role"], m["content"]) for m in trace] == [
        ("user", "message 0"),
        ("assistant", "echo: message 0"),
        ("user", "message 1!"),
        ("assistant", "echo: message 1!"),
    ]


def test_thread_without_checkpointer_is_refused() -> None:
    from agentsnap_core.errors import InvalidInput

    graph = lg_kit._graph(None)
    with pytest.raises(InvalidInput, match="checkpointer"):
        LangGraphThread(graph, {"configurable": {"thread_id": "t"}})
