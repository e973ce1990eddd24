"""Object identity through a snapshot: what two attributes share stays shared, what points back stays a cycle.

Before: every reference was written as a copy, so a restore (and ``clone()``) gave two objects where the agent had
one. A planner holding the agent's memory, or ``self.context = self.history``, then stopped seeing what the agent
learnt after the restore, in silence; a sub-agent pointing back at its parent (``Planner(agent=self)``) could not be
saved at all ("reference cycle"). pickle and ``copy.deepcopy`` keep identity; so does agentsnap now.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import agentsnap_core
import pytest
from agentsnap_core import Client, Snapshottable
from agentsnap_core.errors import AgentSnapError
from agentsnap_core.format.snapshottable import decode_value, encode_value


class Memory(Snapshottable):
    def __init__(self) -> None:
        self.facts: list[str] = []


class Planner(Snapshottable):
    def __init__(self, agent: Any = None, memory: Memory | None = None) -> None:
        self.agent = agent
        self.memory = memory
        self.steps: list[str] = []


class Agent(Snapshottable):
    def __init__(self) -> None:
        self.memory = Memory()
        self.planner = Planner()  # wired to the memory at run time, not by __init__
        self.history: list[str] = []
        self.context: Any = None


@dataclasses.dataclass(eq=False)
class Node:
    peers: list[Any]


@pytest.fixture
def client(tmp_path: Path) -> Client:
    with Client(tmp_path) as c:
        yield c


def _wired() -> Agent:
    agent = Agent()
    agent.planner.memory = agent.memory
    agent.context = agent.history
    agent.memory.facts.append("paris")
    agent.history.append("hi")
    return agent


def test_what_two_attributes_share_is_shared_after_a_restore(client: Client) -> None:
    """Before: ``back.planner.memory is back.memory`` was False, so the planner kept ['paris'] after the agent learnt
    'rome'; ``back.context`` stayed ['hi'] after ``back.history`` grew."""
    back = client.restore(client.save(_wired(), agent_id="bot"))
    assert back.planner.memory is back.memory and back.context is back.history
    back.memory.facts.append("rome")
    back.history.append("again")
    assert back.planner.memory.facts == ["paris", "rome"] and back.context == ["hi", "again"]


def test_clone_keeps_what_is_shared() -> None:
    twin = _wired().clone()
    assert twin.planner.memory is twin.memory and twin.context is twin.history


def test_a_sub_agent_pointing_back_at_its_parent_is_saved_and_points_at_the_restored_parent(client: Client) -> None:
    """Before: refused ("its state holds a reference cycle")."""
    agent = Agent()
    agent.planner.agent = agent
    agent.planner.steps.append("search")
    table: dict[str, Any] = {"rows": []}
    table["rows"].append(table)  # a dict that holds itself, through a list
    agent.context = table
    back = client.restore(client.save(agent, agent_id="bot"))
    assert back.planner.agent is back and back.planner.steps == ["search"]
    assert back.context["rows"][0] is back.context


def test_objects_in_a_set_keep_their_identity_whatever_the_sets_order(client: Client) -> None:
    """A set is written sorted by its items' bytes, not in the order it was walked: the objects in it are numbered in
    the written order, so references to them from elsewhere still find them."""
    agent = Agent()
    tools = [Planner(memory=Memory()) for _ in range(6)]
    for i, tool in enumerate(tools):
        tool.steps.append(f"tool {i}")
        tool.memory.facts.append("x" * (6 - i))  # (sorted order differs from creation order)
    agent.context = {"tools": set(tools), "first": tools[0], "last": tools[-1], "mem": tools[3].memory}
    back = client.restore(client.save(agent, agent_id="bot")).context
    assert back["first"] in back["tools"] and back["last"] in back["tools"]
    assert back["first"].steps == ["tool 0"] and back["last"].steps == ["tool 5"]
    assert any(t.memory is back["mem"] for t in back["tools"])
    assert sorted(t.steps[0] for t in back["tools"]) == [f"tool {i}" for i in range(6)]


def test_rollback_keeps_the_objects_the_program_holds_and_what_they_share() -> None:
    """Loading in place (the objects a tool already holds get the saved state back) and sharing agree: the memory
    object a closure holds is the one rolled back, and the planner still shares it."""
    agent = _wired()
    held = agent.memory  # (a tool closure's reference)
    with pytest.raises(ValueError), agentsnap_core.rollback(agent):
        agent.memory.facts.append("half done")
        agent.planner.memory = Memory()
        raise ValueError("tool failed")
    assert agent.memory is held and held.facts == ["paris"]
    assert agent.planner.memory is agent.memory


def test_a_state_that_shares_nothing_is_written_as_before() -> None:
    """Equal but distinct values stay plain data (the same bytes as before: unchanged state still dedups)."""
    assert encode_value({"a": [1], "b": [1]}) == {"a": [1], "b": [1]}
    shared = [1]
    doc = encode_value({"a": shared, "b": shared})
    assert doc == {"a": [1], "b": {"$t": "ref", "v": 1}}  # (object 0 is the dict, 1 the list)
    back = decode_value(doc)
    assert back["a"] is back["b"]


def test_a_cycle_through_a_dataclass_is_one_clear_error_and_nothing_is_saved(client: Client) -> None:
    """A dataclass is rebuilt from its fields (``__init__`` runs), so a field cannot hold the object itself: refused
    at save, naming both places; a cycle through a list a dataclass holds comes back."""
    agent = Agent()
    node = Node([])
    node.peers.append(node)
    agent.context = node
    with pytest.raises(AgentSnapError, match=r"Agent\.context\.peers\[0\]: it is Agent\.context again"):
        client.save(agent, agent_id="bot")
    assert client.timeline("bot") == []
    ring: list[Any] = []
    ring.append(Node(ring))
    agent.context = ring
    back = client.restore(client.save(agent, agent_id="bot"))
    assert back.context[0].peers is back.context


def test_a_damaged_reference_is_one_clear_error() -> None:
    with pytest.raises(AgentSnapError, match="refers to object 7, which the snapshot does not hold"):
        decode_value([{"$t": "ref", "v": 7}])


class Notebook(Snapshottable):
    def __init__(self) -> None:
        self.notes: list[Any] = []
        self.memory = Memory()
        self.planner = Planner()
        self.count = 0


def test_a_merge_never_mixes_two_sides_of_a_state_that_shares_objects(tmp_path: Path) -> None:
    """Each side adds one list to ``notes``, before the shared memory: both sides' planners then point at object 3,
    equal, so the key-wise merge kept that reference, but the merged notes hold both lists and object 3 is one of
    them: the merged agent's ``planner.memory`` was ``[2]``, and the merge said "merged". Now changes on both sides to
    a state that shares objects are one conflict on the whole layer (resolved by --ours / --theirs, each side whole
    and consistent); a change on one side merges as before."""
    from agentsnap_core import Repo
    from agentsnap_core.format.snapshottable import dump_state, load_state
    from agentsnap_core.operations import merge as merge_mod

    def state(notes: Any, count: int) -> dict[str, Any]:
        agent = Notebook()
        agent.planner.memory = agent.memory
        agent.memory.facts.append("paris")
        agent.notes, agent.count = notes, count
        return {"state": dump_state(agent)}

    def load(repo: Repo, snap: str) -> Notebook:
        agent = Notebook.__new__(Notebook)
        load_state(agent, repo.read_layer(repo.get(snap), "state"))
        return agent

    for strategy in ("auto", "ours", "theirs"):
        repo = Repo.init(tmp_path / f"w-{strategy}")
        b = repo.snapshot("base", layers=state({}, 0), capture_world=False)
        repo.snapshot("ours", layers=state({"x": [1]}, 0), capture_world=False)
        repo.snapshot("theirs", layers=state({"y": [2]}, 1), capture_world=False, parents=[b.id], ref="refs/heads/b")
        res = merge_mod.merge(repo, "b", strategy=strategy)
        if strategy == "auto":
            assert res.status == "conflict"
            assert [(c["layer"], c["path"]) for c in res.conflicts] == [("state", "(whole layer)")]
            assert "shares objects" in res.conflicts[0]["message"]
            continue
        merged = load(repo, res.snapshot)
        assert merged.planner.memory is merged.memory and merged.memory.facts == ["paris"]
        assert (merged.notes, merged.count) == (({"x": [1]}, 0) if strategy == "ours" else ({"y": [2]}, 1))
    repo = Repo.init(tmp_path / "one-side")
    b = repo.snapshot("base", layers=state({}, 0), capture_world=False)
    repo.snapshot("theirs", layers=state({"y": [2]}, 1), capture_world=False, parents=[b.id], ref="refs/heads/b")
    res = merge_mod.merge(repo, "b")
    merged = load(repo, res.snapshot)
    assert merged.planner.memory is merged.memory and merged.notes == {"y": [2]}


class Tool(Snapshottable):
    def __init__(self) -> None:
        self.uses = 0
        self._client = object()  # (private: a connection the program made; never in a snapshot)


class Worker(Snapshottable):
    def __init__(self) -> None:
        self.tool = Tool()
        self.loaded = 0

    def load_state_dict(self, state: dict[str, Any]) -> None:  # (an override that post-processes, as users write)
        super().load_state_dict(state)
        self.loaded += 1


def test_an_agent_overriding_load_state_dict_still_gets_its_objects_back_in_place() -> None:
    """Passes on 93f7fed (in-place loading lived in Snapshottable.load_state_dict, which the override calls); failed
    on the first version of in-place decoding, which replaced the tool: its private client was gone and a
    reference the program held kept the failed block's count."""
    worker = Worker()
    tool, client = worker.tool, worker.tool._client
    with pytest.raises(ValueError), agentsnap_core.rollback(worker):
        worker.tool.uses = 5
        raise ValueError("step failed")
    assert worker.tool is tool and tool.uses == 0 and tool._client is client
