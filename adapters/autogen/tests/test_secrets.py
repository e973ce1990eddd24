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


URL_PASSWORD = "p4ss-in-the-url-93d1"
QUERY_TOKEN = "query-token-5be0c7d2"


def test_passwords_and_tokens_inside_urls_are_redacted_by_shape(repo):
    """Issue 23 item 9: a secret is found by its shape too, not only by its key's name."""
    need_module("autogen_ext.models.openai")
    from autogen_ext.models.openai import OpenAIChatCompletionClient

    base_url = f"https://proxy:{URL_PASSWORD}@llm.example.com/v1?api_key={QUERY_TOKEN}"
    remote = OpenAIChatCompletionClient(
        model="gpt-4o", api_key="unused", base_url=base_url,
        default_headers={"X-Upstream": f"postgresql://svc:{URL_PASSWORD}@db.internal/app"},
    )
    team = RoundRobinGroupChat([AssistantAgent("alice", model_client=remote)], max_turns=1)
    snap = asyncio.run(agentsnap_autogen.snapshot(repo, team, "url secrets"))

    for needle in (URL_PASSWORD.encode(), QUERY_TOKEN.encode()):
        for oid in repo.objects.iter_oids():
            assert needle not in repo.objects.get(oid)[1], f"object {oid} holds {needle!r}"
        for path in repo.store_dir.rglob("*"):
            if path.is_file():
                assert needle not in path.read_bytes(), f"{path} holds {needle!r}"

    redacted = repo.read_layer(snap, "state")["redacted"]
    client = "config.participants[0].config.model_client.config"
    assert f"{client}.base_url" in redacted and f"{client}.default_headers.X-Upstream" in redacted

    with pytest.raises(agentsnap_autogen.MissingSecret, match="base_url"):
        asyncio.run(agentsnap_autogen.load(repo, snap.id, secrets={"api_key": "unused"}))
    upstream = f"postgresql://svc:{URL_PASSWORD}@db.internal/app"
    rebuilt = asyncio.run(agentsnap_autogen.load(
        repo, snap.id, secrets={"api_key": "unused", "base_url": base_url, "X-Upstream": upstream}))
    config = rebuilt.dump_component().config["participants"][0]["config"]["model_client"]["config"]
    assert config["base_url"] == base_url and config["default_headers"]["X-Upstream"] == upstream
