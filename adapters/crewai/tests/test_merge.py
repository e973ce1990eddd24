"""Merging two forks of a crew's memory: records unioned by id, conflicting updates reported."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from agentsnap_core import Repo
from agentsnap_core.plugins import get_plugin_manager
from agentsnap_crewai import AgentsnapStorage, merge_memory, merge_storages
from crewai.memory.types import MemoryRecord


def rec(rid: str, content: str, vec: float = 0.1) -> MemoryRecord:
    t = datetime(2026, 1, 1)
    return MemoryRecord(id=rid, content=content, embedding=[vec] * 4, created_at=t, last_accessed=t)


def payload(**contents: str) -> dict:
    return {"kind": "crewai.memory", "v": 1, "records": {k: {"id": k, "content": v, "last_accessed": ""} for k, v in contents.items()}}


def test_two_forks_merge_by_id_with_conflicts_reported(tmp_path: Path) -> None:
    repo = Repo.init(tmp_path / "repo")
    main = AgentsnapStorage(repo)
    main.save([rec("shared", "base fact"), rec("edited", "v1"), rec("both", "v1"), rec("gone", "old")])
    base = main.snapshot("base")
    fork = main.fork("attempt-1")

    main.save([rec("ours-only", "found by main")])
    main.update(rec("both", "main's version"))
    main.touch_records(["shared"])  # a recall is not a change
    fork.save([rec("theirs-only", "found by the fork")])
    fork.update(rec("edited", "v2 from fork"))
    fork.update(rec("both", "fork's version"))
    fork.delete(record_ids=["gone"])

    result = merge_storages(main, fork)
    contents = {rid: r["content"] for rid, r in result.records.items()}
    assert contents == {
        "shared": "base fact",
        "edited": "v2 from fork",
        "both": "main's version",
        "ours-only": "found by main",
        "theirs-only": "found by the fork",
    }
    assert [c["id"] for c in result.conflicts] == ["both"]
    assert result.conflicts[0]["theirs"]["content"] == "fork's version"
    snap = result.snapshot
    assert snap is not None and len(snap.parents) == 2 and repo.resolve("crewai/memory") == snap.id
    assert {r.id: r.content for r in main.list_records()} == contents
    assert AgentsnapStorage(repo).rows() == main.rows()  # the merge is durable
    assert {r.id for r in fork.list_records()} == {"shared", "edited", "both", "theirs-only"}  # the fork is untouched
    assert base.id in {s.id for s in repo.walk([snap.id])}


def test_core_merge_engine_reaches_the_adapter_through_the_hook() -> None:
    hook = get_plugin_manager().hook.agentsnap_merge_state
    merged, conflicts = hook(base=payload(a="1"), ours=payload(a="1", b="2"), theirs=payload(a="3"), context={})
    assert {k: r["content"] for k, r in merged["records"].items()} == {"a": "3", "b": "2"}
    assert conflicts == []
    merged, conflicts = hook(base=payload(a="1"), ours=payload(a="2"), theirs=payload(a="3"), context={})
    assert merged["records"]["a"]["content"] == "2" and [c["id"] for c in conflicts] == ["a"]
    assert hook(base=None, ours={"x": 1}, theirs={"x": 2}, context={}) is None  # not CrewAI state: core default


def test_merge_without_common_ancestor_is_a_union() -> None:
    result = merge_memory(None, payload(a="1", s="x"), payload(b="2", s="x"))
    assert sorted(result.records) == ["a", "b", "s"] and result.conflicts == []
