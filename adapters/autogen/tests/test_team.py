"""Refusals and in-place restore of teams and single agents."""

from __future__ import annotations

import asyncio

import agentsnap_autogen
import pytest
from autogen_agentchat.agents import AssistantAgent
from autogen_agentchat.teams import RoundRobinGroupChat
from autogen_ext.models.replay import ReplayChatCompletionClient
from teams import clients, make_team, said


def test_snapshot_and_restore_refused_while_a_run_is_in_flight(repo):
    async def scenario():
        team = make_team("roundrobin", clients("roundrobin"), max_turns=3)
        errors = []
        async for _event in team.run_stream(task="go"):
            for action in (
                agentsnap_autogen.snapshot(repo, team, "mid-run"),
                agentsnap_autogen.restore(repo, team, "HEAD"),
            ):
                try:
                    await action
                except agentsnap_autogen.TeamRunning as exc:
                    errors.append(str(exc))
                except Exception as exc:  # noqa: BLE001 - the HEAD lookup must not even be reached
                    errors.append(f"wrong error {type(exc).__name__}: {exc}")
        return errors

    errors = asyncio.run(scenario())
    assert errors and all("while a run is in flight" in e for e in errors), errors
    assert repo.head()[1] is None  # nothing was written
    assert list(repo.objects.iter_oids()) == []


def test_restore_into_existing_team_rewinds_it_and_keeps_its_clients(repo):
    async def scenario():
        live = clients("roundrobin")
        team = make_team("roundrobin", live, max_turns=2)
        await team.run(task="count")
        snap = await agentsnap_autogen.snapshot(repo, team)
        after_snap = said((await team.run()).messages)
        await agentsnap_autogen.restore(repo, team, snap.id)
        state = await team.save_state()
        thread = state["agent_states"]["RoundRobinGroupChatManager"]["message_thread"]
        return after_snap, [[m["source"], m["content"]] for m in thread]

    after_snap, thread = asyncio.run(scenario())
    assert thread == [["user", "count"], ["alice", "alice says 0"], ["bob", "bob says 0"]]
    assert after_snap == [["alice", "alice says 1"], ["bob", "bob says 1"]]


def test_restore_into_incompatible_team_is_refused(repo):
    async def scenario():
        team = make_team("roundrobin", clients("roundrobin"))
        snap = await agentsnap_autogen.snapshot(repo, team)
        other = RoundRobinGroupChat([AssistantAgent("zed", model_client=ReplayChatCompletionClient(["z"]))])
        await agentsnap_autogen.restore(repo, other, snap.id)

    with pytest.raises(agentsnap_autogen.IncompatibleTarget, match="zed"):
        asyncio.run(scenario())


def test_single_agent_snapshot_restores_its_model_context(repo):
    async def scenario():
        agent = AssistantAgent("solo", model_client=ReplayChatCompletionClient(["first", "second"]))
        await agent.run(task="hello")
        snap = await agentsnap_autogen.snapshot(repo, agent, "solo agent")
        fresh_client = ReplayChatCompletionClient(["second"])
        fresh = await agentsnap_autogen.load(repo, snap.id, model_clients=fresh_client)
        result = await fresh.run(task="again")
        return snap, result, fresh_client

    snap, result, fresh_client = asyncio.run(scenario())
    assert result.messages[-1].content == "second"
    sent = [(getattr(m, "source", "system"), m.content) for m in fresh_client.create_calls[0]["messages"]]
    assert ("user", "hello") in sent and ("solo", "first") in sent
    trace = repo.read_layer(snap, "trace")
    assert [(m["role"], m["content"]) for m in trace] == [("user", "hello"), ("assistant", "first")]


def test_sync_hooks_capture_and_restore_through_repo(repo):
    team = make_team("roundrobin", clients("roundrobin"), max_turns=1)
    agentsnap_autogen.run_sync(team.run(task="one"))
    snap = repo.capture(team, "via the plugin")
    assert repo.read_layer(snap, "state")["kind"] == "team"
    agentsnap_autogen.run_sync(team.run())
    repo.restore_into(team, snap.id)
    state = agentsnap_autogen.run_sync(team.save_state())
    assert len(state["agent_states"]["RoundRobinGroupChatManager"]["message_thread"]) == 2


def test_sync_verbs_inside_a_running_loop_refuse_instead_of_deadlocking(repo):
    from agentsnap_core.errors import AgentSnapError

    team = make_team("roundrobin", clients("roundrobin"))

    async def inside_loop():
        repo.capture(team, "from async code")

    with pytest.raises(AgentSnapError, match="await agentsnap_autogen.snapshot"):
        asyncio.run(inside_loop())
    assert repo.head()[1] is None


def test_loading_a_snapshot_without_autogen_state_says_so(repo):
    snap = repo.snapshot("plain", capture_world=False, layers={"state": {"counter": 1}})
    with pytest.raises(agentsnap_autogen.IncompatibleTarget, match="no AutoGen state layer"):
        asyncio.run(agentsnap_autogen.load(repo, snap.id))


def test_a_state_that_fails_to_load_leaves_the_team_unchanged(repo):
    async def scenario():
        team = make_team("roundrobin", clients("roundrobin"), max_turns=2)
        await team.run(task="count")
        snap = await agentsnap_autogen.snapshot(repo, team)
        payload = repo.read_layer(snap, "state")
        payload["state"]["agent_states"]["bob"]["agent_state"]["llm_context"] = {"messages": [{"type": "Bogus"}]}
        await team.run()  # advance past the snapshot
        before = await team.save_state()
        with pytest.raises(agentsnap_autogen.IncompatibleTarget, match="left unchanged"):
            await agentsnap_autogen._team.restore_state(team, payload)
        return before, await team.save_state()

    before, after = asyncio.run(scenario())
    assert after == before  # alice (loaded before bob failed) was rolled back too
