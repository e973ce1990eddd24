"""Seed: snapstate-sdk's README (pypi.org/project/snapstate-sdk), rewritten against agentsnap.

A workflow is saved step by step by a researcher agent, resumed from its latest snapshot, then handed
off to a writer agent. The writer's snapshot keeps the parent chain (lineage) back to the researcher's
steps; the researcher's own session is untouched. The async client does the same from asyncio code.
"""

from __future__ import annotations

import asyncio
import tempfile

import agentsnap_core


class Worker(agentsnap_core.Snapshottable):
    def __init__(self) -> None:
        self.sources: list[str] = []
        self.progress = 0.0
        self.draft = ""


def main(store: str) -> dict[str, object]:
    with agentsnap_core.Client(store) as client:
        agent = Worker()
        for step, src in enumerate(["arxiv.org/123", "arxiv.org/456"], start=1):
            agent.sources.append(src)
            agent.progress = step * 0.25
            client.save(agent, agent_id="researcher", session_id="wf_research_001", message=f"step {step}")
        latest = client.latest("researcher", "wf_research_001")  # resume
        assert latest is not None
        resumed = client.restore(latest.id, into=Worker())
        assert resumed.progress == 0.5
        handed = client.handoff(latest.id, "writer", message="hand off to the writer")
        writer = client.restore(handed, into=Worker())
        writer.draft = "Two sources say..."
        final = client.save(writer, agent_id="writer", session_id="wf_research_001", message="draft written")
        chain = client.lineage(final)
        assert [c.agent_id for c in chain] == ["writer", "writer", "researcher", "researcher"]
        assert client.metadata(handed)["handoff_from"] == latest.id
    return {"lineage": chain, "writer": writer}


async def main_async(store: str) -> list[str]:
    async with agentsnap_core.AsyncClient(store) as client:
        agent = Worker()
        agent.sources.append("arxiv.org/789")
        first = await client.save(agent, agent_id="researcher", session_id="wf_async")
        handed = await client.handoff(first, "writer")
        restored = await client.restore(handed, into=Worker())
        assert restored.sources == ["arxiv.org/789"]
        return [c.agent_id for c in await client.lineage(handed)]


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as d:
        out = main(d)
        print(" <- ".join(f"{c.agent_id}:{c.message}" for c in out["lineage"]))
        print(asyncio.run(main_async(d)))
