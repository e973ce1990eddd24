"""AgentsnapStorage against CrewAI's own default LanceDB storage: same operations, same answers."""

from __future__ import annotations

import asyncio
import random
from datetime import datetime, timedelta
from typing import Any

import pytest
from agentsnap_crewai import AgentsnapStorage
from crewai.memory.storage.backend import EmbeddingDimensionMismatchError, StorageBackend
from crewai.memory.storage.lancedb_storage import LanceDBStorage
from crewai.memory.types import MemoryRecord

DIM = 8
SCOPES = ["/", "/a", "/a/b", "/a/b/c", "/ab", "/c", "/c/d"]
CATS = [["x"], ["y"], ["x", "y"], [], ["z"]]
T0 = datetime(2026, 1, 1, 12, 0, 0)


def _vec(rng: random.Random) -> list[float]:
    return [rng.uniform(-1, 1) for _ in range(DIM)]


def _records(n: int = 24, seed: int = 7) -> list[MemoryRecord]:
    rng = random.Random(seed)
    return [
        MemoryRecord(
            id=f"r{i:02d}",
            content=f"memory number {i}",
            scope=SCOPES[i % len(SCOPES)],
            categories=CATS[i % len(CATS)],
            metadata={"team": "red" if i % 3 == 0 else "blue", "n": i},
            importance=round(0.1 + (i % 9) / 10, 2),
            created_at=T0 + timedelta(minutes=7 * i, microseconds=1 + i),
            last_accessed=T0 + timedelta(hours=i, microseconds=1 + i),
            embedding=_vec(rng),
            source="alice" if i % 4 == 0 else None,
            private=i % 5 == 0,
        )
        for i in range(n)
    ]


def _view(rec: MemoryRecord | None) -> Any:
    if rec is None:
        return None
    d = rec.model_dump(mode="json")
    d["embedding"] = [round(x, 5) for x in rec.embedding] if rec.embedding else None
    return d


def _all(store: StorageBackend) -> list[Any]:
    return sorted((_view(r) for r in store.list_records(limit=10_000)), key=lambda d: d["id"])


def _hits(res: list[tuple[MemoryRecord, float]]) -> list[tuple[str, float]]:
    return [(r.id, round(s, 5)) for r, s in res]


@pytest.fixture
def pair(tmp_path: Any) -> tuple[LanceDBStorage, AgentsnapStorage]:
    lance = LanceDBStorage(path=tmp_path / "lance", compact_every=0)
    ours = AgentsnapStorage(tmp_path / "repo")
    recs = _records()
    lance.save(recs)
    ours.save(recs)
    return lance, ours


def _both(pair: tuple[Any, Any], fn: Any) -> Any:
    a, b = fn(pair[0]), fn(pair[1])
    assert b == a
    return b


def test_is_a_storage_backend(tmp_path: Any) -> None:
    assert isinstance(AgentsnapStorage(tmp_path / "r"), StorageBackend)


def test_same_records_lists_scopes_categories_counts(pair: Any) -> None:
    assert len(_both(pair, _all)) == 24
    for rid in ("r00", "r05", "r23", "missing"):
        _both(pair, lambda s, rid=rid: _view(s.get_record(rid)))
    for scope in (None, "/", "/a", "a", "/a/b", "/c/"):
        _both(pair, lambda s, sc=scope: [r.id for r in s.list_records(scope_prefix=sc)])
        _both(pair, lambda s, sc=scope: s.list_categories(sc))
        _both(pair, lambda s, sc=scope: s.count(sc))
    _both(pair, lambda s: [r.id for r in s.list_records(limit=5, offset=3)])
    for scope in ("/", "/a", "/a/b", "/c", "/nothing"):
        _both(pair, lambda s, sc=scope: s.get_scope_info(sc).model_dump(mode="json"))
        _both(pair, lambda s, sc=scope: s.list_scopes(sc))


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_same_search_results_in_the_same_order(pair: Any, seed: int) -> None:
    rng = random.Random(seed)
    q = _vec(rng)
    cases: list[dict[str, Any]] = [
        {},
        {"limit": 3},
        {"limit": 50},
        {"scope_prefix": "/a"},
        {"scope_prefix": "/a/b/"},
        {"scope_prefix": "/"},
        {"categories": ["y"], "limit": 4},
        {"metadata_filter": {"team": "red"}, "limit": 5},
        {"categories": ["x"], "metadata_filter": {"team": "blue"}, "scope_prefix": "/a"},
        {"min_score": 0.25, "limit": 30},
    ]
    for kw in cases:
        got = _both(pair, lambda s, kw=kw: _hits(s.search(q, **kw)))
        assert [s for _, s in got] == sorted((s for _, s in got), reverse=True)
    assert _both(pair, lambda s: _hits(asyncio.run(s.asearch(q, limit=6))))


def test_same_effect_of_update_delete_reset(pair: Any) -> None:
    lance, ours = pair
    rec = lance.get_record("r03")
    changed = rec.model_copy(update={"content": "changed", "categories": ["new"], "embedding": [0.5] * DIM})
    for s in pair:
        s.update(changed)
    _both(pair, _all)
    _both(pair, lambda s: _hits(s.search([0.5] * DIM, limit=3)))
    _both(pair, lambda s: s.delete(record_ids=["r01", "r02", "nope"]))
    _both(pair, lambda s: s.delete(categories=["z"]))
    _both(pair, lambda s: s.delete(categories=["x"], metadata_filter={"team": "red"}, scope_prefix="/a"))
    _both(pair, lambda s: s.delete(older_than=T0 + timedelta(minutes=30)))
    _both(pair, lambda s: asyncio.run(s.adelete(record_ids=["r20"])))
    _both(pair, _all)
    for s in pair:
        s.reset("/a/b")
    _both(pair, _all)
    for s in pair:
        asyncio.run(s.asave(_records(3, seed=99)))
    _both(pair, _all)
    for s in pair:
        s.reset()
    assert _both(pair, lambda s: s.count()) == 0
    assert _both(pair, lambda s: s.search([0.1] * DIM)) == []


def test_delete_by_scope_keeps_root_records_unlike_lancedb(pair: Any) -> None:
    """A documented difference: LanceDB 1.15 also deletes scope '/' records for any scope prefix."""
    lance, ours = pair
    root_before = {r.id for r in ours.list_records() if r.scope == "/"}
    assert root_before
    in_a = {r.id for r in ours.list_records(scope_prefix="/a")}
    assert ours.delete(scope_prefix="/a") == len(in_a)
    assert {r.id for r in ours.list_records() if r.scope == "/"} == root_before
    lance.delete(scope_prefix="/a")
    assert not {r.id for r in lance.list_records() if r.scope == "/"}


def test_embedding_dimension_mismatch_raises_like_lancedb(pair: Any) -> None:
    bad = MemoryRecord(content="wrong size", embedding=[0.1] * (DIM + 1))
    for s in pair:
        with pytest.raises(EmbeddingDimensionMismatchError):
            s.save([bad])
        with pytest.raises(EmbeddingDimensionMismatchError):
            s.search([0.0] * (DIM + 2))
    _both(pair, _all)


def test_bad_metadata_is_refused_and_nothing_is_written(tmp_path: Any) -> None:
    ours = AgentsnapStorage(tmp_path / "repo")
    good = MemoryRecord(content="ok", embedding=[0.1] * DIM)
    bad = MemoryRecord(content="bad", metadata={"obj": object()}, embedding=[0.1] * DIM)
    with pytest.raises(Exception, match="JSON"):
        ours.save([good, bad])
    assert ours.count() == 0


def test_unsnapshotted_writes_survive_a_reopen(tmp_path: Any) -> None:
    ours = AgentsnapStorage(tmp_path / "repo")
    recs = _records(5)
    ours.save(recs[:3])
    ours.snapshot("three")
    ours.save(recs[3:])
    ours.delete(record_ids=["r00"])
    ours.close()
    again = AgentsnapStorage(tmp_path / "repo")
    assert sorted(r.id for r in again.list_records()) == ["r01", "r02", "r03", "r04"]
