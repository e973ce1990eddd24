"""Page keys and fingerprints of the vLLM connector, at unit level (no engine): parallel layouts that cannot be
restored are refused, LoRA / multimodal / salt keys separate pages, weights are fingerprinted by content."""

from __future__ import annotations

import os

import pytest
from agentsnap_core import InvalidInput, kvcache
from agentsnap_core.testing.servers import need_module


def _config(**sizes: int):  # noqa: ANN202
    """An object with a real ``vllm.config.ParallelConfig`` as its ``parallel_config`` (what the connector reads)."""
    from vllm.config import ParallelConfig

    return type("Config", (), {"parallel_config": ParallelConfig(**sizes)})()


@pytest.mark.parametrize(("sizes", "named"), [({"tensor_parallel_size": 2}, "tp=2"), ({"pipeline_parallel_size": 2}, "pp=2"),
                                              ({"tensor_parallel_size": 2, "decode_context_parallel_size": 2}, "tp=2, dcp=2"),
                                              ({"prefill_context_parallel_size": 2}, "pcp=2"),
                                              ({"tensor_parallel_size": 4, "pipeline_parallel_size": 2}, "tp=4, pp=2")])
def test_sharded_kv_is_refused(sizes, named):
    need_module("vllm")
    from agentsnap_vllm.connector import parallel_layout

    with pytest.raises(InvalidInput, match=named):
        parallel_layout(_config(**sizes))


def test_single_rank_layout_is_part_of_the_fingerprint():
    need_module("vllm")
    from agentsnap_vllm.connector import parallel_layout

    assert parallel_layout(_config()) == "tp=0/1;pp=0/1;dcp=1;pcp=1"  # rank/size of each dimension


def test_lora_multimodal_and_salt_key_pages_apart(tmp_path):
    need_module("vllm")
    from agentsnap_vllm.connector import request_keys
    from vllm.lora.request import LoRARequest

    a, b = tmp_path / "a", tmp_path / "b"
    for d, payload in ((a, b"\x01" * 64), (b, b"\x02" * 64)):
        d.mkdir()
        (d / "adapter_model.safetensors").write_bytes(payload)
    base = request_keys()
    lora_a = request_keys(LoRARequest("tone", 1, str(a)))
    lora_b = request_keys(LoRARequest("tone", 1, str(b)))  # same name and id, other weights
    salted = request_keys(cache_salt="tenant-7")

    class _Feature:
        identifier = "img-hash-1"

    image = request_keys(mm_features=[_Feature()])
    assert base == []
    assert len({tuple(k) for k in (base, lora_a, lora_b, salted, image)}) == 5
    tokens = list(range(64))
    fp = kvcache.fingerprint_key({"model": "m"})
    hashes = {tuple(kvcache.page_hashes(tokens, 32, [fp, *k])) for k in (base, lora_a, lora_b, salted, image)}
    assert len(hashes) == 5  # not one page hash is shared


def test_weights_digest_reads_content_and_checkpoint_digests(tmp_path, monkeypatch):
    need_module("vllm")
    from agentsnap_vllm import connector

    one, two = tmp_path / "one", tmp_path / "two"
    for d, byte in ((one, b"\x01"), (two, b"\x02")):
        d.mkdir()
        (d / "model.safetensors").write_bytes(byte * 4096)  # same name, same size, other content
    assert connector.weights_digest(str(one)) != connector.weights_digest(str(two))

    # a Hugging Face cache snapshot: the file is a link to a blob named by its sha256 - used without reading it
    blob_dir = tmp_path / "hub" / "blobs"
    blob_dir.mkdir(parents=True)
    sha = "ab" * 32
    (blob_dir / sha).write_bytes(b"\x03" * 4096)
    snap = tmp_path / "hub" / "snapshots" / "c0ffee"
    snap.mkdir(parents=True)
    os.symlink(blob_dir / sha, snap / "model.safetensors")
    assert connector._file_digest(snap / "model.safetensors") == "sha256:" + sha

    # a hub id is resolved in the local cache at its revision, never turned into "model@main"
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "empty-hf-home"))
    with pytest.raises(InvalidInput, match="not in the local Hugging Face cache"):
        connector.weights_digest("someone/some-model", "v1")
