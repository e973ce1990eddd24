"""KVSession places inputs and restored caches on the model's device (checked on CPU with the meta device;
the CUDA test runs where a GPU exists)."""

from __future__ import annotations

import os

import pytest
import tinymodel
import torch
from agentsnap_core import Repo
from agentsnap_core.errors import ObjectCorrupt
from agentsnap_transformers import KVSession, kv


class _Seen(Exception):
    """Raised by the forward pre-hook once it has seen the inputs (a meta model cannot run every forward:
    transformers 4.57's rotary embedding asks autocast about the meta device)."""


def test_prefill_builds_inputs_on_the_models_device():
    model = tinymodel.fresh_model().to("meta")  # a device other than the CPU the token ids start on
    seen: list[torch.device] = []

    def hook(_module, _args, kwargs):
        seen.append(kwargs["input_ids"].device)
        raise _Seen

    model.register_forward_pre_hook(hook, with_kwargs=True)
    s = KVSession(model, page_size=tinymodel.PAGE_SIZE, weights="meta-copy")
    with pytest.raises(_Seen):
        s.prefill(tinymodel.PROMPT)
    assert seen == [torch.device("meta")]


def test_read_cache_restores_onto_the_given_device(tmp_path):
    repo = Repo.init(tmp_path / "repo")
    s = tinymodel.session()
    s.prefill(tinymodel.PROMPT)
    record = repo.read_layer(repo.capture(s, "p").id, "cache")
    on_meta = kv.read_cache(repo.objects, record, s.fingerprint(), config=s.model.config, device="meta")
    assert all(layer.keys.device.type == "meta" and layer.values.device.type == "meta" for layer in on_meta.layers)
    on_cpu = kv.read_cache(repo.objects, record, s.fingerprint(), config=s.model.config)
    assert all(torch.equal(a.keys, b.keys) for a, b in zip(on_cpu.layers, s.cache.layers, strict=True))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (this machine has none)")
def test_cuda_session_restores_onto_the_gpu_and_continues(tmp_path):
    repo = Repo.init(tmp_path / "repo")
    model = tinymodel.fresh_model().to("cuda")
    s = KVSession(model, page_size=tinymodel.PAGE_SIZE)
    s.prefill(tinymodel.PROMPT)
    snap = repo.capture(s, "on cuda")
    expected = s.fork().decode(6)
    fresh = KVSession(model, page_size=tinymodel.PAGE_SIZE)
    repo.restore_into(fresh, snap.id)
    assert fresh.cache.layers[0].keys.device.type == "cuda"
    assert fresh.decode(6) == expected


def _strided(s: KVSession) -> KVSession:
    """The same cache values held in non-contiguous tensors (as a GPU cache is not CPU memory): the staged path."""
    for layer in s.cache.layers:
        layer.keys = layer.keys.transpose(2, 3).contiguous().transpose(2, 3)
        layer.values = layer.values.transpose(2, 3).contiguous().transpose(2, 3)
    assert not s.cache.layers[0].keys.is_contiguous()
    return s


def test_a_cache_staged_through_host_chunks_is_stored_byte_identically(tmp_path, monkeypatch):
    """The path a GPU cache takes (chunks of token slots copied to host memory, one chunk ahead), run on the CPU
    with chunks of two pages: the same segments as the direct path, for a full and an incremental capture."""
    repo = Repo.init(tmp_path / "repo")
    direct = tinymodel.session()
    direct.prefill(tinymodel.PROMPT)
    staged = _strided(direct.fork())
    per_token = sum(2 * x.keys.shape[1] * x.keys.shape[3] * 4 for x in direct.cache.layers)
    monkeypatch.setattr(kv, "STAGING_BYTES", per_token * 2 * tinymodel.PAGE_SIZE)
    copies: list[int] = []
    real_copy = kv._HostStaging._copy
    monkeypatch.setattr(kv._HostStaging, "_copy", lambda self, a: copies.append(a) or real_copy(self, a))

    a = repo.read_layer(repo.capture(direct, "direct").id, "cache")
    b = repo.read_layer(repo.capture(staged, "staged").id, "cache")
    assert a["pages"] == b["pages"]
    assert copies == [0, 16]  # 25 tokens, pages of 8, chunks of 16 token slots: two batches, not one per page

    direct.decode(20)
    staged.decode(20)
    staged = _strided(staged)  # decoding concatenates into new contiguous tensors
    copies.clear()
    a = repo.read_layer(repo.capture(direct, "direct +20").id, "cache")
    b = repo.read_layer(repo.capture(staged, "staged +20").id, "cache")
    assert a["pages"] == b["pages"]
    assert copies and copies[0] == 24  # only the pages not stored before (from the last, partial one) are staged
    fresh = KVSession(tinymodel.model(), page_size=tinymodel.PAGE_SIZE)
    repo.restore_into(fresh, repo.log()[0].id)
    assert fresh.decode(4) == direct.fork().decode(4)


def test_the_staged_restore_a_gpu_takes_puts_every_page_in_place(tmp_path, monkeypatch):
    """The restore path of a GPU cache (chunks of pages read in stored order into a ring of host buffers, copied to the
    device and put in place there), run on the CPU with chunks of two pages and a short last page: every token slot
    of every layer equals the captured cache, and a corrupted segment is refused."""
    repo = Repo.init(tmp_path / "repo")
    s = tinymodel.session()
    s.prefill(tinymodel.PROMPT)  # 25 tokens: three full pages of 8 and one of 1
    record = repo.read_layer(repo.capture(s, "p").id, "cache")
    per_token = sum(2 * x.keys.shape[1] * x.keys.shape[3] * 4 for x in s.cache.layers)
    monkeypatch.setattr(kv, "STAGING_BYTES", per_token * 2 * tinymodel.PAGE_SIZE)
    chunks: list[int] = []
    real = kv.kvcache.start_pages_into
    monkeypatch.setattr(kv.kvcache, "start_pages_into", lambda st, pages, f: chunks.append(len(pages)) or real(st, pages, f))
    captured = [t for x in s.cache.layers for t in (x.keys, x.values)]
    targets = [torch.full_like(t, float("nan")) for t in captured]
    kv._read_staged(repo.objects, record, targets)
    assert chunks == [2, 2]
    assert all(torch.equal(a, b) for a, b in zip(targets, captured, strict=True))

    segment = repo.objects._path(record["pages"][-1]["segment"])  # the local store's loose file of the last segment
    os.chmod(segment, 0o644)
    with open(segment, "r+b") as f:
        f.seek(-3, os.SEEK_END)
        f.write(b"\xff\x00\xff")
    with pytest.raises(ObjectCorrupt):
        kv._read_staged(repo.objects, record, targets)


def test_the_staged_restore_reads_the_next_chunks_while_it_copies_one(tmp_path, monkeypatch):
    """With a ring of three host buffers and chunks of one page, the reads of pages 2 and 3 are queued before page
    1's read is waited for and copied (the core's workers stay busy while the device copies), a buffer is read
    into again only once its chunk was copied out, and every token slot lands in place."""
    repo = Repo.init(tmp_path / "repo")
    s = tinymodel.session()
    s.prefill(tinymodel.PROMPT)  # 25 tokens: pages starting at 0, 8, 16, 24
    record = repo.read_layer(repo.capture(s, "p").id, "cache")
    per_token = sum(2 * x.keys.shape[1] * x.keys.shape[3] * 4 for x in s.cache.layers)
    monkeypatch.setattr(kv, "STAGING_BYTES", per_token * tinymodel.PAGE_SIZE)
    monkeypatch.setattr(kv, "_staging_depth", lambda: 3)
    log: list[tuple[str, int]] = []
    real = kv.kvcache.start_pages_into

    def start(st, pages, f):
        log.append(("read", pages[0]["start"]))
        pending = real(st, pages, f)
        wait = pending.wait
        pending.wait = lambda: (wait(), log.append(("copy", pages[0]["start"])))  # type: ignore[method-assign]
        return pending

    monkeypatch.setattr(kv.kvcache, "start_pages_into", start)
    captured = [t for x in s.cache.layers for t in (x.keys, x.values)]
    targets = [torch.full_like(t, float("nan")) for t in captured]
    kv._read_staged(repo.objects, record, targets)
    assert log == [("read", 0), ("read", 8), ("read", 16), ("copy", 0), ("read", 24),
                   ("copy", 8), ("copy", 16), ("copy", 24)]
    assert all(torch.equal(a, b) for a, b in zip(targets, captured, strict=True))
