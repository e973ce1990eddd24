"""``Memory.forget(scope="facts")``: the scope without its leading slash names the same records as ``"/facts"``.

CrewAI 1.15's ``LanceDBStorage.delete`` prefixes a bare scope with ``/`` (``if not prefix.startswith("/")``), as its
``list_records``, ``count`` and ``get_scope_info`` do, and ``Memory`` stores scopes with the slash (``/facts``, what
its analysis suggests and ``join_scope_paths`` makes). ``AgentsnapStorage.delete`` used to compare the bare prefix
with the stored scope as it is: ``forget(scope="facts")`` answered 0 and kept the records that
``list_records(scope="facts")`` and ``info("facts")`` had just shown.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import pytest
from agentsnap_crewai import AgentsnapStorage
from crewai.memory.storage.lancedb_storage import LanceDBStorage
from crewai.memory.types import MemoryRecord
from crewai.memory.unified_memory import Memory
from crewai_fakes import ScriptedLLM, embed

T0 = datetime(2026, 1, 1)
SCOPES = {"f1": "/facts", "f2": "/facts/geo", "f3": "/facts", "o1": "/other", "r1": "/"}


def _records() -> list[MemoryRecord]:
    return [MemoryRecord(id=rid, content=f"fact {rid}", scope=scope, categories=["geo"] if rid != "f3" else [],
                         embedding=[float(i), 1.0, 0.0], created_at=T0 + timedelta(minutes=i), last_accessed=T0)
            for i, (rid, scope) in enumerate(SCOPES.items())]


def _ids(store: object) -> set[str]:
    return {r.id for r in store.list_records(limit=1000)}  # type: ignore[attr-defined]


@pytest.mark.parametrize("scope", ["facts", "facts/", "/facts", "/facts/"])
def test_forget_by_scope_deletes_what_the_scope_lists(tmp_path: Path, scope: str) -> None:
    memory = Memory(llm=ScriptedLLM(), storage=AgentsnapStorage(tmp_path / "repo"), embedder=embed)
    memory._storage.save(_records())
    listed = {r.id for r in memory.list_records(scope=scope)}
    assert listed == {"f1", "f2", "f3"} and memory.info(scope).record_count == 3
    assert memory.forget(scope=scope) == 3
    assert _ids(memory._storage) == {"o1", "r1"}
    memory.close()


@pytest.mark.parametrize("scope", ["facts", "/facts/"])
def test_delete_by_bare_scope_matches_lancedb(tmp_path: Path, scope: str) -> None:
    lance = LanceDBStorage(path=tmp_path / "lance", compact_every=0)
    ours = AgentsnapStorage(tmp_path / "repo")
    for s in (lance, ours):
        s.save(_records())
    lance.delete(scope_prefix=scope)
    ours.delete(scope_prefix=scope)
    # the same records go, apart from the root-scope record LanceDB 1.15 also deletes (a documented difference)
    assert _ids(ours) - {"r1"} == _ids(lance) == {"o1"}
    assert "r1" in _ids(ours)


def test_bare_scope_with_other_criteria_and_records_stored_without_the_slash(tmp_path: Path) -> None:
    ours = AgentsnapStorage(tmp_path / "repo")
    ours.save([*_records(), MemoryRecord(id="bare", content="stored as 'facts'", scope="facts", categories=["geo"],
                                         embedding=[9.0, 1.0, 0.0], created_at=T0, last_accessed=T0)])
    assert ours.delete(scope_prefix="facts", categories=["geo"]) == 3  # f1, f2 and the bare-scoped record; not f3
    assert _ids(ours) == {"f3", "o1", "r1"}
    assert ours.delete(scope_prefix="facts", older_than=T0 + timedelta(hours=1)) == 1
    assert _ids(ours) == {"o1", "r1"}
