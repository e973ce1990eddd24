"""A snapshot's team config cannot run code on load by hiding a FunctionTool where no tools list is.

Reported (read in autogen-core 0.7.5 ``_component_config.py`` and tried): ``load`` / ``build`` refused a stored
``FunctionTool`` (its source code is executed by AutoGen on load) only inside a ``tools`` list. AutoGen's
``ComponentLoader.load_component`` imports and builds the component a config names *before* it checks the type the
caller expected, so a FunctionTool put where an agent's ``model_context`` (or memory, or any other component) goes
was built - its ``global_imports`` and ``source_code`` executed - and only then refused with AutoGen's "Expected type
does not match". A crafted snapshot pulled from a teammate ran its code on ``load``, ``trust_code`` off. Every stored
FunctionTool is now found wherever it sits, before anything is loaded.
"""

from __future__ import annotations

import asyncio
import copy
from pathlib import Path
from typing import Any

import agentsnap_autogen
import pytest
from agentsnap_core import Repo
from autogen_agentchat.agents import AssistantAgent
from autogen_agentchat.teams import RoundRobinGroupChat
from autogen_core.tools import FunctionTool
from autogen_ext.models.replay import ReplayChatCompletionClient
from teams import TOOLS_INFO


def _noop() -> None:
    """A tool."""


def _payload(tmp_path: Path) -> dict[str, Any]:
    async def made() -> dict[str, Any]:
        team = RoundRobinGroupChat([AssistantAgent("alice", model_client=ReplayChatCompletionClient(["hi"]))], max_turns=1)
        with Repo.init(tmp_path / "work") as repo:
            snap = await agentsnap_autogen.snapshot(repo, team, "one agent")
            return repo.read_layer(repo.get(snap.id), "state")

    return asyncio.run(made())


def _hidden_tool(marker: Path) -> dict[str, Any]:
    comp = FunctionTool(_noop, "a tool").dump_component().model_dump()
    comp["config"]["source_code"] = f"open({str(marker)!r}, 'w').write('ran')\n\ndef _noop():\n    pass\n"
    return comp


@pytest.mark.parametrize("where", ["model_context", "memory"])
def test_a_function_tool_hidden_outside_a_tools_list_is_refused_before_anything_loads(tmp_path: Path,
                                                                                      where: str) -> None:
    marker = tmp_path / "ran.txt"
    payload = copy.deepcopy(_payload(tmp_path))
    agent = payload["config"]["config"]["participants"][0]["config"]
    agent[where] = _hidden_tool(marker) if where == "model_context" else [_hidden_tool(marker)]
    with pytest.raises(Exception) as refused:  # noqa: PT011 - which one is asserted below, after the marker
        agentsnap_autogen.build(payload, model_clients=ReplayChatCompletionClient(["hi"]))
    assert not marker.exists(), f"the snapshot's code ran on load (then: {refused.value!r})"
    assert isinstance(refused.value, agentsnap_autogen.UntrustedCode) and "_noop" in str(refused.value)


def test_a_re_supplied_tool_is_still_loaded_live(tmp_path: Path) -> None:
    async def made() -> Any:
        tool = FunctionTool(_noop, "a tool")
        client = ReplayChatCompletionClient(["hi"], model_info=TOOLS_INFO)
        team = RoundRobinGroupChat([AssistantAgent("alice", model_client=client, tools=[tool])], max_turns=1)
        with Repo.init(tmp_path / "work2") as repo:
            snap = await agentsnap_autogen.snapshot(repo, team, "with a tool")
            with pytest.raises(agentsnap_autogen.UntrustedCode):
                await agentsnap_autogen.load(repo, snap.id, model_clients=client)
            return await agentsnap_autogen.load(repo, snap.id, model_clients=client, tools={"_noop": tool})

    team = asyncio.run(made())
    assert team is not None


def test_a_provider_in_a_module_the_program_never_imported_is_not_imported(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """AutoGen's loader imports the module a provider names: a snapshot naming a module outside AutoGen that the
    program has not imported had it imported (its code run) on load. Now refused first; ``trust_code=True`` loads."""
    marker = tmp_path / "imported.txt"
    (tmp_path / "mods").mkdir()
    (tmp_path / "mods" / "snap_named_module.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    monkeypatch.syspath_prepend(str(tmp_path / "mods"))
    payload = copy.deepcopy(_payload(tmp_path))
    agent = payload["config"]["config"]["participants"][0]["config"]
    agent["model_context"] = {"provider": "snap_named_module.Context", "component_type": "chat_completion_context",
                              "config": {}}
    with pytest.raises(Exception) as refused:  # noqa: PT011 - which one is asserted below, after the marker
        agentsnap_autogen.build(payload, model_clients=ReplayChatCompletionClient(["hi"]))
    assert not marker.exists(), f"the module the snapshot named was imported (then: {refused.value!r})"
    assert isinstance(refused.value, agentsnap_autogen.UntrustedCode) and "snap_named_module" in str(refused.value)
