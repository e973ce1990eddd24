"""Automatic snapshots between turns while the team runs; each restores to continue identically."""

from __future__ import annotations

import asyncio

import agentsnap_autogen
import pytest
from teams import clients, make_team, said

TURNS = 4


def _answers_given(state: dict, kind: str, boundary: int) -> dict[str, int]:
    """How many scripted answers each slot had given at a boundary (to position replayed clients)."""
    used = {}
    for name, agent in state["agent_states"].items():
        context = agent.get("agent_state", {}).get("llm_context", {}).get("messages")
        if context is not None:
            used[name] = sum(1 for m in context if m["type"] == "AssistantMessage")
    if kind == "selector":
        used["SelectorGroupChat"] = boundary  # the restored team asks its selector again
    return used


@pytest.mark.parametrize("kind", ["roundrobin", "selector", "swarm"])
def test_turn_snapshots_taken_while_running_restore_and_continue(kind, repo):
    async def uninterrupted():
        team = make_team(kind, clients(kind), max_turns=TURNS)
        turns = agentsnap_autogen.TurnSnapshots(repo).attach(team)
        result = await team.run(task="plan a trip to Lisbon")
        return said(result.messages), turns.snapshots

    straight, snapshots = asyncio.run(uninterrupted())
    assert len(snapshots) == TURNS  # before turn 1 .. before turn 4 (the run then stops at max_turns)
    for earlier, later in zip(snapshots, snapshots[1:], strict=False):
        assert later.parents == [earlier.id]

    for boundary, snap in enumerate(snapshots[1:], start=1):
        payload = repo.read_layer(snap, "state")
        next_speaker = payload["between_turns"]["next_speakers"][0]
        used = _answers_given(payload["state"], kind, boundary)

        async def resume(snap_id: str, used: dict[str, int]) -> list[list[str]]:
            team = await agentsnap_autogen.load(repo, snap_id, model_clients=clients(kind, used))
            return said((await team.run()).messages)

        resumed = asyncio.run(resume(snap.id, used))
        assert resumed[0][0] == next_speaker
        # the uninterrupted run's messages from this boundary on
        assert straight[-len(resumed):] == resumed, (boundary, resumed)
        # the snapshot's trace is the uninterrupted conversation up to this boundary
        before = [m for m in straight[: len(straight) - len(resumed)] if not m[1].startswith("[")]
        trace = [[m["name"], m["content"]] for m in repo.read_layer(snap, "trace") if isinstance(m["content"], str)]
        assert trace == before


def test_turn_snapshots_need_a_group_chat_team(repo):
    from agentsnap_core.errors import InvalidInput
    from autogen_agentchat.agents import AssistantAgent
    from autogen_ext.models.replay import ReplayChatCompletionClient

    with pytest.raises(InvalidInput, match="group chat team"):
        agentsnap_autogen.TurnSnapshots(repo).attach(AssistantAgent("a", model_client=ReplayChatCompletionClient([])))


def test_turn_snapshots_through_autogen_cores_public_runtime_hook(repo):
    """Issue 23 item 10: the handler goes in through SingleThreadedAgentRuntime(intervention_handlers=...)."""
    from autogen_agentchat.agents import AssistantAgent
    from autogen_agentchat.teams import RoundRobinGroupChat

    async def run():
        turns = agentsnap_autogen.TurnSnapshots(repo)
        runtime = turns.runtime()
        live = clients("roundrobin")
        agents = [AssistantAgent(n, model_client=live[n]) for n in ("alice", "bob")]
        team = RoundRobinGroupChat(agents, max_turns=3, runtime=runtime)
        turns.attach(team)
        runtime.start()
        result = await team.run(task="plan a trip")
        await runtime.stop_when_idle()
        return turns, runtime, said(result.messages)

    turns, runtime, messages = asyncio.run(run())
    assert [m[0] for m in messages] == ["user", "alice", "bob", "alice"]
    assert len(turns.snapshots) == 3
    assert runtime._intervention_handlers == [turns]  # installed once, by the constructor


def test_an_untested_autogen_release_fails_loudly(repo, monkeypatch):
    import autogen_agentchat

    monkeypatch.setattr(autogen_agentchat, "__version__", "0.8.0")
    with pytest.raises(agentsnap_autogen.UntestedAutoGen, match=r"tested with autogen-agentchat 0\.7\.0 to 0\.7\.5, not 0\.8\.0"):
        agentsnap_autogen.TurnSnapshots(repo)


def _budget_team(budget, used=None):
    from autogen_agentchat.agents import AssistantAgent
    from autogen_agentchat.teams import RoundRobinGroupChat

    live = clients("roundrobin", used)
    agents = [AssistantAgent(n, model_client=live[n]) for n in ("alice", "bob")]
    return RoundRobinGroupChat(agents, termination_condition=budget, max_turns=20), live


def test_a_team_restored_between_turns_keeps_what_its_termination_condition_had_counted(repo):
    """MaxMessageTermination is a budget (messages, hence model calls and cost). AutoGen's ``save_state`` leaves the
    conditions' counters out, so a team restored from a turn snapshot started counting from zero: with
    ``MaxMessageTermination(5)`` a run that had 2 messages left went on for 5 more (past the budget the user set).
    Now the counters of the team's condition (composites too) travel in the snapshot, and the restored run stops
    where the uninterrupted one did."""
    from autogen_agentchat.conditions import MaxMessageTermination, TextMentionTermination

    def budget(limit=5):
        return MaxMessageTermination(limit) | TextMentionTermination("DONE")

    async def uninterrupted():
        team, _ = _budget_team(budget())
        turns = agentsnap_autogen.TurnSnapshots(repo).attach(team)
        result = await team.run(task="plan a trip to Lisbon")
        return said(result.messages), turns.snapshots

    straight, snapshots = asyncio.run(uninterrupted())
    assert len(straight) == 5  # the task and four answers: the budget
    snap = snapshots[2]  # before the third answer: the task and two answers counted
    payload = repo.read_layer(snap, "state")

    used = _answers_given(payload["state"], "roundrobin", 2)

    async def resume():
        _, live = _budget_team(budget(), used)
        team = await agentsnap_autogen.load(repo, snap.id, model_clients=live)
        return said((await team.run()).messages)

    resumed = asyncio.run(resume())
    assert resumed == straight[3:], f"the restored team ran past its budget: {resumed}"

    async def into(condition):  # an existing team given another budget keeps its own limit and the count so far
        team, _ = _budget_team(condition, used)
        await agentsnap_autogen.restore(repo, team, snap.id)
        return said((await team.run()).messages)

    assert len(asyncio.run(into(budget(7)))) == 7 - 3
    with pytest.warns(RuntimeWarning, match="termination condition is not the snapshot's"):
        other = asyncio.run(into(MaxMessageTermination(5)))  # another condition: counted from zero, and said
    assert len(other) == 5


@pytest.mark.parametrize("kind", ["roundrobin", "selector", "swarm"])
def test_a_team_restored_at_the_first_turn_boundary_shows_its_models_the_task(kind, repo):
    """The boundary before the first speaker is met when the manager has published the task to the participants and
    asked the first speaker, but the runtime has not yet delivered the task to them (that delivery waits in its
    queue behind the request the snapshot is taken at): every participant's buffer was empty in the snapshot, and
    the restored team's models were never sent the task. Now the snapshot holds the task in every buffer, as it is
    an instant later, and every model is sent what it was sent uninterrupted."""
    from teams import received

    async def scenario():
        live = clients(kind)
        team = make_team(kind, live, max_turns=TURNS)
        turns = agentsnap_autogen.TurnSnapshots(repo).attach(team)
        await team.run(task="plan a trip to Lisbon")
        fresh = clients(kind)
        restored = await agentsnap_autogen.load(repo, turns.snapshots[0].id, model_clients=fresh)
        await restored.run()
        return {s: received(c) for s, c in live.items()}, {s: received(c) for s, c in fresh.items()}

    straight, resumed = asyncio.run(scenario())
    assert any(["user", "plan a trip to Lisbon"] in call for calls in straight.values() for call in calls)
    assert resumed == straight
