"""FunctionTools guarded by the effects ledger: a restored team re-issuing a call gets the recorded result."""

from __future__ import annotations

import asyncio
import json

import agentsnap_autogen
import pytest
from agentsnap_core.layers.effects import Effects
from autogen_agentchat.agents import AssistantAgent
from autogen_agentchat.messages import ToolCallSummaryMessage
from autogen_agentchat.teams import RoundRobinGroupChat
from autogen_core import FunctionCall
from autogen_core.models import CreateResult, RequestUsage
from autogen_core.tools import FunctionTool
from autogen_ext.models.replay import ReplayChatCompletionClient
from teams import TOOLS_INFO


def send_email(to: str) -> str:
    """Send an email (appends to the outbox file named by $OUTBOX)."""
    import os

    with open(os.environ["OUTBOX"], "a") as f:
        f.write(to + "\n")
    return f"sent to {to}"


def _mailer_model() -> ReplayChatCompletionClient:
    call = FunctionCall(id="call-1", name="send_email", arguments=json.dumps({"to": "bob@example.com"}))
    answer = CreateResult(finish_reason="function_calls", content=[call], usage=RequestUsage(0, 0), cached=False)
    return ReplayChatCompletionClient([answer], model_info=TOOLS_INFO)


def test_restored_team_does_not_send_the_email_twice(repo, tmp_path, monkeypatch):
    outbox = tmp_path / "outbox"
    monkeypatch.setenv("OUTBOX", str(outbox))
    fx = Effects(repo, "main")

    async def scenario():
        agent = AssistantAgent("mailer", model_client=_mailer_model(), tools=[FunctionTool(send_email, "send an email")])
        team = RoundRobinGroupChat([agent], max_turns=1)
        assert agentsnap_autogen.wrap_tools(team, fx) == ["send_email"]
        before = await agentsnap_autogen.snapshot(repo, team, "before sending")
        with fx.step(1):
            first = await team.run(task="email bob")
        # the process "crashes"; a fresh team from the snapshot redoes the turn
        with pytest.raises(agentsnap_autogen.UntrustedCode, match="send_email"):
            await agentsnap_autogen.load(repo, before.id, model_clients=_mailer_model())
        again = await agentsnap_autogen.load(
            repo, before.id, model_clients=_mailer_model(), tools={"send_email": FunctionTool(send_email, "send")},
            effects=fx,
        )
        with fx.step(1):
            second = await again.run(task="email bob")
        return first, second

    first, second = asyncio.run(scenario())
    summary = [m.content for m in first.messages if isinstance(m, ToolCallSummaryMessage)]
    assert summary == ["sent to bob@example.com"]
    assert [m.content for m in second.messages if isinstance(m, ToolCallSummaryMessage)] == summary
    assert outbox.read_text().splitlines() == ["bob@example.com"]  # sent exactly once
    assert [status for status, _key in fx.events] == ["run", "replayed"]
