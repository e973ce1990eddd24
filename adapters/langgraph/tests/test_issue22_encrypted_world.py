"""With ``world_root`` and an EncryptedSerializer, the captured files are never stored in clear (issue 22, item 8)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from agentsnap_core.crypto import generate_key
from agentsnap_core.errors import InvalidInput
from agentsnap_langgraph import PFSaver
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer
from test_issue22_api import cfg, chat

KEY = b"0123456789abcdef0123456789abcdef"


def _files_hold(root: Path, needle: bytes) -> list[str]:
    return [str(p) for p in root.rglob("*") if p.is_file() and needle in p.read_bytes()]


def test_world_files_are_encrypted_with_an_encrypted_serializer(
    store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AGENTSNAP_ENCRYPTION_KEY_FILE", raising=False)
    monkeypatch.setenv("AGENTSNAP_ENCRYPTION_KEY", generate_key())
    world = tmp_path / "world"
    world.mkdir()
    secret = os.urandom(4096)  # incompressible: stored as is unless encrypted
    (world / "secret.bin").write_bytes(secret)
    serde = EncryptedSerializer.from_pycryptodome_aes(key=KEY)
    with PFSaver(store, serde=serde, world_root=world) as saver:
        graph = chat(saver)
        graph.invoke({"messages": [HumanMessage(content="hi", id="h1")]}, cfg("t"), durability="sync")
        saver.restore_world(cfg("t"), to=tmp_path / "back")
    assert (tmp_path / "back" / "secret.bin").read_bytes() == secret
    assert _files_hold(store / ".agentsnap", secret[1000:1064]) == []


def test_world_root_with_an_encrypted_serializer_needs_a_store_key(
    store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AGENTSNAP_ENCRYPTION_KEY", raising=False)
    monkeypatch.delenv("AGENTSNAP_ENCRYPTION_KEY_FILE", raising=False)
    world = tmp_path / "world"
    world.mkdir()
    (world / "notes.txt").write_text("private")
    serde = EncryptedSerializer.from_pycryptodome_aes(key=KEY)
    with pytest.raises(InvalidInput, match="AGENTSNAP_ENCRYPTION_KEY"):
        PFSaver(store, serde=serde, world_root=world)
    assert not store.exists(), "nothing is created when the saver is refused"
    with PFSaver(store, serde=serde) as saver:  # without world_root the values are the serializer's ciphertext
        chat(saver).invoke({"messages": [HumanMessage(content="hi", id="h1")]}, cfg("t"))
