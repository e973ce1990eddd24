"""Seed: agent-checkpoint's README (github.com/darshjme/agent-checkpoint), rewritten against agentsnap.

An agent with memory and counters; a tool call fails half-way, ``agentsnap_core.rollback`` puts the agent
back as it was before the call and the error still reaches the caller. The state also goes to a store
and comes back in a fresh instance, and ``clone()`` copies the agent through the same state round-trip.

Run it anywhere: ``python examples/api/rollback_agent.py`` (it makes a store in a temporary directory).
"""

from __future__ import annotations

import tempfile

import agentsnap_core


class ToolError(RuntimeError):
    pass


class MyAgent(agentsnap_core.Snapshottable):
    def __init__(self) -> None:
        self.memory: list[str] = []
        self.config: dict[str, object] = {"model": "offline"}
        self.call_count = 0
        self.tools_used: set[str] = set()
        self._llm = "a client object: private attributes are never captured"

    def reply(self, msg: str) -> str:
        self.memory.append(msg)
        self.call_count += 1
        return f"Reply #{self.call_count}"

    def search(self, query: str) -> str:
        self.memory.append(f"searching {query}")
        self.call_count += 1
        self.tools_used.add("search")
        raise ToolError("search API timed out")


def main(store: str) -> dict[str, object]:
    agent = MyAgent()
    agent.reply("hello")
    agent.reply("world")

    try:
        with agentsnap_core.rollback(agent):
            agent.search("coffee")  # mutates memory and counters, then fails
    except ToolError as exc:
        error = str(exc)
    assert agent.memory == ["hello", "world"] and agent.call_count == 2 and agent.tools_used == set()

    with agentsnap_core.Client(store) as client:
        snap = client.save(agent, agent_id="my-agent", message="after two replies")
        fresh = client.restore(snap, into=MyAgent())
    twin = agent.clone()
    twin.reply("only the twin hears this")
    assert fresh.memory == ["hello", "world"] and fresh.call_count == 2
    assert agent.call_count == 2 and twin.call_count == 3
    return {"agent": agent, "fresh": fresh, "twin": twin, "error": error, "snapshot": snap}


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as d:
        out = main(d)
        print(f"rolled back after: {out['error']}; memory={out['agent'].memory} calls={out['agent'].call_count}")
