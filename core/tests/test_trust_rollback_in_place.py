"""After a rollback (or a restore into the live agent) the lists, dicts and sets the agent holds are the same objects
the program holds, with the saved contents.

Reported (tried as a user): a UI kept ``view = agent.history`` to show the conversation; a tool call failed inside
``with rollback(agent)``. The agent's ``history`` was right again, but it was a new list: ``view`` - and any other
holder of the old one (a planner given ``agent.history``, a private ``_memory_view``) - still showed the failed
block's messages, in silence. Nested Snapshottable objects were already loaded in place (test_trust_identity.py); the
containers an agent's attributes hold now are too (a dict's values by key, recursively), each live container taking
at most one saved one, so what the snapshot shares stays shared. A class-level default (``history = []`` in the
class body) is never written into: only the instance's own attributes are loaded in place.
"""

from __future__ import annotations

from collections import deque
from typing import Any, ClassVar

import pytest
from agentsnap_core import Client, Snapshottable, register_migration, rollback


class Memory(Snapshottable):
    def __init__(self) -> None:
        self.facts: list[str] = []


class Agent(Snapshottable):
    def __init__(self) -> None:
        self.history: list[Any] = []
        self.notes: dict[str, Any] = {"k": [1]}
        self.tags: set[str] = set()
        self.window: deque[int] = deque(maxlen=3)
        self.memory = Memory()


def _fail(agent: Agent) -> None:
    with pytest.raises(ValueError, match="tool failed"), rollback(agent):
        agent.history.append("bad")
        agent.notes["k"].append(2)
        agent.notes["new"] = 1
        agent.tags.add("x")
        agent.window.append(9)
        agent.memory.facts.append("wrong")
        raise ValueError("tool failed")


def test_a_list_the_program_holds_is_the_agents_history_again_after_a_rollback() -> None:
    a = Agent()
    a.history.append("ok")
    a.window.append(1)
    view, notes, inner, tags, window, facts = a.history, a.notes, a.notes["k"], a.tags, a.window, a.memory.facts
    _fail(a)
    assert a.history is view and view == ["ok"]
    assert a.notes is notes and notes == {"k": [1]} and notes["k"] is inner and inner == [1]
    assert a.tags is tags and tags == set()
    assert a.window is window and list(window) == [1] and window.maxlen == 3
    assert a.memory.facts is facts and facts == []


def test_a_restore_into_the_live_agent_refills_what_it_holds(tmp_path: Any) -> None:
    a = Agent()
    a.history.append("saved")
    with Client(tmp_path / "store") as client:
        sid = client.save(a, agent_id="a")
        view = a.history
        a.history.extend(["later", "turns"])
        client.restore(sid, into=a)
    assert a.history is view and view == ["saved"]


def test_what_the_snapshot_shares_stays_shared_and_no_live_container_takes_two() -> None:
    a = Agent()
    a.context = a.history  # saved shared
    a.other = [0]
    view = a.history
    with pytest.raises(ValueError), rollback(a):
        a.context = ["replaced"]  # the live agent no longer shares them...
        a.other = view  # ...and holds the history list twice, under another name
        raise ValueError
    assert a.context is a.history and a.history is view and view == []
    assert a.other is not view and a.other == [0]  # (the saved `other` list cannot also be `view`)


class Defaults(Snapshottable):
    __snapshot_fields__: ClassVar[tuple[str, ...]] = ("log",)
    log: ClassVar[list[str]] = []  # a class-level default every instance shares


def test_a_class_level_default_is_never_written_into() -> None:
    saver = Defaults()
    saver.log = ["mine"]  # (an instance attribute now)
    from agentsnap_core.format.snapshottable import dump_state, load_state

    layer = dump_state(saver)
    fresh = Defaults()  # its `log` is the class's list
    load_state(fresh, layer)
    assert fresh.log == ["mine"] and Defaults.log == [] and fresh.log is not Defaults.log


class Versioned(Snapshottable):
    __snapshot_version__ = "2.0"

    def __init__(self) -> None:
        self.history: list[str] = []


def _upper(state: dict[str, Any]) -> dict[str, Any]:
    state["history"] = [m.upper() for m in state["history"]]
    return state


def test_a_migration_reads_the_saved_contents_not_the_live_ones(tmp_path: Any) -> None:
    register_migration("Versioned", "1.0", _upper, to="2.0")  # (here: other tests clear the registry)
    old = Versioned()
    old.history.append("saved")
    Versioned.__snapshot_version__ = "1.0"
    try:
        with Client(tmp_path / "store") as client:
            sid = client.save(old, agent_id="v")
    finally:
        Versioned.__snapshot_version__ = "2.0"
    live = Versioned()
    live.history.append("live, unsaved")
    with Client(tmp_path / "store") as client:
        client.restore(sid, into=live)
    assert live.history == ["SAVED"]


def test_a_restore_that_fails_halfway_leaves_the_live_containers_as_they_were() -> None:
    from agentsnap_core.errors import AgentSnapError
    from agentsnap_core.format.snapshottable import dump_state, load_state

    a = Agent()
    a.history.append("saved")
    layer = dump_state(a)
    layer["state"]["notes"] = {"$t": "no-such-tag", "v": 1}  # (a damaged snapshot: decoding stops there)
    live = Agent()
    live.history.append("live")
    view = live.history
    with pytest.raises(AgentSnapError, match="unknown value tag"):
        load_state(live, layer)
    assert live.history is view and view == ["live"]


class Counted(Snapshottable):
    def __init__(self) -> None:
        self.items: list[str] = []
        self.n = 0

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.n = len(state["items"])  # (reads what it is given)


class Holder(Snapshottable):
    def __init__(self) -> None:
        self.parts: list[Counted] = []


def test_a_new_nested_object_reads_the_saved_contents_in_its_load_state_dict() -> None:
    """An object the snapshot makes anew (here in a list, where nothing the program holds can take it) is loaded at
    once: its containers are not filled later, so its load_state_dict sees the saved contents."""
    from agentsnap_core.format.snapshottable import dump_state, load_state

    h = Holder()
    part = Counted()
    part.items.extend(["a", "b"])
    part.n = 2
    h.parts.append(part)
    fresh = Holder()
    load_state(fresh, dump_state(h))
    assert fresh.parts[0].items == ["a", "b"] and fresh.parts[0].n == 2
