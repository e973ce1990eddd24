"""Seed: AgentStateProtocol's README (pip install agentstateprotocol), rewritten against agentsnap.

A research agent checkpoints each reasoning step (7 of them) with metadata; the timeline lists them
newest first, and "rolling back 3 steps" restores the state the agent had three steps earlier. The
same snapshots are visible to the CLI: ``agentsnap timeline --agent research-agent``.
"""

from __future__ import annotations

import tempfile

import agentsnap_core

STEPS = [
    ("parse_input", {"stage": "parse"}, 0.92),
    ("search", {"stage": "search", "results": ("Devocion", "La Cabra")}, 0.87),
    ("filter", {"stage": "filter", "results": ("La Cabra",)}, 0.81),
    ("reviews", {"stage": "reviews", "stars": {"La Cabra": 4.7}}, 0.84),
    ("infer_preferences", {"stage": "prefs", "reasoning": "quiet places with Wi-Fi"}, 0.88),
    ("rank", {"stage": "rank", "ranking": ["La Cabra"]}, 0.9),
    ("answer", {"stage": "answer", "answer": "La Cabra"}, 0.95),
]


class ResearchAgent(agentsnap_core.Snapshottable):
    def __init__(self) -> None:
        self.task = "Find best coffee shops in NYC"
        self.state: dict[str, object] = {}
        self.step = 0


def main(store: str) -> dict[str, object]:
    agent = ResearchAgent()
    with agentsnap_core.Client(store) as client:
        for logic_step, state, confidence in STEPS:
            agent.state = state
            agent.step += 1
            client.save(agent, agent_id="research-agent", session_id="nyc-coffee", message=logic_step,
                        metadata={"confidence": confidence, "logic_step": logic_step})
        timeline = client.timeline(agent_id="research-agent", session_id="nyc-coffee")
        assert [t.message for t in timeline] == [s[0] for s in reversed(STEPS)]
        back3 = client.restore(timeline[3].id, into=ResearchAgent())  # rollback(steps=3)
        assert back3.step == 4 and back3.state == {"stage": "reviews", "stars": {"La Cabra": 4.7}}
        return {"timeline": timeline, "rolled_back": back3}


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as d:
        out = main(d)
        for item in out["timeline"]:
            print(item.id[:12], item.message, item.metadata["confidence"])
