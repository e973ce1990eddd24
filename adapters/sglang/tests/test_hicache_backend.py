"""The HiCache L3 backend, created through SGLang's own StorageBackendFactory ('dynamic' loader)."""

from __future__ import annotations

import pytest
import torch
from agentsnap_core import Repo
from agentsnap_core.testing.servers import need_module


def backend(repo_root, **extra):
    need_module("sglang.srt.mem_cache.storage.backend_factory")
    from sglang.srt.mem_cache.hicache_storage import HiCacheStorageConfig
    from sglang.srt.mem_cache.storage.backend_factory import StorageBackendFactory

    config = HiCacheStorageConfig(
        tp_rank=0, tp_size=1, pp_rank=0, pp_size=1, attn_cp_rank=0, attn_cp_size=1, is_mla_model=False,
        enable_storage_metrics=False, is_page_first_layout=True, model_name="org/tiny-llama",
        extra_config={"backend_name": "agentsnap", "module_path": "agentsnap_sglang.hicache",
                      "class_name": "AgentsnapHiCacheStorage", "repo": str(repo_root), **extra},
    )
    return StorageBackendFactory.create_backend("dynamic", config, None)


def pages(n: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(5)
    return {f"{i:064x}": torch.randn(2, 32, 2, 32, generator=g) for i in range(n)}


def test_pages_round_trip_and_survive_a_restart_through_the_ref(tmp_path):
    repo = Repo.init(tmp_path / "repo")
    store = backend(repo.root, flush_every=3)
    data = pages(5)
    assert store.batch_set(list(data), list(data.values()))
    assert store.batch_exists(list(data) + ["f" * 64]) == 5
    target = torch.empty(2, 32, 2, 32)
    assert store.get(next(iter(data)), target) is target and torch.equal(target, next(iter(data.values())))
    assert store.get("e" * 64, torch.empty(4)) is None
    store.close()

    again = backend(repo.root)  # a restarted server: the map comes back from refs/hicache/<namespace>
    outs = again.batch_get(list(data), [torch.empty(2, 32, 2, 32) for _ in data])
    assert all(torch.equal(o, v) for o, v in zip(outs, data.values(), strict=True))
    assert again.get(next(iter(data)), torch.empty(3)) is None  # wrong size: a miss, nothing written
    history = repo.log(again.ref)
    assert again.ref.startswith("refs/hicache/org-tiny-llama/tp0of1/")
    assert len(history) == 2 and repo.verify()["ok"]
    assert repo.gc(grace_seconds=0)["removed"] == 0  # every page is reachable from the ref's snapshot


def test_an_older_l3_state_is_restored_by_moving_the_ref(tmp_path):
    from agentsnap_core.stores.base import ANY, RefUpdate

    repo = Repo.init(tmp_path / "repo")
    store = backend(repo.root)
    first = pages(2)
    store.batch_set(list(first), list(first.values()))
    old = store.flush()
    store.set("a" * 64, torch.ones(4))
    store.close()
    ref = store.ref
    repo.update_refs([RefUpdate(ref, old, ANY)], "rewind hicache")
    back = backend(repo.root)
    assert back.exists(next(iter(first))) and not back.exists("a" * 64)


def test_missing_repo_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="needs extra_config\\['repo'\\]"):
        backend("")


def test_a_flush_writes_only_the_pages_written_since_the_last_one(tmp_path):
    repo = Repo.init(tmp_path / "repo")
    store = backend(repo.root, flush_every=4)
    data = pages(12)
    keys = list(data)
    for start in range(0, 12, 4):  # three flushes of 4 new pages each
        store.batch_set(keys[start:start + 4], [data[k] for k in keys[start:start + 4]])
    store.close()
    history = repo.log(store.ref)
    assert len(history) == 3
    # each flush names only its own 4 pages (the map is not rewritten: O(new pages) per flush, not O(all))
    assert [len(s.layers["cache"]["refs"]) for s in history] == [4, 4, 4]
    again = backend(repo.root)
    assert again.batch_exists(keys) == 12
    outs = again.batch_get(keys, [torch.empty(2, 32, 2, 32) for _ in keys])
    assert all(torch.equal(o, data[k]) for o, k in zip(outs, keys, strict=True))
    again.clear()  # a clear starts a new chain: nothing older is visible
    assert backend(repo.root).batch_exists(keys[:1]) == 0
    assert repo.gc(grace_seconds=0)["removed"] == 0 and repo.verify()["ok"]  # older flushes stay reachable


def test_namespace_separates_kv_layouts_and_dtypes(tmp_path):
    from sglang.srt.mem_cache.memory_pool_host import LogicalHostPool

    repo = Repo.init(tmp_path / "repo")
    first = backend(repo.root, dtype="bfloat16")
    first.register_mem_pool_host(LogicalHostPool(size=64, page_size=16, layout="page_first"))
    page = torch.randn(2, 32, 2, 32)
    first.set("a" * 64, page)
    first.close()

    same = backend(repo.root, dtype="bfloat16")
    same.register_mem_pool_host(LogicalHostPool(size=64, page_size=16, layout="page_first"))
    assert same.exists("a" * 64)
    other_layout = backend(repo.root, dtype="bfloat16")
    other_layout.register_mem_pool_host(LogicalHostPool(size=64, page_size=16, layout="layer_first"))
    assert not other_layout.exists("a" * 64)
    other_page = backend(repo.root, dtype="bfloat16")
    other_page.register_mem_pool_host(LogicalHostPool(size=64, page_size=32, layout="page_first"))
    assert not other_page.exists("a" * 64)
    assert not backend(repo.root, dtype="float16").exists("a" * 64)  # named up front, before a pool registers
    assert len({same.ref, other_layout.ref, other_page.ref, backend(repo.root, dtype="float16").ref}) == 4
