"""Snapshot a running conversation, restore it in a NEW process into a FRESH team, continue."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import agentsnap_autogen
import pytest
from autogen_agentchat.messages import TextMessage
from teams import clients, make_team, received, said

TEAMS = Path(__file__).with_name("teams.py")


@pytest.mark.parametrize("kind", ["roundrobin", "selector", "swarm"])
def test_team_restored_in_new_process_continues_like_uninterrupted_run(kind, repo):
    async def run_snapshot_continue():
        live = clients(kind)
        team = make_team(kind, live, max_turns=3)
        first = await team.run(task="plan a trip to Lisbon")
        snap = await agentsnap_autogen.snapshot(repo, team, "after 3 turns")
        used = {slot: len(c.create_calls) for slot, c in live.items()}
        rest = await team.run()  # the same team, never interrupted
        return first, snap, used, said(rest.messages), {s: received(c, used[s]) for s, c in live.items()}

    first, snap, used, straight, straight_received = asyncio.run(run_snapshot_continue())
    assert len(straight) >= 3  # three turns (a Swarm handoff also emits tool-call events)

    child = subprocess.run(
        [sys.executable, str(TEAMS), "restore", str(repo.root), snap.id, kind, json.dumps(used)],
        capture_output=True, text=True, timeout=300,
    )
    assert child.returncode == 0, child.stderr[-2000:]
    resumed = json.loads(child.stdout.split("RESULT ", 1)[1])

    assert resumed["messages"][0][0] == straight[0][0]  # the same next speaker
    assert resumed["messages"] == straight  # and the same messages
    assert resumed["received"] == straight_received  # every model saw exactly what it saw uninterrupted
    # the replayed model answers anything, so check it was SENT the restored history
    history = [[m.source, m.content] for m in first.messages if isinstance(m, TextMessage)]
    speaker = straight[0][0]
    first_call = resumed["received"][speaker][0]
    for message in history:
        assert message in first_call, f"{message} missing from what {speaker}'s model received after restore"
    # the trace layer is the team's message thread
    trace = repo.read_layer(snap, "trace")
    assert [[m["name"], m["content"]] for m in trace if m["type"] == "TextMessage"] == history


def _ledger(speaker: str) -> str:
    def a(v):
        return {"reason": "scripted", "answer": v}

    return json.dumps({"is_request_satisfied": a(False), "is_in_loop": a(False), "is_progress_being_made": a(True),
                       "next_speaker": a(speaker), "instruction_or_question": a(f"{speaker}, continue")})


MAGENTIC = {
    "alice": [f"alice step {i}" for i in range(6)],
    "bob": [f"bob step {i}" for i in range(6)],
    "MagenticOneGroupChat": ["facts", "plan", _ledger("alice"), _ledger("bob"), _ledger("alice"), _ledger("bob"),
                             "new facts", "new plan", _ledger("bob"), _ledger("alice"), _ledger("bob"), _ledger("alice")],
}


def _magentic_clients(used=None):
    from autogen_ext.models.replay import ReplayChatCompletionClient

    used = used or {}
    return {slot: ReplayChatCompletionClient(answers[used.get(slot, 0):]) for slot, answers in MAGENTIC.items()}


async def magentic_run_and_snapshot(repo):
    """A MagenticOne team runs a task and is snapshotted, then continues (uninterrupted) with a new one."""
    from autogen_agentchat.agents import AssistantAgent
    from autogen_agentchat.teams import MagenticOneGroupChat

    live = _magentic_clients()
    agents = [AssistantAgent(n, model_client=live[n]) for n in ("alice", "bob")]
    team = MagenticOneGroupChat(agents, model_client=live["MagenticOneGroupChat"], max_turns=3)
    await team.run(task="write a report")
    snap = await agentsnap_autogen.snapshot(repo, team, "magentic")
    used = {slot: len(c.create_calls) for slot, c in live.items()}
    straight = said((await team.run(task="now the summary")).messages)
    return snap, used, straight, {s: received(c, used[s]) for s, c in live.items()}


def test_magentic_one_team_restores_into_fresh_team_and_continues_identically(repo):
    """MagenticOne cannot resume without a task (AutoGen asserts one), so both continue with a new task."""

    async def scenario():
        snap, used, straight, straight_received = await magentic_run_and_snapshot(repo)
        fresh = _magentic_clients(used)
        restored = await agentsnap_autogen.load(repo, snap.id, model_clients=fresh)
        states = (await restored.save_state())["agent_states"]
        resumed = said((await restored.run(task="now the summary")).messages)
        return straight, straight_received, resumed, {s: received(c) for s, c in fresh.items()}, states

    straight, straight_received, resumed, resumed_received, states = asyncio.run(scenario())
    assert resumed == straight
    assert resumed_received == straight_received
    # the fresh orchestrator and agents hold the restored conversation
    assert "write a report" in states["MagenticOneOrchestrator"]["message_thread"][0]["content"]
    bob_context = [[m.get("source"), m["content"]] for m in states["bob"]["agent_state"]["llm_context"]["messages"]]
    assert ["alice", "alice step 0"] in bob_context and ["bob", "bob step 0"] in bob_context


MAGENTIC_CHILD = r"""
import asyncio, json, sys
sys.path.insert(0, sys.argv[1])
import agentsnap_autogen
from agentsnap_core import Repo
from teams import received, said
from test_restore import _magentic_clients

async def main():
    with Repo.open(sys.argv[2]) as repo:
        fresh = _magentic_clients(json.loads(sys.argv[4]))
        team = await agentsnap_autogen.load(repo, sys.argv[3], model_clients=fresh)
        result = await team.run(task="now the summary")
        return {"messages": said(result.messages), "received": {s: received(c) for s, c in fresh.items()}}

print("RESULT " + json.dumps(asyncio.run(main())))
"""


def test_magentic_one_restored_in_a_fresh_process_continues_identically(repo):
    """Issue 23 item 11: the MagenticOne restore in a new process, not only in the one that took it."""
    snap, used, straight, straight_received = asyncio.run(magentic_run_and_snapshot(repo))
    child = subprocess.run(
        [sys.executable, "-c", MAGENTIC_CHILD, str(Path(__file__).parent), str(repo.root), snap.id, json.dumps(used)],
        capture_output=True, text=True, timeout=300,
    )
    assert child.returncode == 0, child.stderr[-2000:]
    resumed = json.loads(child.stdout.split("RESULT ", 1)[1])
    assert resumed["messages"] == straight
    assert resumed["received"] == straight_received  # every model (the orchestrator's included) saw the same history
