"""``push`` does not send the secrets a conversation or an agent's state holds without being told to.

Reported (tried as a user): an agent's trace is the conversation, and people paste tokens into it ("my GitHub token
is ghp_..."); adapters' state layers hold the frameworks' messages and memories the same way. ``agentsnap scan`` found
them, but ``push`` sent them to the team's store in silence, exit 0 - a git user expects files to be pushed, not the
chat. Now ``push`` looks at what it would send (the trace, environment and every non-world layer of the snapshots the
remote lacks; world files stay as git treats them: ``agentsnap scan`` covers those) and refuses, before anything is
sent or a store is created, naming each finding masked and the way on: ``--allow-secrets``
(``push(..., allow_secrets=True)``). Before the fix the first test fails: the push exits 0 and the remote holds the
token.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agentsnap_core import Repo
from agentsnap_core.errors import AgentSnapError
from agentsnap_core.operations.remote import push
from trust_kit import cli

TOKEN = "ghp_" + "abcdefghijklmnopqrstuvwxyz0123456789"


def _store_holds(store: Path, needle: str) -> bool:
    return store.exists() and any(needle.encode() in p.read_bytes() for p in store.rglob("*") if p.is_file())


def test_a_push_of_a_token_in_the_trace_is_refused_and_sends_nothing(tmp_path: Path) -> None:
    root = tmp_path / "work"
    root.mkdir()
    (root / "app.py").write_text("print('hi')\n")
    with Repo.init(root) as repo:
        repo.append_message("user", f"here is my GitHub token: {TOKEN}, please open the PR")
        repo.snapshot("with the token in the chat")
    store = tmp_path / "team"
    code, out, err = cli(root, "push", store.as_uri(), "main")
    assert code == 2, (out, err)
    assert "ghp_…(40 chars)" in err and "trace" in err and "--allow-secrets" in err and TOKEN not in err
    assert not store.exists(), "a refused push created the remote store"
    code, out, err = cli(root, "push", store.as_uri(), "main", "--json")
    assert code == 2 and json.loads(out)["secrets"][0]["kind"] == "GitHub token" and TOKEN not in out
    code, out, err = cli(root, "push", store.as_uri(), "main", "--allow-secrets")
    assert code == 0, (out, err)
    assert _store_holds(store, TOKEN)  # (said, then sent, as asked)


def test_only_what_the_remote_lacks_is_looked_at_and_world_files_are_left_to_scan(tmp_path: Path) -> None:
    root = tmp_path / "work"
    root.mkdir()
    (root / "settings.py").write_text('OPENAI_API_KEY = "sk-proj-AbCdEf0123456789AbCdEf0123456789"\n')
    store = tmp_path / "team"
    with Repo.init(root) as repo:
        repo.snapshot("a key in a file: pushed as git pushes files (agentsnap scan reports it)")
        push(repo, store.as_uri())
        repo.append_message("user", f"token {TOKEN}")
        repo.snapshot("the token in the chat")
        try:
            push(repo, store.as_uri())
            raise AssertionError("pushed the token")
        except AgentSnapError as exc:
            assert "1 possible secret" in str(exc) and "sk-p" not in str(exc)  # only the new snapshot's trace
        push(repo, store.as_uri(), allow_secrets=True)
        repo.append_message("user", "thanks")
        repo.snapshot("the remote has the token's snapshot now")
        push(repo, store.as_uri())  # (what the remote already holds is not asked about again)


def _refs_snapshot(repo: Repo, layer: str, blobs: dict[str, bytes]) -> str:
    """A snapshot whose ``layer`` names ``blobs`` by id, as adapters store serialized state (LangGraph's channel
    values, a CrewAI checkpoint's JSON) or KV pages (``cache``)."""
    from agentsnap_core.format import content

    ids = {name: content.put_bytes(repo.objects, data) for name, data in blobs.items()}
    return repo.snapshot("refs", layers={layer: {"format": "test", "values": ids, "refs": sorted(ids.values())}}).id


def test_a_token_in_an_object_a_layer_names_is_found_where_the_layer_names_it(tmp_path: Path) -> None:
    """Before: scan read the layer's document only (``values`` holds object ids) and said nothing; push sent it."""
    import msgpack
    from agentsnap_core.operations.scan import scan_snapshot

    root = tmp_path / "work"
    root.mkdir()
    framework = msgpack.packb([msgpack.ExtType(5, msgpack.packb(["pkg.messages", "Human", {"content": f"use {TOKEN}"}]))])
    with Repo.init(root) as repo:
        _refs_snapshot(repo, "state", {"chat": framework, "checkpoint": json.dumps({"note": "sk-proj-" + "Ab1" * 10}).encode()})
        report = scan_snapshot(repo)
    assert sorted((f["where"], f["kind"]) for f in report["findings"]) == [
        ("values.chat[0][2].content", "GitHub token"), ("values.checkpoint", "OpenAI/Anthropic key")], report
    assert report["not_read"] == []
    code, out, err = cli(root, "push", (tmp_path / "team").as_uri(), "main")
    assert code == 2 and "2 possible secret" in err and TOKEN not in err, (out, err)


def test_kv_pages_are_not_read_and_what_cannot_be_read_is_said(tmp_path: Path, monkeypatch: Any) -> None:
    """``cache`` (KV pages) and ``model`` (weights) refs are bulk tensors, not read; an object too large to read is
    named by scan (``not_read``, a warning) and in push's notes, never passed over in silence."""
    from agentsnap_core.operations import scan

    root = tmp_path / "work"
    root.mkdir()
    with Repo.init(root) as repo:
        _refs_snapshot(repo, "cache", {"page": b"\x00\x01" + TOKEN.encode() + b"\x00" * 64})
        assert scan.scan_snapshot(repo)["count"] == 0
        _refs_snapshot(repo, "state", {"big": b"x" * 4096})
        monkeypatch.setattr(scan, "MAX_SCAN_BLOB", 1024)
        report = scan.scan_snapshot(repo)
        assert report["count"] == 0 and len(report["not_read"]) == 1 and "state layer object" in report["not_read"][0]
        result = push(repo, (tmp_path / "team").as_uri())
    assert any("not looked at for secrets" in note and "state layer object" in note for note in result.notes), result.notes
