"""The cache layer: pages keyed by a chained prefix hash, fingerprint checks, verify/gc see pages."""

from __future__ import annotations

import os
import random

import pytest
from agentsnap_core import InvalidInput, Repo
from agentsnap_core.layers import kvcache
from agentsnap_core.layers.kvcache import CacheMismatch

PAGE = 4
FP = kvcache.fingerprint(
    model="tiny", weights="w0", dtype="float32", tokenizer="tok", engine="fake-1", layout="bytes-per-token"
)


def kv_bytes(tokens: list[int], start: int, end: int) -> bytes:
    """A stand-in KV cache: 32 bytes per token slot that depend on the whole prefix (as attention KV does)."""
    out = bytearray()
    for i in range(start, end):
        rng = random.Random(hash(tuple(tokens[: i + 1])))
        out += bytes(rng.randrange(256) for _ in range(32))
    return bytes(out)


def write(repo: Repo, tokens: list[int], calls: list[tuple[int, int]] | None = None, **kw):
    def page_bytes(start: int, end: int) -> bytes:
        if calls is not None:
            calls.append((start, end))
        return kv_bytes(tokens, start, end)

    return kvcache.write_cache(repo.objects, FP, tokens, PAGE, page_bytes, **kw)


def test_pages_round_trip_through_a_snapshot(tmp_path):
    repo = Repo.init(tmp_path / "r")
    tokens = list(range(1, 11))
    record = write(repo, tokens)
    assert [(p["start"], p["n"]) for p in record["pages"]] == [(0, 4), (4, 4), (8, 2)]
    snap = repo.snapshot("kv", layers={"cache": record}, capture_world=False)
    back = repo.read_layer(snap.id, "cache")
    got = b"".join(data for _s, _e, data in kvcache.iter_pages(repo.objects, back, FP))
    assert got == kv_bytes(tokens, 0, len(tokens))
    assert snap.layers["cache"]["refs"] == record["refs"]


def test_forks_share_prefix_pages_and_differ_only_in_the_tail(tmp_path):
    repo = Repo.init(tmp_path / "r")
    base = list(range(1, 9))
    a = write(repo, base + [50, 51])
    b = write(repo, base + [60, 61])
    assert kvcache.shared_prefix_pages(a, b) == 2
    assert [p["content"] for p in a["pages"][:2]] == [p["content"] for p in b["pages"][:2]]
    assert a["pages"][2]["content"] != b["pages"][2]["content"]
    # another model's cache for the same tokens never shares a page hash
    other = kvcache.write_cache(repo.objects, {**FP, "weights": "w1"}, base, PAGE, lambda s, e: kv_bytes(base, s, e))
    assert kvcache.shared_prefix_pages(a, other) == 0


def test_previous_record_skips_serialising_unchanged_full_pages(tmp_path):
    repo = Repo.init(tmp_path / "r")
    tokens = list(range(1, 11))
    first = write(repo, tokens)
    calls: list[tuple[int, int]] = []
    tokens += [11, 12, 13]
    second = write(repo, tokens, calls, previous=first)
    assert calls == [(8, 12), (12, 13)]  # the two full pages were reused, the old partial page rewritten
    got = b"".join(d for _s, _e, d in kvcache.iter_pages(repo.objects, second, FP))
    assert got == kv_bytes(tokens, 0, len(tokens))


def test_mismatched_fingerprint_is_refused_with_the_differences(tmp_path):
    repo = Repo.init(tmp_path / "r")
    record = write(repo, [1, 2, 3])
    with pytest.raises(CacheMismatch) as info:
        list(kvcache.iter_pages(repo.objects, record, {**FP, "dtype": "bfloat16", "layout": "cuda"}))
    assert set(info.value.differences) == {"dtype", "layout"}
    assert "re-prefill" in str(info.value)


def test_tampered_token_list_is_refused(tmp_path):
    repo = Repo.init(tmp_path / "r")
    record = write(repo, [1, 2, 3, 4, 5])
    bad = {**record, "tokens": [1, 2, 3, 9, 5]}
    with pytest.raises(InvalidInput, match="hashes do not match"):
        list(kvcache.iter_pages(repo.objects, bad, FP))
    with pytest.raises(InvalidInput, match="not an agentsnap KV cache record"):
        kvcache.check_record({"pages": []})


def test_verify_and_gc_see_the_pages(tmp_path):
    repo = Repo.init(tmp_path / "r")
    tokens = list(range(200))  # 50 pages
    record = write(repo, tokens)
    repo.snapshot("kv", layers={"cache": record}, capture_world=False)
    assert repo.gc(grace_seconds=0)["removed"] == 0
    got = b"".join(d for _s, _e, d in kvcache.iter_pages(repo.objects, repo.read_layer("HEAD", "cache"), FP))
    assert got == kv_bytes(tokens, 0, len(tokens))
    assert repo.verify()["ok"]
    victim = record["pages"][7]["content"]
    repo.objects.delete(victim)
    report = repo.verify()
    assert not report["ok"]
    assert victim[:12] in repr(report["problems"])


def test_large_page_is_chunked(tmp_path):
    repo = Repo.init(tmp_path / "r")
    blob = os.urandom(300 * 1024)
    record = kvcache.write_cache(repo.objects, FP, [1, 2], 2, lambda s, e: blob)
    assert kvcache.summary(record)["bytes"] == len(blob)
    assert [d for _s, _e, d in kvcache.iter_pages(repo.objects, record)] == [blob]


def test_previous_pages_missing_from_this_store_are_written_again(tmp_path):
    one, two = Repo.init(tmp_path / "one"), Repo.init(tmp_path / "two")
    tokens = list(range(1, 11))
    first = write(one, tokens)
    calls: list[tuple[int, int]] = []
    second = write(two, tokens, calls, previous=first)  # restored from repo one, captured into repo two
    assert calls == [(0, 4), (4, 8), (8, 10)]
    got = b"".join(d for _s, _e, d in kvcache.iter_pages(two.objects, second, FP))
    assert got == kv_bytes(tokens, 0, len(tokens))
