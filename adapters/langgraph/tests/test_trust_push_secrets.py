"""``agentsnap push`` and ``agentsnap scan`` read a LangGraph conversation, not only the snapshot's document.

Reported (tried as a user): a PFSaver thread's messages - where people paste tokens ("my GitHub token is ghp_...")
- are LangGraph's serialized channel values, objects the checkpoint's state layer names in its ``refs``. The push
check of session 26 read the state layer's document (channel names, versions, object ids) and never those objects:
``agentsnap scan langgraph/pr`` said "no secrets found" and ``agentsnap push`` sent the token to the team's store,
exit 0. Before the fix the first test fails there: scan exits 0 and the push exits 0.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

from agentsnap_langgraph import PFSaver
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.graph.message import add_messages
from lg_kit import agentsnap_cli, one_node_graph
from typing_extensions import TypedDict

TOKEN = "ghp_" + "abcdefghijklmnopqrstuvwxyz0123456789"


class Chat(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


def _chat(saver: PFSaver, replies: list[str]) -> Any:
    model = GenericFakeChatModel(messages=iter([AIMessage(r) for r in replies]))

    def chat(state: Chat) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    return one_node_graph(saver, Chat, chat)


def test_a_token_pasted_into_a_langgraph_chat_is_found_and_the_push_refused(tmp_path: Path) -> None:
    store = tmp_path / "work"
    with PFSaver(store) as saver:
        graph = _chat(saver, ["Opening the PR.", "Done."])
        cfg = {"configurable": {"thread_id": "pr"}}
        graph.invoke({"messages": [HumanMessage("what is the weather like?")]}, cfg)
        graph.invoke({"messages": [HumanMessage(f"my GitHub token is {TOKEN}, please open the PR")]}, cfg)
    scan = agentsnap_cli(store, "scan", "langgraph/pr")
    assert scan.returncode == 1, scan.stdout + scan.stderr
    assert "state" in scan.stdout and "channels.messages" in scan.stdout and "ghp_…(40 chars)" in scan.stdout
    assert TOKEN not in scan.stdout + scan.stderr
    team = tmp_path / "team"
    push = agentsnap_cli(store, "push", team.as_uri(), "langgraph/pr")
    assert push.returncode == 2, push.stdout + push.stderr
    assert "1 possible secret" in push.stderr and "state channels." in push.stderr and TOKEN not in push.stderr
    assert not team.exists(), "a refused push created the remote store"
    found = json.loads(agentsnap_cli(store, "push", team.as_uri(), "langgraph/pr", "--json").stdout)["secrets"]
    assert [f["kind"] for f in found] == ["GitHub token"] and found[0]["layer"] == "state"


def test_a_chat_without_secrets_pushes_and_only_new_checkpoints_are_asked_about(tmp_path: Path) -> None:
    store = tmp_path / "work"
    team = tmp_path / "team"
    cfg = {"configurable": {"thread_id": "pr"}}
    with PFSaver(store) as saver:
        _chat(saver, ["Sunny."]).invoke({"messages": [HumanMessage("what is the weather like?")]}, cfg)
    push = agentsnap_cli(store, "push", team.as_uri(), "langgraph/pr")
    assert push.returncode == 0, push.stderr
    with PFSaver(store) as saver:
        _chat(saver, ["Noted."]).invoke({"messages": [HumanMessage(f"token {TOKEN}")]}, cfg)
    push = agentsnap_cli(store, "push", team.as_uri(), "langgraph/pr")
    assert push.returncode == 2 and "1 possible secret" in push.stderr, push.stderr
    push = agentsnap_cli(store, "push", team.as_uri(), "langgraph/pr", "--allow-secrets")
    assert push.returncode == 0, push.stderr
    with PFSaver(store) as saver:  # the remote holds the token now: later turns are not refused for it again
        _chat(saver, ["You're welcome."]).invoke({"messages": [HumanMessage("thanks")]}, cfg)
    push = agentsnap_cli(store, "push", team.as_uri(), "langgraph/pr")
    assert push.returncode == 0, push.stderr
