"""A SocietyOfMindAgent's inner team is part of the snapshot's team: its tools are guarded by the effects ledger.

Reported (tried): the adapter walked a team's ``_participants`` only, and a ``SocietyOfMindAgent`` keeps its inner team
in ``_team`` (autogen-agentchat 0.7.5 ``SocietyOfMindAgent.save_state`` / ``_to_config`` store it whole). So
``wrap_tools(team, fx)`` and ``load(..., effects=fx)`` wrapped nothing inside it and said nothing (``wrap_tools``
returned ``[]``): a team restored to redo a turn sent the email a second time, which the effects ledger is there to
prevent. The same walk decides which agents run code, ask for approval, have a GraphFlow to settle or functions to
hand back. Now it goes into the inner team (and a ``MessageFilterAgent``'s wrapped agent).
"""

from __future__ import annotations

import asyncio

import agentsnap_autogen
from agentsnap_core.layers.effects import Effects
from autogen_agentchat.agents import AssistantAgent, SocietyOfMindAgent
from autogen_agentchat.teams import RoundRobinGroupChat
from autogen_core.tools import FunctionTool
from autogen_ext.models.replay import ReplayChatCompletionClient
from test_effects import _mailer_model, send_email


def _clients() -> dict:
    return {"mailer": _mailer_model(), "office": ReplayChatCompletionClient(["the email is sent"])}


def _team(live: dict) -> RoundRobinGroupChat:
    inner = RoundRobinGroupChat([AssistantAgent("mailer", model_client=live["mailer"],
                                                tools=[FunctionTool(send_email, "send an email")])], max_turns=1)
    return RoundRobinGroupChat([SocietyOfMindAgent("office", team=inner, model_client=live["office"])], max_turns=1)


def test_a_restored_team_does_not_send_the_email_of_a_society_of_mind_agent_twice(repo, tmp_path, monkeypatch):
    outbox = tmp_path / "outbox"
    monkeypatch.setenv("OUTBOX", str(outbox))
    fx = Effects(repo, "main")

    async def scenario():
        team = _team(_clients())
        wrapped = agentsnap_autogen.wrap_tools(team, fx)
        before = await agentsnap_autogen.snapshot(repo, team, "before sending")
        with fx.step(1):
            first = await team.run(task="email bob")
        again = await agentsnap_autogen.load(repo, before.id, model_clients=_clients(),
                                             tools={"send_email": FunctionTool(send_email, "send")}, effects=fx)
        with fx.step(1):
            second = await again.run(task="email bob")
        return wrapped, first, second

    wrapped, first, second = asyncio.run(scenario())
    assert [m.content for m in first.messages][-1] == "the email is sent"
    assert [m.content for m in second.messages][-1] == "the email is sent"
    assert outbox.read_text().splitlines() == ["bob@example.com"], "the restored team sent the email again"
    assert wrapped == ["send_email"]
    assert [status for status, _key in fx.events] == ["run", "replayed"]
