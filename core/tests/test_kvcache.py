"""The cache layer: pages keyed by a chained prefix hash, fingerprint checks, verify/gc see pages."""

from __future__ import annotations

import os
import random

import pytest
from agentsnap_core import InvalidInput, Repo
from agentsnap_core.errors import ObjectCorrupt
from agentsnap_core.format import content
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


def read_all(store, record, expected=FP) -> bytes:
    """The record's bytes through read_into: each page into two buffers of its own (as an engine's layers)."""
    out: dict[int, tuple[bytearray, bytearray]] = {}

    def page_buffers(start: int, end: int) -> list[bytearray]:
        n = (end - start) * 32
        out[start] = (bytearray(n // 2), bytearray(n - n // 2))
        return list(out[start])

    kvcache.read_into(store, record, page_buffers, expected)
    return b"".join(a + b for _start, (a, b) in sorted(out.items()))


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


def test_forks_share_prefix_pages_and_differ_only_in_the_tail(tmp_path, monkeypatch):
    monkeypatch.setattr(kvcache, "SEGMENT_BYTES", 2 * PAGE * 32)  # segments of 2 pages
    repo = Repo.init(tmp_path / "r")
    base = list(range(1, 9))
    a = write(repo, base + [50, 51])
    b = write(repo, base + [60, 61])
    assert kvcache.shared_prefix_pages(a, b) == 2
    assert a["segment_pages"] == 2
    # captured independently, the two forks' aligned prefix segment is the same object (stored once)
    assert [kvcache.page_ref(p) for p in a["pages"][:2]] == [kvcache.page_ref(p) for p in b["pages"][:2]]
    assert kvcache.page_ref(a["pages"][2]) != kvcache.page_ref(b["pages"][2])
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
    victim = kvcache.page_ref(record["pages"][7])[0]
    repo.objects.delete(victim)
    report = repo.verify()
    assert not report["ok"]
    assert victim[:12] in repr(report["problems"])


def test_large_page_round_trips(tmp_path):
    repo = Repo.init(tmp_path / "r")
    blob = os.urandom(300 * 1024)
    record = kvcache.write_cache(repo.objects, FP, [1, 2], 2, lambda s, e: blob)
    assert kvcache.summary(record)["bytes"] == len(blob)
    assert [d for _s, _e, d in kvcache.iter_pages(repo.objects, record)] == [blob]


def test_page_over_the_object_limit_is_stored_as_chunked_content(tmp_path, monkeypatch):
    monkeypatch.setattr(kvcache, "MAX_SEGMENT_BYTES", 200 * 1024)
    repo = Repo.init(tmp_path / "r")
    blob = os.urandom(300 * 1024)
    record = kvcache.write_cache(repo.objects, FP, [1, 2, 3], 2, lambda s, e: blob[: 150 * 1024 * (e - s)])
    assert "content" in record["pages"][0] and "segment" in record["pages"][1]
    assert [bytes(d) for _s, _e, d in kvcache.iter_pages(repo.objects, record)] == [blob, blob[: 150 * 1024]]


def test_pages_are_grouped_into_few_raw_segments(tmp_path, monkeypatch):
    monkeypatch.setattr(kvcache, "SEGMENT_BYTES", 4 * PAGE * 32)  # 4 pages a segment
    repo = Repo.init(tmp_path / "r")
    tokens = list(range(1, 40))  # 10 pages, the last partial
    record = write(repo, tokens)
    assert len(record["refs"]) == 3  # pages 0-3, 4-7, 8-9
    assert [p["offset"] for p in record["pages"]] == [0, 128, 256, 384] * 2 + [0, 128]
    kind, raw = repo.objects.get(record["refs"][0])
    assert raw == kv_bytes(tokens, 0, 16)  # one plain blob of the pages' bytes
    assert repo.objects.get_stored(record["refs"][0])[5] == 0  # stored uncompressed (codec 0)
    got = b"".join(d for _s, _e, d in kvcache.iter_pages(repo.objects, record, FP))
    assert got == kv_bytes(tokens, 0, len(tokens))


def test_a_capture_returns_with_every_segment_file_and_directory_fsynced(tmp_path, monkeypatch):
    """Segments are named by the record the moment write_cache returns (an engine hands it to another process's
    snapshot): each segment's file and the directories naming it must be durable by then, the store owing nothing."""
    monkeypatch.setattr(kvcache, "SEGMENT_BYTES", 4 * PAGE * 32)  # 4 pages a segment: several segment files
    repo = Repo.init(tmp_path / "r")
    synced: set[tuple[int, int]] = set()
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        st = os.fstat(fd)
        synced.add((st.st_dev, st.st_ino))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    record = write(repo, list(range(1, 40)))
    assert len(record["refs"]) == 3
    for seg in record["refs"]:
        path = repo.objects._path(seg)
        for p in (path, os.path.dirname(path), os.path.dirname(os.path.dirname(path))):
            st = os.stat(p)
            assert (st.st_dev, st.st_ino) in synced, p
    assert not repo.objects._pending_files and not repo.objects._pending_dirs


def test_page_hashes_are_the_canonical_encodings_hash():
    """Stored records name pages by these hashes: the fast encoding must give pack()'s bytes."""
    import blake3
    from agentsnap_core.format.encoding import pack

    tokens = [0, 1, 127, 128, 255, 65535, 65536, 2**31, 2**40]
    extra = ["fp", "lora-1"]
    parent = kvcache.page_hash(None, tokens, extra)
    assert parent == blake3.blake3(pack(["", tokens, extra])).hexdigest()
    assert kvcache.page_hash(parent, tokens[:3], extra) == blake3.blake3(pack([parent, tokens[:3], extra])).hexdigest()


def test_page_bytes_may_be_a_list_of_buffers(tmp_path):
    repo = Repo.init(tmp_path / "r")
    tokens = list(range(1, 11))
    record = kvcache.write_cache(repo.objects, FP, tokens, PAGE, lambda s, e: [
        kv_bytes(tokens, s, e)[:8], memoryview(kv_bytes(tokens, s, e)[8:])])
    got = b"".join(d for _s, _e, d in kvcache.iter_pages(repo.objects, record, FP))
    assert got == kv_bytes(tokens, 0, len(tokens))


def test_a_corrupted_segment_is_detected(tmp_path):
    repo = Repo.init(tmp_path / "r")
    tokens = list(range(1, 11))
    record = write(repo, tokens)
    seg = record["refs"][0]
    path = repo.objects._path(seg)
    data = bytearray(open(path, "rb").read())
    data[-5] ^= 0xFF
    os.chmod(path, 0o644)
    with open(path, "wb") as f:
        f.write(data)
    with pytest.raises(ObjectCorrupt):
        list(kvcache.iter_pages(repo.objects, record, FP))
    with pytest.raises(ObjectCorrupt):  # read straight into the engine's buffers: verified where it landed
        read_all(repo.objects, record)
    data[-5] ^= 0xFF  # a file longer than its object is refused too
    data.append(0)
    with open(path, "wb") as f:
        f.write(data)
    with pytest.raises(ObjectCorrupt):
        read_all(repo.objects, record)


def test_read_into_fills_the_engines_buffers_from_every_kind_of_page(tmp_path, monkeypatch):
    monkeypatch.setattr(kvcache, "SEGMENT_BYTES", 4 * PAGE * 32)  # 4 pages a segment
    repo = Repo.init(tmp_path / "r")
    tokens = list(range(1, 40))
    record = write(repo, tokens)
    with monkeypatch.context() as m:  # loose segments: one scatter read each, nothing read whole and copied
        m.setattr(content, "get_raw", None)
        assert read_all(repo.objects, record) == kv_bytes(tokens, 0, len(tokens))
    # a fork that reuses part of an old segment (pages 4-7 of 4-9's: bytes before and after it unused)
    fork = tokens[:26] + [99, 98]
    reused = write(repo, fork, previous=record)
    assert reused["pages"][5]["segment"] == record["pages"][5]["segment"]
    assert read_all(repo.objects, reused) == kv_bytes(fork, 0, len(fork))
    # version-1 pages and packed segments (written in a batch) are read and copied
    old = write_v1(repo, tokens[:10])
    assert read_all(repo.objects, old) == kv_bytes(tokens, 0, 10)
    with repo.objects.batch():
        packed = write(repo, tokens[:7])
        assert read_all(repo.objects, packed) == kv_bytes(tokens, 0, 7)
    assert read_all(repo.objects, packed) == kv_bytes(tokens, 0, 7)
    with pytest.raises(CacheMismatch):
        read_all(repo.objects, record, dict(FP, weights="w1"))


def test_small_page_buffers_are_verified_in_updates_large_enough_to_run_without_the_gil():
    """A KV head's rows of a page are 4-16 KiB; BLAKE3's binding holds the GIL while it hashes 16 KiB or less, so
    verifying threads hashed one at a time. hash_views gathers small buffers into large updates, same digest."""
    import blake3

    rng = random.Random(3)
    views = [memoryview(bytes(rng.randrange(256) for _ in range(n)))
             for n in [16384] * 70 + [4096, 1, 0, 200_000, 16384, 8192, 3]]
    sizes: list[int] = []

    class Spy:
        def __init__(self) -> None:
            self.h = blake3.blake3()

        def update(self, data: memoryview) -> None:
            sizes.append(memoryview(data).nbytes)
            self.h.update(data)

    spy = Spy()
    content.hash_views(spy, views)
    assert spy.h.hexdigest() == blake3.blake3(b"".join(views)).hexdigest()
    assert sizes[-1] == 16384 + 8192 + 3  # what is left after the last large buffer
    assert all(n > 16384 for n in sizes[:-1]), sizes
    assert 200_000 in sizes  # a large buffer is hashed where it is, not copied


def test_read_into_refuses_buffers_that_do_not_fit_a_page(tmp_path):
    repo = Repo.init(tmp_path / "r")
    tokens = list(range(1, 11))
    record = write(repo, tokens)
    with pytest.raises(InvalidInput, match="KV page at token 0 has 128 bytes"):
        kvcache.read_into(repo.objects, record, lambda s, e: [bytearray(10)])


def test_a_page_pointing_past_its_segment_is_refused(tmp_path):
    repo = Repo.init(tmp_path / "r")
    record = write(repo, list(range(1, 11)))
    record["pages"][1]["offset"] = 10_000
    with pytest.raises(InvalidInput, match="KV page at token 4 has 0 bytes"):
        list(kvcache.iter_pages(repo.objects, record, FP))
    with pytest.raises(InvalidInput, match="KV page at token 4 has 0 bytes"):
        read_all(repo.objects, record)
    record["pages"][1]["offset"] = -1
    with pytest.raises(InvalidInput, match="page 1 is malformed"):
        list(kvcache.iter_pages(repo.objects, record, FP))


def write_v1(repo: Repo, tokens: list[int]) -> dict:
    """A record as version 1 wrote it: one chunked, compressed content id per page."""
    keys = [kvcache.fingerprint_key(FP)]
    pages, parent = [], None
    for start in range(0, len(tokens), PAGE):
        end = min(start + PAGE, len(tokens))
        parent = kvcache.page_hash(parent, tokens[start:end], keys)
        data = kv_bytes(tokens, start, end)
        pages.append({"hash": parent, "start": start, "n": end - start, "content": content.put_bytes(repo.objects, data),
                      "nbytes": len(data)})
    return {"format": "agentsnap-kv", "v": 1, "fingerprint": dict(FP), "page_size": PAGE, "tokens": tokens,
            "extra": [], "pages": pages, "refs": list(dict.fromkeys(p["content"] for p in pages)), "meta": {}}


def test_version_1_records_are_read_and_their_pages_reused(tmp_path):
    repo = Repo.init(tmp_path / "r")
    tokens = list(range(1, 11))
    old = write_v1(repo, tokens)
    snap = repo.snapshot("kv", layers={"cache": old}, capture_world=False)
    back = repo.read_layer(snap.id, "cache")
    got = b"".join(d for _s, _e, d in kvcache.iter_pages(repo.objects, back, FP))
    assert got == kv_bytes(tokens, 0, len(tokens))
    assert bytes(kvcache.read_page(repo.objects, back["pages"][1])) == kv_bytes(tokens, 4, 8)
    calls: list[tuple[int, int]] = []
    tokens += [11, 12, 13]
    new = write(repo, tokens, calls, previous=back)
    assert calls == [(8, 12), (12, 13)]
    assert new["v"] == kvcache.VERSION and [("content" in p) for p in new["pages"]] == [True, True, False, False]
    assert set(new["refs"]) == {old["pages"][0]["content"], old["pages"][1]["content"], new["pages"][2]["segment"]}
    got = b"".join(d for _s, _e, d in kvcache.iter_pages(repo.objects, new, FP))
    assert got == kv_bytes(tokens, 0, len(tokens))
    repo.snapshot("kv2", layers={"cache": new}, capture_world=False)
    assert repo.gc(grace_seconds=0)["removed"] == 0 and repo.verify()["ok"]


def test_segments_are_written_encrypted_in_an_encrypted_store(tmp_path, monkeypatch):
    from agentsnap_core.format import crypto

    monkeypatch.setenv(crypto.KEY_ENV, crypto.generate_key())
    repo = Repo.init(tmp_path / "r")
    crypto.enable_encryption(repo)
    tokens = list(range(1, 11))
    record = write(repo, tokens)
    for oid in record["refs"]:
        assert repo.objects.get_stored(oid)[5] == crypto.CODEC_ENCRYPTED
    got = b"".join(d for _s, _e, d in kvcache.iter_pages(repo.objects, record, FP))
    assert got == kv_bytes(tokens, 0, len(tokens))
    assert read_all(repo.objects, record) == kv_bytes(tokens, 0, len(tokens))


def test_previous_pages_missing_from_this_store_are_written_again(tmp_path):
    one, two = Repo.init(tmp_path / "one"), Repo.init(tmp_path / "two")
    tokens = list(range(1, 11))
    first = write(one, tokens)
    calls: list[tuple[int, int]] = []
    second = write(two, tokens, calls, previous=first)  # restored from repo one, captured into repo two
    assert calls == [(0, 4), (4, 8), (8, 10)]
    got = b"".join(d for _s, _e, d in kvcache.iter_pages(two.objects, second, FP))
    assert got == kv_bytes(tokens, 0, len(tokens))


def test_an_error_while_gathering_pages_is_raised_and_no_write_is_left_running(tmp_path, monkeypatch):
    monkeypatch.setattr(kvcache, "SEGMENT_BYTES", PAGE * 32)  # a segment a page: writes are in flight
    repo = Repo.init(tmp_path / "r")
    tokens = list(range(1, 40))

    def page_bytes(start: int, end: int) -> bytes:
        if start == 24:
            raise InvalidInput("engine went away")
        return kv_bytes(tokens, start, end)

    with pytest.raises(InvalidInput, match="engine went away"):
        kvcache.write_cache(repo.objects, FP, tokens, PAGE, page_bytes)
    record = write(repo, tokens)  # the pool is usable afterwards
    got = b"".join(d for _s, _e, d in kvcache.iter_pages(repo.objects, record, FP))
    assert got == kv_bytes(tokens, 0, len(tokens))


@pytest.mark.parametrize("version", [1, 2])
def test_the_kits_corrupted_copy_changes_one_page_and_a_short_page_is_refused(tmp_path, version):
    from agentsnap_core.testing.kv import corrupted_copy

    repo = Repo.init(tmp_path / "r")
    tokens = list(range(1, 11))
    record = write_v1(repo, tokens) if version == 1 else write(repo, tokens)
    snap = repo.snapshot("kv", layers={"cache": record}, capture_world=False)
    bad = repo.read_layer(corrupted_copy(repo, snap.id, page=1, change=lambda b: b[::-1]), "cache")
    got = [bytes(d) for _s, _e, d in kvcache.iter_pages(repo.objects, bad, FP)]
    assert got == [kv_bytes(tokens, 0, 4), kv_bytes(tokens, 4, 8)[::-1], kv_bytes(tokens, 8, 10)]
    assert repo.verify()["ok"]
    short = repo.read_layer(corrupted_copy(repo, snap.id, page=2, change=lambda b: b[:10]), "cache")
    with pytest.raises(InvalidInput, match="KV page at token 8 has 10 bytes, record says 64"):
        list(kvcache.iter_pages(repo.objects, short, FP))
