"""Functions AutoGen's ``dump_component`` cannot store come back on ``load`` / ``fork``, or the load is refused.

Reported (autogen-agentchat 0.7.0 - 0.7.5, tried): ``SelectorGroupChat._to_config`` has ``selector_func`` commented out
and no ``candidate_func`` ("not serializable and will be ignored"), ``AssistantAgent._to_config`` has no
``tool_call_summary_formatter`` and ``UserProxyAgent._to_config`` stores ``input_func=None``. ``load`` of a snapshot of
such a team built the team without them and gave no sign: a SelectorGroupChat whose ``selector_func`` alternated
alice and carol continued with whoever its model named (``['bob', 'bob']`` instead of ``['alice', 'carol']``), a
tool's summary came back in AutoGen's default format. Now the snapshot names the functions its team had (the live
team keeps them), and ``load`` / ``fork`` raise ``MissingFunction`` before anything is built unless they are handed
back, ``functions={"SelectorGroupChat": {"selector_func": fn}}``; with them the loaded team continues as the
uninterrupted one.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import agentsnap_autogen
import pytest
from agentsnap_core.errors import InvalidInput
from autogen_agentchat.agents import AssistantAgent
from autogen_agentchat.teams import RoundRobinGroupChat, SelectorGroupChat
from autogen_core import FunctionCall
from autogen_core.models import CreateResult, RequestUsage
from autogen_core.tools import FunctionTool
from autogen_ext.models.replay import ReplayChatCompletionClient
from teams import TOOLS_INFO, said

NAMES = ("alice", "bob", "carol")


def selector_func(thread: Any) -> str:
    return "carol" if thread[-1].source == "alice" else "alice"


def candidate_func(thread: Any) -> list[str]:
    return [selector_func(thread)]  # one candidate: the selector's model is not asked


def _clients(used: int = 0) -> dict[str, ReplayChatCompletionClient]:
    """Each agent's script after ``used`` answers; the selector model would always name bob."""
    out = {n: ReplayChatCompletionClient([f"{n} says {i}" for i in range(used, 8)]) for n in NAMES}
    out["SelectorGroupChat"] = ReplayChatCompletionClient(["bob"] * 8)
    return out


def _selector_team(live: dict[str, Any], **funcs: Any) -> SelectorGroupChat:
    agents = [AssistantAgent(n, model_client=live[n], description=f"{n}, a helper") for n in NAMES]
    return SelectorGroupChat(agents, model_client=live["SelectorGroupChat"], max_turns=2, **funcs)


@pytest.mark.parametrize("arg,func", [("selector_func", selector_func), ("candidate_func", candidate_func)])
def test_a_loaded_selector_team_picks_the_speakers_its_function_picked(repo, arg, func):
    async def scenario():
        team = _selector_team(_clients(), **{arg: func})
        await team.run(task="plan a trip")  # alice, carol
        snap = await agentsnap_autogen.snapshot(repo, team, "after 2 turns")
        with pytest.raises(agentsnap_autogen.MissingFunction, match=rf"'SelectorGroupChat': {{'{arg}': fn}}"):
            await agentsnap_autogen.load(repo, snap.id, model_clients=_clients(1))
        with pytest.raises(agentsnap_autogen.MissingFunction):
            await agentsnap_autogen.fork(repo, snap.id, 1, model_clients=lambda i: _clients(1))
        loaded = await agentsnap_autogen.load(repo, snap.id, model_clients=_clients(1),
                                              functions={"SelectorGroupChat": {arg: func}})
        (_, forked), = await agentsnap_autogen.fork(repo, snap.id, 1, model_clients=lambda i: _clients(1),
                                                   functions={"SelectorGroupChat": {arg: func}})
        assert repo.read_layer(snap, "state")["functions"] == {"SelectorGroupChat": [arg]}
        live = said((await team.run()).messages)  # the uninterrupted team
        return live, said((await loaded.run()).messages), said((await forked.run()).messages)

    live, loaded, forked = asyncio.run(scenario())
    assert [m[0] for m in live] == ["alice", "carol"]
    assert loaded == live
    assert forked == live


def test_restore_into_the_live_team_keeps_its_function_and_wrong_names_are_refused(repo):
    async def scenario():
        team = _selector_team(_clients(), selector_func=selector_func)
        await team.run(task="plan a trip")
        snap = await agentsnap_autogen.snapshot(repo, team, "after 2 turns")
        for bad in ({"SelectorGroupChat": {"selector_fn": selector_func}}, {"alice": {"selector_func": selector_func}},
                    {"SelectorGroupChat": selector_func}, {"SelectorGroupChat": {"selector_func": "alice"}}):
            with pytest.raises(InvalidInput):
                await agentsnap_autogen.load(repo, snap.id, model_clients=_clients(1), functions=bad)
        other = _selector_team(_clients(1), selector_func=selector_func)
        await agentsnap_autogen.restore(repo, other, snap.id)
        return said((await other.run()).messages)

    assert [m[0] for m in asyncio.run(scenario())] == ["alice", "carol"]


def lookup(city: str) -> str:
    return f"sunny in {city}"


def formatter(call: FunctionCall, result: Any) -> str:
    return f"{call.name} said: {result.content}"


def _weather_model(used: int = 0) -> ReplayChatCompletionClient:
    call = FunctionCall(id="call-1", name="lookup", arguments=json.dumps({"city": "Lisbon"}))
    answer = CreateResult(finish_reason="function_calls", content=[call], usage=RequestUsage(0, 0), cached=False)
    return ReplayChatCompletionClient(["noted", answer][used:], model_info=TOOLS_INFO)


def test_a_loaded_agent_keeps_its_tool_call_summary_formatter(repo):
    async def scenario():
        agent = AssistantAgent("alice", model_client=_weather_model(), tools=[FunctionTool(lookup, "weather")],
                               tool_call_summary_formatter=formatter)
        team = RoundRobinGroupChat([agent], max_turns=1)
        await team.run(task="hello")
        snap = await agentsnap_autogen.snapshot(repo, team, "before the tool call")
        tools = {"lookup": FunctionTool(lookup, "weather")}
        with pytest.raises(agentsnap_autogen.MissingFunction, match="tool_call_summary_formatter"):
            await agentsnap_autogen.load(repo, snap.id, model_clients=_weather_model(1), tools=tools)
        loaded = await agentsnap_autogen.load(repo, snap.id, model_clients=_weather_model(1), tools=tools,
                                              functions={"alice": {"tool_call_summary_formatter": formatter}})
        summaries = [said(m for m in (await t.run()).messages if m.type == "ToolCallSummaryMessage") for t in (team, loaded)]
        return summaries

    live, loaded = asyncio.run(scenario())
    assert live == [["alice", "lookup said: sunny in Lisbon"]]
    assert loaded == live


def test_a_loaded_user_proxy_asks_through_its_input_func(repo):
    """A loaded ``UserProxyAgent`` without its ``input_func`` reads stdin (AutoGen's default), where the user's
    program asked through its UI."""
    from autogen_agentchat.agents import UserProxyAgent

    asked = []

    def answer(prompt: str) -> str:
        asked.append(prompt)
        return "yes, book it"

    async def scenario():
        team = RoundRobinGroupChat([AssistantAgent("alice", model_client=ReplayChatCompletionClient(["shall I?"])),
                                    UserProxyAgent("user", input_func=answer)], max_turns=1)
        await team.run(task="find a flight")
        snap = await agentsnap_autogen.snapshot(repo, team, "alice asked")
        with pytest.raises(agentsnap_autogen.MissingFunction, match=r"'user': {'input_func': fn}"):
            await agentsnap_autogen.load(repo, snap.id, model_clients=ReplayChatCompletionClient([]))
        loaded = await agentsnap_autogen.load(repo, snap.id, model_clients=ReplayChatCompletionClient([]),
                                              functions={"user": {"input_func": answer}})
        return said(m for m in (await loaded.run()).messages if m.type == "TextMessage")

    assert asyncio.run(scenario()) == [["user", "yes, book it"]]
    assert len(asked) == 1
