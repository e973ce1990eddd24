"""PFSaver details LangGraph's conformance kit does not pin down, checked against InMemorySaver."""

from __future__ import annotations

from pathlib import Path

from agentsnap_langgraph import PFSaver
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.serde.types import ERROR, INTERRUPT

CFG = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}


def _writes(saver: object) -> list[tuple[str, str, object]]:
    stored = saver.put(CFG, empty_checkpoint(), {"source": "loop", "step": 0}, {})  # type: ignore[attr-defined]
    saver.put_writes(stored, [("b", 1), ("a", 2)], "task-z", "~2")  # type: ignore[attr-defined]
    saver.put_writes(stored, [("c", 3)], "task-y", "~1")  # type: ignore[attr-defined]
    saver.put_writes(stored, [(ERROR, "first"), ("d", 4)], "task-x", "~1")  # type: ignore[attr-defined]
    saver.put_writes(stored, [(ERROR, "second")], "task-x", "~1")  # special channels overwrite
    saver.put_writes(stored, [("b", 99)], "task-z", "~2")  # regular ones are kept (idempotent retry)
    saver.put_writes(stored, [(INTERRUPT, {"q": 1})], "task-w", "")
    return list(saver.get_tuple(stored).pending_writes)  # type: ignore[attr-defined]


def test_pending_writes_order_and_overwrites_match_inmemory_saver(store: Path) -> None:
    with PFSaver(store) as saver:
        got = _writes(saver)
    assert got == _writes(InMemorySaver())
    assert [w[0] for w in got] == ["task-w", "task-x", "task-x", "task-y", "task-z", "task-z"]
    assert ("task-x", ERROR, "second") in got and ("task-z", "b", 1) in got


def test_next_version_format_is_the_builtin_savers(store: Path) -> None:
    memory = InMemorySaver()
    with PFSaver(store) as saver:
        for current in (None, 3, memory.get_next_version(None, None), saver.get_next_version(7, None)):
            ours, theirs = saver.get_next_version(current, None), memory.get_next_version(current, None)
            assert ours.split(".")[0] == theirs.split(".")[0]
            assert ours > (current if isinstance(current, str) else f"{current or 0:032}")


def test_from_url_file_and_listing_every_thread(tmp_path: Path) -> None:
    with PFSaver.from_url((tmp_path / "p").as_uri()) as saver:
        for thread in ("a", "b"):
            cfg = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
            saver.put(cfg, empty_checkpoint(), {"source": "input", "step": -1}, {})
        assert sorted(t.config["configurable"]["thread_id"] for t in saver.list(None)) == ["a", "b"]
        assert len(list(saver.list(None, limit=1))) == 1
        assert list(saver.list(None, filter={"source": "loop"})) == []
    assert (tmp_path / "p" / ".agentsnap" / "langgraph.sqlite").exists()
