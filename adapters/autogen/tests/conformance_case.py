"""The AutoGen case for agentsnap's conformance kit (importable by the kit's fresh process).

The kit calls synchronous ``make/step/observe``; they drive the team on the adapter's one
background event loop (``agentsnap_autogen.run_sync``), the same loop the sync hooks use.
One ``step`` is one turn: the team has ``max_turns=1`` and each step runs it with a new task.
"""

from __future__ import annotations

from typing import Any

from agentsnap_autogen import run_sync
from agentsnap_core.testing import AdapterCase
from autogen_agentchat.agents import AssistantAgent
from autogen_agentchat.teams import RoundRobinGroupChat
from autogen_ext.models.replay import ReplayChatCompletionClient


def make() -> RoundRobinGroupChat:
    # every answer is the same, so a restored team's fresh replay client answers like the original
    agents = [AssistantAgent(n, model_client=ReplayChatCompletionClient([f"{n}: noted"] * 64)) for n in ("alice", "bob")]
    return RoundRobinGroupChat(agents, max_turns=1)


def step(team: RoundRobinGroupChat, i: int) -> None:
    run_sync(team.run(task=f"step {i}"))


def observe(team: RoundRobinGroupChat) -> dict[str, Any]:
    """Everything a restore must bring back, minus per-run message ids and timestamps."""
    state = run_sync(team.save_state())["agent_states"]
    manager = state["RoundRobinGroupChatManager"]
    agents = {
        name: {
            "context": [[m["type"], m.get("source"), m["content"]] for m in s["agent_state"]["llm_context"]["messages"]],
            "buffer": [[m["source"], m["content"]] for m in s["message_buffer"]],
        }
        for name, s in state.items()
        if name != "RoundRobinGroupChatManager"
    }
    return {
        "thread": [[m["source"], m["content"]] for m in manager["message_thread"]],
        "next_speaker_index": manager["next_speaker_index"],
        "agents": agents,
    }


def case() -> AdapterCase:
    return AdapterCase(
        name="autogen RoundRobinGroupChat",
        make=make,
        step=step,
        observe=observe,
        factory="conformance_case:case",
        steps=3,
    )
