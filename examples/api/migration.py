"""Seed: agent-checkpoint's "Versioning - schema version tracking + migration hooks", against agentsnap.

Version 1.0 of an agent kept ``memory`` as a list of strings; 2.0 keeps dicts with a role and renames
``call_count`` to ``calls``. A registered migration upgrades old snapshots on load; a snapshot with no
path to the running version is refused with a message naming the missing step.
"""

from __future__ import annotations

import tempfile

import agentsnap_core


class MyAgent(agentsnap_core.Snapshottable):  # version 1.0, as it was shipped
    __snapshot_version__ = "1.0"

    def __init__(self) -> None:
        self.memory: list[str] = []
        self.call_count = 0


class MyAgentV2(agentsnap_core.Snapshottable):  # the next release of the same agent
    __snapshot_name__ = "MyAgent"  # migrations and snapshots know it by this name
    __snapshot_version__ = "2.0"

    def __init__(self) -> None:
        self.memory: list[dict[str, str]] = []
        self.calls = 0


def upgrade_1_to_2(state: dict) -> dict:
    state["memory"] = [{"role": "user", "text": m} for m in state["memory"]]
    state["calls"] = state.pop("call_count")
    return state


def main(store: str) -> dict[str, object]:
    with agentsnap_core.Client(store) as client:
        old = MyAgent()
        old.memory = ["hello", "world"]
        old.call_count = 2
        v1 = client.save(old, agent_id="my-agent", message="saved by 1.0")

        try:
            client.restore(v1, into=MyAgentV2())
        except agentsnap_core.MigrationError as exc:
            refused = str(exc)  # no migration registered yet: refused, nothing loaded
        agentsnap_core.register_migration("MyAgent", "1.0", upgrade_1_to_2)
        new = client.restore(v1, into=MyAgentV2())
        assert new.memory == [{"role": "user", "text": "hello"}, {"role": "user", "text": "world"}] and new.calls == 2
    return {"refused": refused, "agent": new}


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as d:
        out = main(d)
        print(out["refused"])
        print(vars(out["agent"]))
