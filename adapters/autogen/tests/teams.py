"""Real AutoGen teams driven by ``ReplayChatCompletionClient`` (offline), shared by the tests and
the child processes they start (``python teams.py restore ...``).

Each agent has its own replay client with a script of answers; after a restore the caller
re-supplies clients positioned after the answers already given (what a real model would not need).
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from autogen_agentchat.agents import AssistantAgent
from autogen_agentchat.teams import RoundRobinGroupChat, SelectorGroupChat, Swarm
from autogen_core import FunctionCall
from autogen_core.models import CreateResult, ModelFamily, ModelInfo, RequestUsage
from autogen_ext.models.replay import ReplayChatCompletionClient

TOOLS_INFO = ModelInfo(
    vision=False, function_calling=True, json_output=False, family=ModelFamily.UNKNOWN, structured_output=False
)


def handoff(target: str, n: int) -> CreateResult:
    """A scripted model answer that hands the conversation to ``target`` (Swarm)."""
    call = FunctionCall(id=f"call-{target}-{n}", name=f"transfer_to_{target}", arguments="{}")
    return CreateResult(finish_reason="function_calls", content=[call], usage=RequestUsage(0, 0), cached=False)


#: per kind: every agent's (and the selector's) full script of answers
SCRIPTS: dict[str, dict[str, list[Any]]] = {
    "roundrobin": {
        "alice": [f"alice says {i}" for i in range(8)],
        "bob": [f"bob says {i}" for i in range(8)],
    },
    "selector": {
        "alice": [f"alice says {i}" for i in range(8)],
        "bob": [f"bob says {i}" for i in range(8)],
        "carol": [f"carol says {i}" for i in range(8)],
        "SelectorGroupChat": ["bob", "carol", "alice", "carol", "bob", "alice", "bob", "carol"],
    },
    "swarm": {
        "alice": [handoff("bob", 0), "alice says 1", handoff("bob", 2), "alice says 3"],
        "bob": ["bob says 0", handoff("alice", 1), "bob says 2", handoff("alice", 3)],
    },
}


def script(kind: str, slot: str) -> list[Any]:
    return list(SCRIPTS[kind][slot])


def clients(kind: str, used: dict[str, int] | None = None) -> dict[str, ReplayChatCompletionClient]:
    """Fresh replay clients per slot, each starting after ``used[slot]`` answers."""
    used = used or {}
    info = TOOLS_INFO if kind == "swarm" else None
    return {
        slot: ReplayChatCompletionClient(script(kind, slot)[used.get(slot, 0) :], model_info=info)
        for slot in SCRIPTS[kind]
    }


def make_team(kind: str, model_clients: dict[str, Any], max_turns: int = 3) -> Any:
    names = [s for s in SCRIPTS[kind] if s != "SelectorGroupChat"]
    if kind == "swarm":
        agents = [
            AssistantAgent(n, model_client=model_clients[n], handoffs=[o for o in names if o != n]) for n in names
        ]
        return Swarm(agents, max_turns=max_turns)
    agents = [AssistantAgent(n, model_client=model_clients[n], description=f"{n}, a helper") for n in names]
    if kind == "selector":
        return SelectorGroupChat(agents, model_client=model_clients["SelectorGroupChat"], max_turns=max_turns)
    return RoundRobinGroupChat(agents, max_turns=max_turns)


def said(messages: Any) -> list[list[str]]:
    """(source, content) of chat messages, as JSON-friendly lists."""
    return [[m.source, m.content if isinstance(m.content, str) else repr(m.content)] for m in messages]


def received(client: ReplayChatCompletionClient, since: int = 0) -> list[list[list[str]]]:
    """What the model client was sent on each call from ``since`` on: [[source, content], ...] per call."""
    out = []
    for call in client.create_calls[since:]:
        out.append([[getattr(m, "source", type(m).__name__), str(m.content)] for m in call["messages"]])
    return out


async def _restore_and_continue(repo_path: str, snap_id: str, kind: str, used: dict[str, int]) -> dict[str, Any]:
    import agentsnap_autogen
    from agentsnap_core import Repo

    with Repo.open(repo_path) as repo:
        live = clients(kind, used)
        team = await agentsnap_autogen.load(repo, snap_id, model_clients=live)
        result = await team.run()
        return {"messages": said(result.messages), "received": {s: received(c) for s, c in live.items()}}


if __name__ == "__main__":
    if sys.argv[1] == "restore":
        out = asyncio.run(_restore_and_continue(sys.argv[2], sys.argv[3], sys.argv[4], json.loads(sys.argv[5])))
        print("RESULT " + json.dumps(out))
