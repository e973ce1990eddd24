"""``repo.capture`` / ``restore_into`` on CrewAI's *default* memory: a ``Memory()`` backed by LanceDB."""

from __future__ import annotations

from pathlib import Path

import pytest
from agentsnap_core import Repo
from crewai.memory.storage.lancedb_storage import LanceDBStorage
from crewai.memory.unified_memory import Memory
from crewai_fakes import ScriptedLLM, embed


def _contents(memory: Memory) -> list[tuple[str, str]]:
    return sorted((r.scope, r.content) for r in memory.list_records(limit=1000))


def test_default_lancedb_memory_captures_and_restores(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CREWAI_STORAGE_DIR", str(tmp_path / "crewai"))
    memory = Memory(llm=ScriptedLLM(), embedder=embed)  # no storage given: CrewAI's default
    assert isinstance(memory._storage, LanceDBStorage)
    for i, fact in enumerate(["The capital of Atlantis is Poseidonia", "Atlantis has 12000 souls", "Atlantis sank"]):
        memory.remember(fact, scope=f"/facts/{i % 2}", categories=["geo"], importance=0.5)
    kept = _contents(memory)
    repo = Repo.init(tmp_path / "repo")

    snap = repo.capture(memory, "three facts")

    memory.reset()
    memory.remember("Atlantis is a myth", scope="/wrong", categories=["x"], importance=0.1)
    repo.restore_into(memory, snap.id)
    assert _contents(memory) == kept
    hits = memory.recall("capital of Atlantis", depth="shallow", limit=3)
    assert "The capital of Atlantis is Poseidonia" in [m.record.content for m in hits]

    # a second default Memory on another LanceDB directory gets the same records
    monkeypatch.setenv("CREWAI_STORAGE_DIR", str(tmp_path / "other"))
    fresh = Memory(llm=ScriptedLLM(), embedder=embed)
    repo.restore_into(fresh, snap.id)
    assert _contents(fresh) == kept


def test_capture_pages_through_more_records_than_one_page(tmp_path: Path) -> None:
    """More records than a single ``list_records`` page (CrewAI's default page is 200)."""
    from datetime import datetime, timedelta

    from crewai.memory.types import MemoryRecord

    t0 = datetime(2026, 1, 1)
    store = LanceDBStorage(path=str(tmp_path / "lance"))
    store.save([MemoryRecord(id=f"r{i:04d}", content=f"fact {i}", scope="/s", embedding=[float(i), 1.0, 0.0],
                             created_at=t0 + timedelta(seconds=i), last_accessed=t0) for i in range(450)])
    repo = Repo.init(tmp_path / "repo")
    snap = repo.capture(store, "450 facts")
    assert len(repo.read_layer(snap.id, "state")["records"]) == 450
    store.reset()
    repo.restore_into(store, snap.id)
    assert store.count() == 450
