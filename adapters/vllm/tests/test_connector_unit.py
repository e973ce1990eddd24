"""The connector's scheduler and worker halves driven directly (no engine, no forward pass), built from the real
vLLM config classes (``VllmConfig`` of the tiny test model), real ``Request`` / ``LoRARequest`` objects and real
tensors in vLLM's CPU paged layout: sharded layouts refused at start, the rank in the fingerprint, the prompt hashed
once per waiting request, a LoRA request not matching base-model pages, the saved-records list bounded, a save
complete once flushed, and the counters vLLM's connector stats report."""

from __future__ import annotations

import pytest
import tinyllama
from agentsnap_core import InvalidInput, kvcache

BLOCK = 32


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    _, model, repo = tinyllama.model_and_repo(tmp_path_factory, "unit")
    return model, repo


def vllm_config(model, repo, parallel=None, **extra):
    from agentsnap_vllm import kv_transfer_config
    from vllm.config import CacheConfig, ModelConfig, ParallelConfig, VllmConfig

    return VllmConfig(model_config=ModelConfig(model=str(model), dtype="float32", max_model_len=512),
                      cache_config=CacheConfig(block_size=BLOCK), parallel_config=parallel or ParallelConfig(),
                      kv_transfer_config=kv_transfer_config(repo.root, **extra))


def connector(model, repo, role="scheduler", **extra):
    from agentsnap_vllm.connector import AgentsnapConnector
    from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole

    kind = KVConnectorRole.SCHEDULER if role == "scheduler" else KVConnectorRole.WORKER
    return AgentsnapConnector(vllm_config(model, repo, **extra), kind)


def request(req_id, tokens, snapshot=None, lora=None):
    from agentsnap_vllm import snapshot_params
    from vllm import SamplingParams
    from vllm.v1.request import Request

    params = SamplingParams(max_tokens=8, extra_args=snapshot_params(snapshot) if snapshot else None)
    return Request(req_id, list(tokens), params, None, lora_request=lora)


def base_snapshot(conn, repo, tokens):
    """A snapshot whose cache layer holds the pages of ``tokens`` (base model, no LoRA), as the worker writes them."""
    record = kvcache.write_cache(repo.objects, conn._fp, tokens, BLOCK, lambda s, e: bytes([s % 251]) * 64)
    layer = {"format": "agentsnap-vllm", "v": 1, "requests": [record], "refs": record["refs"]}
    return repo.snapshot("pages", layers={"cache": layer}, capture_world=False, move_head=False).id


@pytest.mark.parametrize(("sizes", "named"), [({"tensor_parallel_size": 2}, "tp=2"),
                                              ({"pipeline_parallel_size": 2}, "pp=2"),
                                              ({"tensor_parallel_size": 2, "pipeline_parallel_size": 2}, "tp=2, pp=2")])
def test_sharded_engine_is_refused_when_the_connector_starts(setup, sizes, named):
    from vllm.config import ParallelConfig

    model, repo = setup
    full = vllm_config(model, repo, parallel=ParallelConfig(**sizes))  # vLLM 0.32 builds it without the devices
    from agentsnap_vllm.connector import AgentsnapConnector
    from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole

    with pytest.raises(InvalidInput, match=f"cannot save or restore a sharded KV cache \\({named}\\)"):
        AgentsnapConnector(full, KVConnectorRole.SCHEDULER)


def test_fingerprint_names_the_rank_and_size_of_every_parallel_dimension(setup):
    model, repo = setup
    conn = connector(model, repo)
    assert conn._fp["parallel"] == "tp=0/1;pp=0/1;dcp=1;pcp=1"


def test_scheduler_hashes_a_waiting_prompt_once(setup, monkeypatch):
    model, repo = setup
    conn = connector(model, repo)
    tokens = list(range(5, 5 + 6 * BLOCK))
    snap = base_snapshot(conn, repo, tokens)
    conn._index(snap)  # the snapshot is read and checked once per engine (its records' chains are hashed then)
    calls = []
    real = kvcache.page_hashes
    monkeypatch.setattr(kvcache, "page_hashes", lambda *a, **k: calls.append(1) or real(*a, **k))
    req = request("r1", tokens + [7], snapshot=snap)
    for _ in range(200):  # a waiting request is asked about on every scheduling attempt
        assert conn.get_num_new_matched_tokens(req, 0) == (6 * BLOCK, False)
    assert len(calls) == 1
    assert conn.totals.data["match_hashed"] == 1 and conn.totals.data["match_cached"] == 199
    conn.request_finished(req, [])
    assert conn._matches == {}  # forgotten with the request


def test_lora_request_does_not_match_base_model_pages(setup, tmp_path):
    from vllm.lora.request import LoRARequest

    model, repo = setup
    conn = connector(model, repo)
    tokens = list(range(9, 9 + 4 * BLOCK))
    snap = base_snapshot(conn, repo, tokens)
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_model.safetensors").write_bytes(b"\x05" * 128)
    base = request("base", tokens + [1], snapshot=snap)
    lora = request("lora", tokens + [1], snapshot=snap, lora=LoRARequest("tone", 1, str(adapter)))
    conn.on_new_request(base)
    conn.on_new_request(lora)
    assert conn.get_num_new_matched_tokens(base, 0) == (4 * BLOCK, False)
    assert conn.get_num_new_matched_tokens(lora, 0) == (0, False)


def kv_layers(num_blocks=16, heads=2, head=16):
    """Paged KV tensors in the CPU layout the connector indexes: (blocks, k/v, slot, heads, head size)."""
    import torch

    torch.manual_seed(0)
    return {f"model.layers.{i}.self_attn.attn": torch.randn(num_blocks, 2, BLOCK, heads, head) for i in range(2)}


def saves_meta(saves):
    from agentsnap_vllm.connector import AgentsnapConnectorMetadata, _Transfer

    return AgentsnapConnectorMetadata(saves=[_Transfer(*s[:3], **s[3]) if len(s) > 3 else _Transfer(*s) for s in saves])


def test_saved_records_are_bounded_and_complete_after_the_request_finishes(setup):
    model, repo = setup
    worker = connector(model, repo, role="worker", max_saved_records=2)
    layers = kv_layers()
    worker.register_kv_caches(layers)
    for i in range(5):  # five requests, one block each
        worker.bind_connector_metadata(saves_meta([(f"r{i}", list(range(i, i + BLOCK)), [i])]))
        worker.wait_for_save()
        worker.clear_connector_metadata()
    # a finished turn: the prompt block was saved, the answer's block comes when the request finishes
    worker.bind_connector_metadata(saves_meta([("t", list(range(100, 100 + BLOCK)), [7])]))
    worker.wait_for_save()
    worker.bind_connector_metadata(saves_meta([("t", list(range(100, 100 + 2 * BLOCK)), [7, 9], {"first": 1, "final": True})]))
    worker.wait_for_save()
    assert worker.get_finished({"t"}) == ({"t"}, None)  # copied: vLLM may free the blocks now
    records = worker.take_saved()  # flushes the writer thread: everything handed over is in the store
    assert [r["tokens"][0] for r in records] == [4, 100] and len(records[1]["tokens"]) == 2 * BLOCK
    assert worker.totals.data["records_dropped"] == 4  # r0..r3 (the oldest); t's prompt record is replaced in place
    assert worker.totals.data["pages_saved"] == 7 and worker.save_failures == []  # t's first page written once
    for page, block in zip(records[1]["pages"], [7, 9], strict=True):
        want = b"".join(layers[n][block].transpose(0, 1).contiguous().view(-1).numpy().view("uint8").tobytes()
                        for n in sorted(layers))
        assert worker.read_page(page) == want
    worker.shutdown()


def test_connector_stats_go_through_vllms_kv_connector_stats(setup):
    from agentsnap_vllm.connector import AgentsnapConnector
    from vllm.distributed.kv_transfer.kv_connector.v1.metrics import KVConnectorStats

    model, repo = setup
    worker = connector(model, repo, role="worker")
    worker.register_kv_caches(kv_layers())
    assert worker.get_kv_connector_stats() is None  # nothing happened
    worker.bind_connector_metadata(saves_meta([("s", list(range(BLOCK)), [3])]))
    worker.wait_for_save()
    worker.flush()
    stats = worker.get_kv_connector_stats()
    assert isinstance(stats, KVConnectorStats) and stats.data["pages_saved"] == 1 and stats.data["bytes_saved"] > 0
    assert worker.get_kv_connector_stats() is None  # reset after each interval
    other = AgentsnapConnector.build_kv_connector_stats(dict(stats.data))  # how vLLM rebuilds a worker's payload
    assert other.aggregate(stats).reduce()["pages_saved"] == 2 and not other.is_empty()
    worker.shutdown()


def test_an_engine_dropped_without_shutdown_frees_its_connector_and_writer(setup):
    """The writer thread must not keep a dropped engine's connector (and its paged KV caches) alive."""
    import gc
    import weakref

    model, repo = setup
    worker = connector(model, repo, role="worker")
    worker.register_kv_caches(kv_layers())
    worker.bind_connector_metadata(saves_meta([("d", list(range(BLOCK)), [2])]))
    worker.wait_for_save()
    worker.flush()
    ref, thread = weakref.ref(worker), worker._writer
    assert thread is not None and thread.is_alive()
    del worker
    gc.collect()
    assert ref() is None
    thread.join(timeout=60)
    assert not thread.is_alive()


def test_a_requests_pages_load_with_one_copy_per_layer_and_a_bad_page_stops_there(setup, monkeypatch):
    """Three saved blocks loaded into other blocks of a fresh cache: one indexed copy per layer for the whole
    request (a GPU pays per copy; it was one per page and layer), byte-exact; a page that does not fit this engine's
    layout stops the request there, its block and the later ones reported for vLLM to recompute."""
    import torch
    from agentsnap_vllm.connector import AgentsnapConnectorMetadata, _Transfer

    model, repo = setup
    saver = connector(model, repo, role="worker")
    source = kv_layers()
    saver.register_kv_caches(source)
    tokens = list(range(500, 500 + 3 * BLOCK))
    saver.bind_connector_metadata(saves_meta([("s", tokens, [2, 5, 11], {"final": True})]))
    saver.wait_for_save()
    (record,) = saver.take_saved()
    saver.shutdown()

    loader = connector(model, repo, role="worker")
    target = {name: torch.zeros_like(t) for name, t in source.items()}
    loader.register_kv_caches(target)
    writes = []
    real_setitem = torch.Tensor.__setitem__
    monkeypatch.setattr(torch.Tensor, "__setitem__", lambda t, i, v: writes.append(1) or real_setitem(t, i, v))
    loader.bind_connector_metadata(AgentsnapConnectorMetadata(loads=[_Transfer("l", tokens, [1, 3, 4],
                                                                                 pages=record["pages"])]))
    loader.start_load_kv(None)
    monkeypatch.undo()
    assert len(writes) == len(target)  # one per layer
    for name in source:
        for src, dst in zip([2, 5, 11], [1, 3, 4], strict=True):
            assert torch.equal(target[name][dst], source[name][src])
    assert loader.get_block_ids_with_load_errors() == set() and loader.totals.data["pages_loaded"] == 3

    short = dict(record["pages"][1], nbytes=record["pages"][1]["nbytes"] // 2)  # the page's bytes from a smaller layout
    target[next(iter(target))].zero_()
    loader.bind_connector_metadata(AgentsnapConnectorMetadata(loads=[_Transfer(
        "m", tokens, [6, 7, 8], pages=[record["pages"][0], short, record["pages"][2]])]))
    loader.start_load_kv(None)
    assert loader.get_block_ids_with_load_errors() == {7, 8}
    assert "page 1" in loader.load_failures[-1]
    for name in source:
        assert torch.equal(target[name][6], source[name][2])  # the page before the bad one is loaded
    loader.shutdown()
