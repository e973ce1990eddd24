"""Seed: "Time-To-Live (TTL) for durable agent sessions" (agent-framework durable agents docs), against agentsnap.

Idle session state should not pile up: each save carries a TTL; once it passes, the snapshot leaves
every query (timeline, exists, metadata), restore refuses it, and ``gc`` reclaims its layers while
``verify`` stays clean. A fake clock stands in for waiting.
"""

from __future__ import annotations

import tempfile

import agentsnap_core
from agentsnap_core.retention import SnapshotGone


class Clock:
    def __init__(self) -> None:
        import time

        self.now = time.time()

    def __call__(self) -> float:
        return self.now


class Session(agentsnap_core.Snapshottable):
    def __init__(self) -> None:
        self.history: list[str] = []


def main(store: str) -> dict[str, object]:
    clock = Clock()
    with agentsnap_core.Client(store, clock=clock) as client:
        s = Session()
        s.history.append("user: hi")
        short = client.save(s, agent_id="support-bot", session_id="chat-42", ttl=60)
        s.history.append("bot: hello!")
        kept = client.save(s, agent_id="support-bot", session_id="chat-42", ttl=3600)
        clock.now += 120  # two minutes idle: the first snapshot's TTL has passed
        assert [t.id for t in client.timeline("support-bot")] == [kept]
        assert not client.exists(short) and client.exists(kept)
        try:
            client.restore(short, into=Session())
        except SnapshotGone as exc:
            refused = str(exc)
        reclaimed = client.gc(grace_seconds=0)
        assert client.verify()["ok"]
        assert client.restore(kept, into=Session()).history == ["user: hi", "bot: hello!"]
    return {"refused": refused, "gc": reclaimed, "short": short, "kept": kept}


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as d:
        out = main(d)
        print(out["refused"])
        print("gc:", out["gc"])
