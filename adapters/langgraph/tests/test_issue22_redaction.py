"""Secrets LangGraph copies from ``config["configurable"]`` into checkpoint metadata are stored redacted
(core's shared :func:`agentsnap_core.redact.redact`), in the index and in every snapshot object."""

from __future__ import annotations

from pathlib import Path

from agentsnap_core.redact import REDACTED
from agentsnap_langgraph import PFSaver
from langchain_core.messages import HumanMessage
from test_issue22_api import chat

API_KEY = "sk-proj-Zq8vR2mXk4LtP9sWn3bYc7HdF1gJ6uEa"
PASSWORD = "hunter2-very-private"


def _stored_bytes(saver: PFSaver, store_dir: Path) -> list[bytes]:
    """Every object's decoded content, and every other file of the store as it lies on disk."""
    objects = saver.repo.objects
    out = [objects.get(oid)[1] for oid in objects.iter_oids()]
    out += [p.read_bytes() for p in store_dir.rglob("*") if p.is_file() and "objects" not in p.parts]
    return out


def test_secrets_in_configurable_are_stored_redacted(store: Path) -> None:
    config = {"configurable": {"thread_id": "t", "openai_api_key": API_KEY,
                               "db": f"postgresql://app:{PASSWORD}@db.internal/prod", "user_id": "u-1"}}
    with PFSaver(store, flush_interval=0) as saver:
        graph = chat(saver)
        graph.invoke({"messages": [HumanMessage(content="hi", id="h1")]}, config)
        md = graph.get_state({"configurable": {"thread_id": "t"}}).metadata
        assert md["openai_api_key"] == REDACTED
        assert md["db"] == f"postgresql://app:{REDACTED}@db.internal/prod"
        assert md["user_id"] == "u-1"  # the rest is kept as given
        saver.flush()
        blobs = _stored_bytes(saver, store / ".agentsnap")
    assert blobs
    for secret in (API_KEY, PASSWORD):
        assert not [b for b in blobs if secret.encode() in b], f"{secret!r} reached the store"
