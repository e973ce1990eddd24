"""SGLang: radix-tree prefixes + MHATokenToKVPool pages round-trip bit-exactly into fresh cache objects
in a NEW process, and decoding from the restored pages continues exactly, with no prefill."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import sglang_cpu
from agentsnap_core import Repo
from agentsnap_core.layers import kvcache
from agentsnap_core.layers.kvcache import CacheMismatch
from agentsnap_core.testing.kv import corrupted_copy
from agentsnap_core.testing.servers import need_module
from restore_child import continue_from

HERE = Path(__file__).parent
STEPS = 10
BRANCH_A = sglang_cpu.PROMPT + [40, 41, 42, 43, 44]
BRANCH_B = sglang_cpu.PROMPT + [90, 91, 92]


@pytest.fixture(autouse=True)
def _sglang():
    need_module("sglang.srt.mem_cache.radix_cache")


def run_child(root: Path, *snaps: str) -> list[dict]:
    proc = subprocess.run(
        [sys.executable, str(HERE / "restore_child.py"), str(root), str(STEPS), *snaps],
        capture_output=True, text=True, timeout=600,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), *sys.path])},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [json.loads(x[len("RESTORED "):]) for x in proc.stdout.splitlines() if x.startswith("RESTORED ")]


def test_tree_and_pages_restore_bit_exactly_in_a_new_process_and_decode_without_prefill(tmp_path, capsys):
    repo = Repo.init(tmp_path / "repo")
    cache = sglang_cpu.make_cache()
    sglang_cpu.prefill_into(cache, BRANCH_A)
    sglang_cpu.prefill_into(cache, BRANCH_B)  # shares the prompt's nodes and slots in the tree
    assert cache.sequences() == sorted([BRANCH_A, BRANCH_B])
    snap = repo.capture(cache, "radix tree with two branches")
    record = repo.read_layer(snap.id, "cache")
    rec_a, rec_b = sorted(record["sequences"], key=lambda r: r["tokens"])
    full = len(sglang_cpu.PROMPT) // sglang_cpu.PAGE_SIZE
    assert [kvcache.page_ref(p) for p in rec_a["pages"][:full]] == [kvcache.page_ref(p) for p in rec_b["pages"][:full]]

    # the uninterrupted reference: the same server-side procedure on the original objects
    ref_calls: list[int] = []
    ref_n, ref_out, ref_logits = continue_from(cache, cache.sequences()[0], STEPS, ref_calls)
    assert len(set(ref_out)) >= 4, f"continuation too uniform to prove anything: {ref_out}"

    bad = corrupted_copy(repo, snap.id, page=1)
    restored, corrupt = run_child(repo.root, snap.id, bad)

    assert restored["sequences"] == cache.sequences()
    assert restored["digests"] == sglang_cpu.digests(cache)  # every K/V byte of every cached token, all layers
    assert restored["matched"] == ref_n == len(cache.sequences()[0])
    assert restored["calls"] == [1] * (STEPS + 1)  # the last prompt token, then one per decoded token: no prefill
    assert restored["continuation"] == ref_out
    assert restored["logits"] == ref_logits  # bit-equal at every step
    # control: a perturbed page restores different bytes and must change the logits
    assert corrupt["digests"] != sglang_cpu.digests(cache)
    assert corrupt["logits"][0] != ref_logits[0]
    with capsys.disabled():
        print(f"\n[sglang] restored {len(cache.sequences())} radix branches into fresh RadixCache/MHATokenToKVPool in a new "
              f"process; K/V bytes identical; decode of {STEPS} tokens from restored pages identical with "
              f"bit-equal logits, forward calls {restored['calls'][:3]}...; corrupted page changed logits: True, "
              f"changed continuation: {corrupt['continuation'] != ref_out}")


def test_restore_keeps_an_already_cached_prefix_and_loads_only_the_rest(tmp_path):
    repo = Repo.init(tmp_path / "repo")
    src = sglang_cpu.make_cache()
    sglang_cpu.prefill_into(src, BRANCH_A)
    snap = repo.capture(src, "a")
    target = sglang_cpu.make_cache()
    sglang_cpu.prefill_into(target, sglang_cpu.PROMPT)
    free_before = target.tree.token_to_kv_pool_allocator.available_size()
    from agentsnap_sglang import restore

    stats = restore(repo.objects, target, repo.read_layer(snap.id, "cache"))
    assert stats == {"loaded_tokens": 5, "already_cached_tokens": len(sglang_cpu.PROMPT), "partial_page_tokens": 0}
    assert target.tree.token_to_kv_pool_allocator.available_size() == free_before - 5
    assert sglang_cpu.digests(target)[json.dumps(BRANCH_A)] == sglang_cpu.digests(src)[json.dumps(BRANCH_A)]


def test_mismatched_fingerprint_and_full_pool_are_refused_without_changes(tmp_path):
    repo = Repo.init(tmp_path / "repo")
    src = sglang_cpu.make_cache()
    sglang_cpu.prefill_into(src, BRANCH_A)
    snap = repo.capture(src, "a")
    other = sglang_cpu.make_cache()
    other.weights = "another-checkpoint"
    with pytest.raises(CacheMismatch, match="weights"):
        repo.restore_into(other, snap.id)
    assert other.sequences() == []
    tiny = sglang_cpu.make_cache(size=8)
    with pytest.raises(kvcache.InvalidInput, match="no room"):
        repo.restore_into(tiny, snap.id)
    assert tiny.sequences() == [] and tiny.tree.token_to_kv_pool_allocator.available_size() == 8
    assert repo.verify()["ok"]


def test_radix_cache_with_page_size_4_round_trips_whole_pages(tmp_path):
    """The older RadixCache over a paged allocator: only whole pages are in the tree, and they round-trip."""
    from agentsnap_sglang import restore

    src = sglang_cpu.make_cache(page_size=4)
    sglang_cpu.prefill_into(src, BRANCH_A)  # 30 tokens: 28 in whole pages
    sglang_cpu.prefill_into(src, BRANCH_B)  # 28 tokens
    assert src.sequences() == sorted([BRANCH_A[:28], BRANCH_B[:28]])
    repo = Repo.init(tmp_path / "repo")
    snap = repo.capture(src, "paged")
    dst = sglang_cpu.make_cache(page_size=4)
    stats = restore(repo.objects, dst, repo.read_layer(snap.id, "cache"))
    assert stats == {"loaded_tokens": 24 + 4 + 4, "already_cached_tokens": 24, "partial_page_tokens": 0}
    assert sglang_cpu.digests(dst) == sglang_cpu.digests(src)


def test_radix_cache_restore_into_a_larger_page_size_drops_only_the_partial_last_page(tmp_path):
    """A page-size-1 snapshot into a page-size-4 RadixCache: each prefix is cut to whole pages (before, the paged
    allocator was asked for a non-multiple of its page size and the restore died on its assertion)."""
    from agentsnap_sglang import restore

    src = sglang_cpu.make_cache()
    sglang_cpu.prefill_into(src, BRANCH_A)  # 30 tokens, all in the tree at page size 1
    repo = Repo.init(tmp_path / "repo")
    snap = repo.capture(src, "page size 1")
    dst = sglang_cpu.make_cache(page_size=4)
    stats = restore(repo.objects, dst, repo.read_layer(snap.id, "cache"))
    assert stats == {"loaded_tokens": 28, "already_cached_tokens": 0, "partial_page_tokens": 2}
    assert dst.sequences() == [BRANCH_A[:28]]
    assert sglang_cpu.kv_digest(dst, BRANCH_A) == sglang_cpu.kv_digest(src, BRANCH_A[:28])
