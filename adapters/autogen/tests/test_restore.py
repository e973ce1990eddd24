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
