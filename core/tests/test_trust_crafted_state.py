"""A snapshot is data: restoring one never calls a class it names unless the class is of the kind its tag writes.

Before: a state value ``{"$t": "namedtuple", "cls": "subprocess:Popen", "v": [["sh", "-c", "..."]]}`` made the
restore call ``subprocess.Popen(["sh", "-c", "..."])`` (subprocess is loaded in nearly every process): a snapshot
pulled from a remote or a teammate ran a command on ``Client.restore``, with no pickle in sight and
``trust_pickle`` off. Every tag that builds an instance of a named class now checks the class: a namedtuple class for
``namedtuple``, a Snapshottable (or ``__snapshot_version__``) class for ``obj``, a builtin/collections type or a data
class for a defaultdict's factory (also refused at save, so nothing saves that could not be restored).
"""

from __future__ import annotations

import collections
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pytest
from agentsnap_core import Client, Repo, Snapshottable
from agentsnap_core.errors import AgentSnapError, UnsafeSnapshot
from agentsnap_core.format.snapshottable import ENVELOPE, decode_value


class Bot(Snapshottable):
    def __init__(self) -> None:
        self.memory: Any = None


def _crafted(tmp_path: Path, value: Any) -> tuple[Client, str]:
    """A snapshot of a Bot whose ``memory`` is the encoded ``value`` (as a crafted pushed snapshot would hold)."""
    repo = Repo.init(tmp_path / "w")
    layer = {"format": ENVELOPE, "v": 1, "class": "Bot", "version": "1.0", "state": {"memory": value}}
    snap = repo.snapshot("crafted", layers={"state": layer}, capture_world=False)
    return Client(repo=repo), snap.id


@pytest.mark.parametrize("value", [
    {"$t": "namedtuple", "cls": "subprocess:Popen", "v": [["sh", "-c", "touch {marker}"]]},
    {"$t": "obj", "cls": "subprocess:Popen", "name": "Popen", "version": "1.0", "v": {}},
    {"$t": "defaultdict", "factory": "subprocess:Popen", "v": []},
], ids=["namedtuple", "obj", "defaultdict-factory"])
def test_a_crafted_snapshot_naming_any_class_runs_nothing_on_restore(tmp_path: Path, value: dict[str, Any]) -> None:
    assert "subprocess" in sys.modules and subprocess.Popen  # (what makes the attack work: loaded, never imported)
    marker = tmp_path / "ran"
    value = {k: ([[a.format(marker=marker) for a in v[0]]] if k == "v" and v and isinstance(v[0], list) else v)
             for k, v in value.items()}
    client, sid = _crafted(tmp_path, value)
    live = Bot()
    live.memory = ["as it was"]
    with pytest.raises(UnsafeSnapshot, match=r"subprocess:Popen.*which is not a"):
        client.restore(sid, into=live)
    assert live.memory == ["as it was"] and not marker.exists()


def test_the_real_kinds_still_come_back(tmp_path: Path) -> None:
    point = collections.namedtuple("point", "x y")
    sys.modules[__name__].point = point  # type: ignore[attr-defined]  (module level, as a restore finds it)
    try:
        assert decode_value({"$t": "namedtuple", "cls": f"{__name__}:point", "v": [1, 2]}) == point(1, 2)
    finally:
        del sys.modules[__name__].point  # type: ignore[attr-defined]
    made = decode_value({"$t": "defaultdict", "factory": "builtins:list", "v": []})
    assert made["k"] == []


class Memory(Snapshottable):
    def __init__(self) -> None:
        self.facts: list[str] = []


class Agent(Snapshottable):
    def __init__(self) -> None:
        self.memory = Memory()
        self.tool: Any = None


def test_a_restore_that_fails_halfway_leaves_the_live_agent_as_it_was(tmp_path: Path) -> None:
    """The decoder loads the objects the agent already holds in place (its memory): a value later in the snapshot
    that cannot be restored (its class no longer loaded) must leave them untouched, not half-restored. (Passes on
    93f7fed, whose decoder built everything before touching the agent; failed on the first version of in-place
    decoding.)"""
    module = types.ModuleType("agentsnap_test_plugin_tools")
    exec("from agentsnap_core import Snapshottable\nclass Search(Snapshottable):\n    def __init__(self):\n"
         "        self.calls = 0\n", module.__dict__)
    sys.modules[module.__name__] = module
    with Client(tmp_path) as client:
        agent = Agent()
        agent.memory.facts.append("saved")
        agent.tool = module.Search()
        sid = client.save(agent, agent_id="a")
        del sys.modules[module.__name__]  # (the plugin that defined the tool is not loaded in this process)
        held = agent.memory
        held.facts[:] = ["live"]
        with pytest.raises(AgentSnapError, match="not imported"):
            client.restore(sid, into=agent)
        assert agent.memory is held and held.facts == ["live"]
