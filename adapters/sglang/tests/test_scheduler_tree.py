"""SGLang 0.5.23's default tree: the ``UnifiedRadixCache`` its scheduler builds (``registry.create_tree_cache``), on
the Python and on the Rust tree core, with page size 1, 4 and 16: captured and restored bit-exactly into a fresh
tree built the same way, and decoding continues from the restored pages with bit-equal logits."""

from __future__ import annotations

import pytest
import sglang_cpu
from agentsnap_core import Repo
from agentsnap_core.testing.servers import need_module
from restore_child import continue_from

SHARED = sglang_cpu.PROMPT + [61, 62, 63, 64, 65, 66, 67]  # 32 tokens
BRANCH_A = SHARED + [40 + i for i in range(19)]  # 51 tokens: 48 in whole pages of 16 (or 4), 3 in a partial page
BRANCH_B = SHARED + [90 + i for i in range(17)]  # 49 tokens: 48 + 1
STEPS = 6


@pytest.fixture(autouse=True)
def _sglang():
    need_module("sglang.srt.mem_cache.unified_radix_cache")


def aligned(tokens: list[int], page: int) -> list[int]:
    return tokens[: len(tokens) // page * page]


def used(cache) -> int:
    alloc = cache.tree.token_to_kv_pool_allocator
    return alloc.size - alloc.available_size()


@pytest.mark.parametrize("page", [1, 4, 16])
@pytest.mark.parametrize("core", ["python", "rust"])
def test_scheduler_tree_round_trips_bit_exactly_into_a_fresh_one(tmp_path, core, page):
    from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache

    src = sglang_cpu.make_scheduler_cache(page, tree_core=core)
    assert type(src.tree) is UnifiedRadixCache  # the default tree class the scheduler builds
    assert type(src.tree.tree_core).__name__ == {"python": "UnifiedTreeCore", "rust": "RustUnifiedTreeCore"}[core]
    sglang_cpu.prefill_into(src, BRANCH_A)
    sglang_cpu.prefill_into(src, BRANCH_B)
    expected = sorted([aligned(BRANCH_A, page), aligned(BRANCH_B, page)])
    # the tree holds whole pages only: the partial last page of each prompt was never inserted
    assert src.sequences() == expected
    repo = Repo.init(tmp_path / "repo")
    snap = repo.capture(src, f"unified tree, {core} core, page size {page}")

    dst = sglang_cpu.make_scheduler_cache(page, tree_core=core)
    repo.restore_into(dst, snap.id)
    assert dst.sequences() == expected
    for seq in expected:
        assert sglang_cpu.kv_digest(dst, seq) == sglang_cpu.kv_digest(src, seq)  # every K/V byte of every cached token, all layers
    assert used(dst) == used(src) == len(SHARED) + sum(len(s) - len(SHARED) for s in expected)

    ref = continue_from(src, expected[0], STEPS, [])
    got = continue_from(dst, expected[0], STEPS, [])
    assert got == ref  # same matched length, continuation, and bit-equal logits at every step


def test_scheduler_tree_restores_across_page_sizes_dropping_the_partial_last_page(tmp_path):
    """Pages saved from a page-size-1 tree load into a page-size-16 one: each prefix is cut to whole pages of the
    target (its partial last page is dropped: the server recomputes those tokens on the next request)."""
    from agentsnap_sglang import restore

    src = sglang_cpu.make_scheduler_cache(1, tree_core="python")
    sglang_cpu.prefill_into(src, BRANCH_A)
    sglang_cpu.prefill_into(src, BRANCH_B)
    repo = Repo.init(tmp_path / "repo")
    snap = repo.capture(src, "page size 1")
    dst = sglang_cpu.make_scheduler_cache(16, tree_core="rust")
    stats = restore(repo.objects, dst, repo.read_layer(snap.id, "cache"))
    assert dst.sequences() == sorted([BRANCH_A[:48], BRANCH_B[:48]])
    assert stats == {"loaded_tokens": 32 + 16 + 16, "already_cached_tokens": 32, "partial_page_tokens": 3 + 1}
    for seq in dst.sequences():
        assert sglang_cpu.kv_digest(dst, seq) == sglang_cpu.kv_digest(src, seq)


@pytest.mark.parametrize("core", ["python", "rust"])
def test_namespaced_prefixes_keep_their_namespace(tmp_path, core):
    """The same tokens under another ``extra_key``/``cache_salt`` (a LoRA adapter, a salted request) are another
    prefix with other KV: restored under their own namespace, never into the base model's."""
    src = sglang_cpu.make_scheduler_cache(4, tree_core=core)
    sglang_cpu.prefill_into(src, BRANCH_A)
    sglang_cpu.prefill_into(src, BRANCH_A, extra_key="lora-a", cache_salt="s1", scale=2.0)
    lora = {"extra_key": "lora-a", "cache_salt": "s1"}
    assert sglang_cpu.kv_digest(src, BRANCH_A) != sglang_cpu.kv_digest(src, BRANCH_A, **lora)
    repo = Repo.init(tmp_path / "repo")
    snap = repo.capture(src, "two namespaces")
    record = repo.read_layer(snap.id, "cache")
    base_rec, lora_rec = sorted(record["sequences"], key=lambda r: r["extra"])
    assert not {p["hash"] for p in base_rec["pages"]} & {p["hash"] for p in lora_rec["pages"]}

    dst = sglang_cpu.make_scheduler_cache(4, tree_core=core)
    repo.restore_into(dst, snap.id)
    assert dst.entries() == src.entries()
    assert sglang_cpu.kv_digest(dst, BRANCH_A) == sglang_cpu.kv_digest(src, BRANCH_A)
    assert sglang_cpu.kv_digest(dst, BRANCH_A, **lora) == sglang_cpu.kv_digest(src, BRANCH_A, **lora)
    assert sglang_cpu.kv_digest(dst, BRANCH_A, extra_key="lora-b")[0] == 0


@pytest.mark.parametrize("core", ["python", "rust"])
def test_a_tree_after_eviction_lists_what_is_left_and_explicit_sequences_need_no_walk(tmp_path, core, monkeypatch):
    """After SGLang evicts a leaf (its NodeIds are gone, leaving gaps on the Rust core), capture lists exactly the
    prefixes still cached. Sequences passed explicitly are captured without listing the tree at all; a Rust tree
    that cannot be listed within the probe limit is refused with a message saying so."""
    from agentsnap_sglang import capture, radix
    from sglang.srt.mem_cache.base_prefix_cache import EvictParams

    src = sglang_cpu.make_scheduler_cache(4, tree_core=core)
    third = SHARED + [120 + i for i in range(8)]
    for tokens in (BRANCH_A, BRANCH_B, third):
        sglang_cpu.prefill_into(src, tokens)
    src.match(BRANCH_A)  # touch: A and the shared prefix are the most recently used
    src.match(third)
    src.tree.evict(EvictParams(num_tokens=16))  # the least recently used leaf: B's 16 tokens past SHARED
    assert src.sequences() == sorted([BRANCH_A[:48], third])
    repo = Repo.init(tmp_path / "repo")
    dst = sglang_cpu.make_scheduler_cache(4, tree_core=core)
    repo.restore_into(dst, repo.capture(src, "after eviction").id)
    assert dst.sequences() == src.sequences()
    for seq in dst.sequences():
        assert sglang_cpu.kv_digest(dst, seq) == sglang_cpu.kv_digest(src, seq)

    monkeypatch.setattr(radix, "MAX_NODE_PROBES", 1)
    record = capture(repo.objects, src, [third])  # no listing: match_prefix on the given tokens
    assert [r["tokens"] for r in record["sequences"]] == [third]
    if core == "rust":
        with pytest.raises(radix.InvalidInput, match="pass the sequences to capture explicitly"):
            src.sequences()
