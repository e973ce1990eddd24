"""API keys never reach the store; they are re-supplied on restore."""

from __future__ import annotations

import asyncio

import agentsnap_autogen
import pytest
from agentsnap_core.testing.servers import need_module
from autogen_agentchat.agents import AssistantAgent
from autogen_agentchat.teams import RoundRobinGroupChat
from autogen_ext.models.replay import ReplayChatCompletionClient

SECRET = "sk-agentsnap-test-7f3a9c1e5b2d4f60a8e1"


def _openai_team():
    need_module("autogen_ext.models.openai")
    from autogen_ext.models.openai import OpenAIChatCompletionClient

    remote = OpenAIChatCompletionClient(
        model="gpt-4o", api_key=SECRET, default_headers={"Authorization": f"Bearer {SECRET}"}
    )
    alice = AssistantAgent("alice", model_client=remote)
    bob = AssistantAgent("bob", model_client=ReplayChatCompletionClient(["hi"]))
    return RoundRobinGroupChat([alice, bob], max_turns=1)


def test_api_key_is_stored_redacted_and_resupplied_on_restore(repo):
    team = _openai_team()
    snap = asyncio.run(agentsnap_autogen.snapshot(repo, team, "with a key"))

    needle = SECRET.encode()
    for oid in repo.objects.iter_oids():
        _kind, raw = repo.objects.get(oid)
        assert needle not in raw, f"object {oid} holds the API key"
        assert needle not in repo.objects.get_stored(oid)
    for path in repo.store_dir.rglob("*"):
        if path.is_file():
            assert needle not in path.read_bytes(), f"{path} holds the API key"

    payload = repo.read_layer(snap, "state")
    assert "config.participants[0].config.model_client.config.api_key" in payload["redacted"]
    assert agentsnap_autogen.model_slots(payload["config"]).keys() == {"alice", "bob"}

    # without the key, the restore refuses and says which slots / fields to re-supply
    with pytest.raises(agentsnap_autogen.MissingSecret, match="alice") as err:
        asyncio.run(agentsnap_autogen.load(repo, snap.id))
    assert "api_key" in str(err.value)

    # re-supplied as a secret: the stored config is rebuilt with the caller's key
    rebuilt = asyncio.run(
        agentsnap_autogen.load(repo, snap.id, secrets={"api_key": SECRET, "Authorization": f"Bearer {SECRET}"})
    )
    client_config = rebuilt.dump_component().config["participants"][0]["config"]["model_client"]["config"]
    assert client_config["api_key"].get_secret_value() == SECRET

    # or re-supplied as a live client for the slot
    stand_in = ReplayChatCompletionClient(["alice answers"])
    rebuilt = asyncio.run(agentsnap_autogen.load(repo, snap.id, model_clients={"alice": stand_in}))
    result = asyncio.run(rebuilt.run(task="go"))
    assert [(m.source, m.content) for m in result.messages] == [("user", "go"), ("alice", "alice answers")]
