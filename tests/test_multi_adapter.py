"""One snapshot holding objects of several adapters, restored together into fresh objects."""

from __future__ import annotations

import json
import operator
from pathlib import Path
from typing import Annotated, TypedDict

from agentsnap_core import Repo
from agentsnap_core.testing.reference import CounterAgent
from agentsnap_core.testing.servers import need_module


class S(TypedDict):
    steps: Annotated[list[str], operator.add]


def _graph(saver):  # a real StateGraph with a reducer channel
    from langgraph.graph import END, START, StateGraph

    def work(state: S) -> dict:
        return {"steps": [f"step{len(state['steps'])}"]}

    g = StateGraph(S)
    g.add_node("work", work)
    g.add_edge(START, "work")
    g.add_edge("work", END)
    return g.compile(checkpointer=saver)


def _transcript(path: Path, n: int) -> None:
    lines = []
    parent = None
    for i in range(n):
        uid = f"u{i}"
        lines.append(json.dumps({"type": "user" if i % 2 == 0 else "assistant", "uuid": uid, "parentUuid": parent, "sessionId": "s1", "message": {"content": f"m{i}"}}))
        parent = uid
    path.write_text("\n".join(lines) + "\n")


def test_langgraph_claude_and_state_dict_objects_in_one_snapshot(tmp_path: Path) -> None:
    need_module("langgraph")
    lg = need_module("agentsnap_langgraph")
    cc = need_module("agentsnap_claude_code.session")
    from langgraph.checkpoint.memory import InMemorySaver

    repo = Repo.init(tmp_path / "work")
    graph = _graph(InMemorySaver())
    thread = lg.LangGraphThread(graph, {"configurable": {"thread_id": "t1"}})
    thread.invoke({"steps": []})
    thread.invoke({"steps": []})
    transcript = tmp_path / "session.jsonl"
    _transcript(transcript, 4)
    session = cc.ClaudeSession(transcript)
    counter = CounterAgent()
    counter.step(0)

    snap = repo.capture_many({"graph": thread, "claude": session, "counter": counter}, "three adapters")
    assert {k.split("@")[1] for k in snap.layers if "@" in k} == {"graph", "claude", "counter"}
    before = (thread.state().values, transcript.read_text(), json.loads(json.dumps(counter.state_dict())))

    thread.invoke({"steps": []})
    _transcript(transcript, 9)
    counter.step(5)
    assert (thread.state().values, transcript.read_text(), counter.state_dict()) != before

    fresh_thread = lg.LangGraphThread(_graph(InMemorySaver()), {"configurable": {"thread_id": "t1"}})
    fresh_counter = CounterAgent()
    repo.restore_many({"graph": fresh_thread, "claude": session, "counter": fresh_counter}, snap.id)
    assert fresh_thread.state().values == before[0]
    assert transcript.read_text() == before[1]
    assert fresh_counter.state_dict() == before[2]
    assert repo.verify()["ok"]
