"""Trust at the edges: user mistakes and failures get a clear error and lose nothing; nothing is restored silently wrong."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import agentsnap_autogen
import pytest
from agentsnap_core.errors import AgentSnapError, InvalidInput
from autogen_agentchat.agents import AssistantAgent, UserProxyAgent
from autogen_agentchat.teams import RoundRobinGroupChat
from autogen_ext.models.replay import ReplayChatCompletionClient
from teams import TOOLS_INFO, clients, make_team, said


def _round_robin(names: list[str], max_turns: int = 2) -> RoundRobinGroupChat:
    agents = [AssistantAgent(n, model_client=ReplayChatCompletionClient([f"{n} says {i}" for i in range(8)])) for n in names]
    return RoundRobinGroupChat(agents, max_turns=max_turns)


async def _three_agents_after_two_turns(repo):
    team = _round_robin(["alice", "bob", "carol"])
    await team.run(task="go")  # alice, bob: carol is next
    return await agentsnap_autogen.snapshot(repo, team, "alice and bob spoke")


# --- TurnSnapshots: a snapshot that fails between turns ---------------------------------------------------------

FAILING_STORE_CHILD = r"""
import asyncio, json, sys
sys.path.insert(0, sys.argv[1])
import agentsnap_autogen
from agentsnap_core import Repo
from teams import TOOLS_INFO, clients, make_team, said

async def main():
    with Repo.open(sys.argv[2]) as repo:
        real, calls = repo.snapshot, []

        def snapshot(*args, **kw):  # the store fills up at the second turn boundary
            calls.append(1)
            if len(calls) == 2:
                raise OSError(28, "No space left on device")
            return real(*args, **kw)

        repo.snapshot = snapshot
        team = make_team("roundrobin", clients("roundrobin"), max_turns=4)
        turns = agentsnap_autogen.TurnSnapshots(repo).attach(team)
        try:
            result = await team.run(task="plan a trip")
            out = {"error": None, "messages": said(result.messages)}
        except Exception as exc:
            out = {"error": f"{type(exc).__name__}: {exc}"}
        out["snapshots"] = [s.id for s in turns.snapshots]
        out["head"] = repo.head()[1]
        return out

print("RESULT " + json.dumps(asyncio.run(main())))
"""


def test_a_failed_turn_snapshot_stops_the_run_with_the_error_instead_of_hanging(repo):
    """The store failing while TurnSnapshots snapshots a turn boundary must end ``run()`` with that error.

    Old behaviour: the exception escaped ``on_publish``; AutoGen's runtime only logs it ("Exception raised in
    in intervention handler") and drops the manager's request, so the next speaker was never asked and
    ``team.run()`` never returned (not even under ``asyncio.wait_for``: its cleanup waits for the idle runtime).
    """
    child = subprocess.run(
        [sys.executable, "-c", FAILING_STORE_CHILD, str(Path(__file__).parent), str(repo.root)],
        capture_output=True, text=True, timeout=120,
    )
    assert child.returncode == 0, child.stderr[-2000:]
    out = json.loads(child.stdout.split("RESULT ", 1)[1])
    assert out["error"] is not None, out  # the run did not claim success with a boundary missing
    assert "TurnSnapshotFailed" in out["error"] and "No space left on device" in out["error"], out["error"]
    assert "turn boundary 1 (next speaker 'bob')" in out["error"]
    assert len(out["snapshots"]) == 1 and out["head"] == out["snapshots"][0]

    # the boundary taken before the failure restores and continues
    async def resume():
        team = await agentsnap_autogen.load(repo, out["snapshots"][0], model_clients=clients("roundrobin"))
        return said((await team.run()).messages)

    assert [m[0] for m in asyncio.run(resume())] == ["alice", "bob", "alice", "bob"]


def test_a_bad_turn_message_template_is_refused_before_the_run(repo):
    """Old behaviour: ``TurnSnapshots(repo, message="turn {n} {turn}")`` was accepted; at the first boundary
    ``str.format`` raised KeyError inside the runtime and the team's run hung forever."""
    with pytest.raises(InvalidInput, match=r"\{turn\}|'turn'"):
        agentsnap_autogen.TurnSnapshots(repo, message="turn {n} {turn}")


@pytest.mark.parametrize("branch", ["bad..name", "-f", "two words"])
def test_snapshot_to_an_invalid_branch_name_is_refused_and_writes_nothing(repo, branch):
    """Old behaviour: ``snapshot(..., branch="bad..name")`` (and ``TurnSnapshots(repo, branch=...)``) created
    the branch ``refs/heads/bad..name``, a name every other verb refuses (``Repo.snapshot(ref=...)`` does not check it)."""
    team = make_team("roundrobin", clients("roundrobin"), max_turns=1)
    with pytest.raises(AgentSnapError, match="invalid name"):
        asyncio.run(agentsnap_autogen.snapshot(repo, team, "x", branch=branch))
    with pytest.raises(AgentSnapError, match="invalid name"):
        agentsnap_autogen.TurnSnapshots(repo, branch=branch)
    assert repo.branches() == {} and list(repo.objects.iter_oids()) == []


# --- restore into an existing team or agent of another shape -----------------------------------------------------


@pytest.mark.parametrize("names", [["alice", "bob"], ["carol", "bob", "alice"]], ids=["fewer", "reordered"])
def test_restore_into_a_team_of_another_line_up_is_refused(repo, names):
    """A snapshot of [alice, bob, carol] (carol next) restored into [alice, bob] or [carol, bob, alice].

    Old behaviour: both loaded without an error (AutoGen ignores states it has no agent for, and the manager's
    ``next_speaker_index`` is a position): the reordered team went on with alice instead of carol, the smaller
    team lost carol's state silently and its next ``run()`` failed with a raw ``IndexError``.
    """

    async def scenario():
        snap = await _three_agents_after_two_turns(repo)
        target = _round_robin(names)
        await target.run(task="its own conversation")
        before = await target.save_state()
        with pytest.raises(agentsnap_autogen.IncompatibleTarget, match="do not match the snapshot's"):
            await agentsnap_autogen.restore(repo, target, snap.id)
        return before, await target.save_state()

    before, after = asyncio.run(scenario())
    assert after == before


def test_restore_into_a_team_with_a_participant_of_another_class_is_refused(repo):
    """Old behaviour: a team [alice, bob, carol] restored into one whose carol is a UserProxyAgent loaded without
    an error: carol's conversation was dropped (a UserProxyAgent's state is empty)."""

    async def scenario():
        snap = await _three_agents_after_two_turns(repo)
        agents = [AssistantAgent(n, model_client=ReplayChatCompletionClient(["x"])) for n in ("alice", "bob")]
        target = RoundRobinGroupChat([*agents, UserProxyAgent("carol")], max_turns=2)
        before = await target.save_state()
        with pytest.raises(agentsnap_autogen.IncompatibleTarget, match="carol is UserProxyAgent here, AssistantAgent in the snapshot"):
            await agentsnap_autogen.restore(repo, target, snap.id)
        return before, await target.save_state()

    before, after = asyncio.run(scenario())
    assert after == before


def test_restore_into_another_agent_class_or_name_is_refused(repo):
    """Old behaviour: an AssistantAgent's snapshot "restored" into a UserProxyAgent without an error and loaded
    nothing (its state has no context), and into an AssistantAgent named 'other' it loaded solo's memory."""

    async def scenario():
        agent = AssistantAgent("solo", model_client=ReplayChatCompletionClient(["first"]))
        await agent.run(task="hello")
        snap = await agentsnap_autogen.snapshot(repo, agent)
        with pytest.raises(agentsnap_autogen.IncompatibleTarget, match="UserProxyAgent"):
            await agentsnap_autogen.restore(repo, UserProxyAgent("solo"), snap.id)
        other = AssistantAgent("other", model_client=ReplayChatCompletionClient(["x"]))
        with pytest.raises(agentsnap_autogen.IncompatibleTarget, match="'solo', not 'other'"):
            await agentsnap_autogen.restore(repo, other, snap.id)
        return await other.save_state()

    assert asyncio.run(scenario())["llm_context"]["messages"] == []


# --- re-supplied clients and tools -------------------------------------------------------------------------------


def test_a_misspelt_model_client_slot_is_refused(repo):
    """Old behaviour: ``model_clients={"alcie": ...}`` was ignored without a word and alice was rebuilt from the
    stored ReplayChatCompletionClient, which replayed its script from the start: the restored team said
    "alice says 0" a second time."""

    async def scenario():
        snap = await _three_agents_after_two_turns(repo)
        supplied = {n: ReplayChatCompletionClient(["new"]) for n in ("alcie", "bob", "carol")}
        with pytest.raises(InvalidInput, match=r"\['alcie'\].*\['alice', 'bob', 'carol'\]"):
            await agentsnap_autogen.load(repo, snap.id, model_clients=supplied)

    asyncio.run(scenario())


@pytest.mark.parametrize("wrong", ["alice", ["client"]], ids=["str", "list"])
def test_a_model_client_of_the_wrong_type_gets_a_clear_error(repo, wrong):
    """Old behaviour: AutoGen's raw ``TypeError: Expected type does not match`` from deep inside load_component."""

    async def scenario():
        snap = await _three_agents_after_two_turns(repo)
        with pytest.raises(InvalidInput, match=f"slot 'alice' is a {type(wrong).__name__}, not an autogen_core"):
            await agentsnap_autogen.load(repo, snap.id, model_clients=wrong)

    asyncio.run(scenario())


def lookup(city: str) -> str:
    """Look a city up."""
    return f"{city}: sunny"


def _tool_agent() -> AssistantAgent:
    from autogen_core.tools import FunctionTool

    model = ReplayChatCompletionClient(["a"], model_info=TOOLS_INFO)
    return AssistantAgent("alice", model_client=model, tools=[FunctionTool(lookup, "look up")])


def test_a_misspelt_tool_name_is_refused_instead_of_running_the_stored_code(repo):
    """Old behaviour: with ``trust_code=True``, ``tools={"lookpu": tool}`` (or ``tools=[tool]``) was ignored and the
    stored source code of ``lookup`` was executed and used instead of the re-supplied tool."""
    from autogen_core.tools import FunctionTool

    async def scenario():
        agent = _tool_agent()
        snap = await agentsnap_autogen.snapshot(repo, RoundRobinGroupChat([agent], max_turns=1))
        with pytest.raises(InvalidInput, match=r"\['lookpu'\].*\['lookup'\]"):
            await agentsnap_autogen.load(repo, snap.id, tools={"lookpu": FunctionTool(lookup, "look up")}, trust_code=True)
        # AutoGen's own shape, a list of tools: ignored the same way before
        with pytest.raises(InvalidInput, match="tools must be a mapping"):
            await agentsnap_autogen.load(repo, snap.id, tools=[FunctionTool(lookup, "look up")], trust_code=True)

    asyncio.run(scenario())


# --- fork ----------------------------------------------------------------------------------------------------------


def test_a_fork_that_cannot_build_its_teams_leaves_no_branches(repo):
    """Old behaviour: the n branches were created first and the teams built after, so a refusal left them behind:
    ``model_clients={slot: client}`` (load's shape) raised a raw ``KeyError: 0`` with attempt-1..3 created, and a
    stored tool without ``tools=``/``trust_code`` raised ``UntrustedCode`` with the branches created too."""
    from autogen_core.tools import FunctionTool

    async def scenario():
        snap = await _three_agents_after_two_turns(repo)
        slots = {n: ReplayChatCompletionClient(["x"]) for n in ("alice", "bob", "carol")}
        with pytest.raises(InvalidInput, match="one entry per fork"):
            await agentsnap_autogen.fork(repo, snap.id, 3, model_clients=slots)
        with pytest.raises(InvalidInput, match="fork count"):
            await agentsnap_autogen.fork(repo, snap.id, "3")
        agent = _tool_agent()
        tooled = await agentsnap_autogen.snapshot(repo, RoundRobinGroupChat([agent], max_turns=1), "with a tool")
        with pytest.raises(agentsnap_autogen.UntrustedCode):
            await agentsnap_autogen.fork(repo, tooled.id, 2)
        forks = await agentsnap_autogen.fork(repo, tooled.id, 2, tools={"lookup": FunctionTool(lookup, "look up")})
        return [branch for branch, _team in forks]

    assert asyncio.run(scenario()) == ["attempt-1", "attempt-2"]  # the refusals took no branch names
    assert sorted(repo.branches()) == ["attempt-1", "attempt-2", "main"]
