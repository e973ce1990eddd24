"""``restore`` into a live team gives its agents' ``ListMemory`` the snapshot's contents back.

Reported (autogen-agentchat 0.7.5, tried): AutoGen's ``save_state`` leaves an agent's memory out
(``AssistantAgent.save_state`` holds only its model context), and a ``ListMemory``'s contents live in its component
config, which only ``load`` rebuilds from. ``restore(repo, team, snap)`` - rewinding the team a user is running - loaded
the conversation of the snapshot and kept every memory added since, without a word: the agent's next model call was
sent the later "prefers imperial units" beside the snapshot's "prefers metric units", which the snapshot never had.
A fresh team from ``load`` had the snapshot's memory, so the two ways to go back to one snapshot differed.
"""

from __future__ import annotations

import asyncio

import agentsnap_autogen
import pytest
from autogen_agentchat.agents import AssistantAgent
from autogen_agentchat.teams import RoundRobinGroupChat
from autogen_core.memory import ListMemory, MemoryContent, MemoryMimeType
from autogen_ext.models.replay import ReplayChatCompletionClient
from teams import received


def _note(text: str) -> MemoryContent:
    return MemoryContent(content=text, mime_type=MemoryMimeType.TEXT)


def _team(memory: ListMemory, model: ReplayChatCompletionClient) -> RoundRobinGroupChat:
    return RoundRobinGroupChat([AssistantAgent("alice", model_client=model, memory=[memory])], max_turns=1)


def test_restore_into_the_live_team_rewinds_its_list_memory(repo):
    async def scenario():
        memory, model = ListMemory(name="prefs"), ReplayChatCompletionClient([f"answer {i}" for i in range(4)])
        await memory.add(_note("prefers metric units"))
        team = _team(memory, model)
        await team.run(task="how far is Lisbon?")
        snap = await agentsnap_autogen.snapshot(repo, team, "metric")
        await memory.add(_note("prefers imperial units"))  # what the user told it after the snapshot
        await team.run(task="and Porto?")
        await agentsnap_autogen.restore(repo, team, snap.id)
        restored = [c.content for c in memory.content]
        since = len(model.create_calls)
        await team.run(task="and Faro?")
        fresh_model = ReplayChatCompletionClient(["answer 1"])
        fresh = await agentsnap_autogen.load(repo, snap.id, model_clients=fresh_model)
        await fresh.run(task="and Faro?")
        return restored, received(model, since), received(fresh_model)

    restored, after_restore, after_load = asyncio.run(scenario())
    assert restored == ["prefers metric units"]
    assert not any("imperial" in text for call in after_restore for _source, text in call)
    assert after_restore == after_load  # restore into the live team == a fresh team from load


def test_a_memory_the_snapshot_has_none_of_is_left_as_it_is_and_said(repo):
    async def scenario():
        team = RoundRobinGroupChat([AssistantAgent("alice", model_client=ReplayChatCompletionClient(["a"]))],
                                   max_turns=1)
        snap = await agentsnap_autogen.snapshot(repo, team, "no memory")
        memory = ListMemory(name="prefs", memory_contents=[_note("prefers metric units")])
        other = _team(memory, ReplayChatCompletionClient(["a"]))
        with pytest.warns(RuntimeWarning, match="memory was not restored"):
            await agentsnap_autogen.restore(repo, other, snap.id)
        return [c.content for c in memory.content]

    assert asyncio.run(scenario()) == ["prefers metric units"]
