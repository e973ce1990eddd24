"""The model layer: tensors stored one by one (dedup across snapshots), safetensors export/import."""

from __future__ import annotations

import os
import struct

import pytest
from agentsnap_core import InvalidInput, Repo
from agentsnap_core.layers import modelweights


def tensors(seed: bytes = b"a") -> list[tuple[str, str, list[int], bytes]]:
    return [
        ("layers.0.q_proj.lora_A.weight", "F32", [4, 64], os.urandom(4 * 64 * 4)),
        ("layers.0.q_proj.lora_B.weight", "F32", [64, 4], seed * (64 * 4 * 4)),
        ("layers.1.q_proj.lora_A.weight", "BF16", [4, 64], os.urandom(4 * 64 * 2)),
    ]


def test_round_trip_through_a_snapshot_and_gc(tmp_path):
    repo = Repo.init(tmp_path / "r")
    ts = tensors()
    record = modelweights.write_tensors(repo.objects, ts, meta={"peft_type": "LORA", "r": 4})
    snap = repo.snapshot("lora", layers={"model": record}, capture_world=False)
    assert repo.gc(grace_seconds=0)["removed"] == 0
    back = list(modelweights.iter_tensors(repo.objects, repo.read_layer(snap.id, "model")))
    assert back == sorted((n, d, s, bytes(b)) for n, d, s, b in ts)
    assert repo.verify()["ok"]


def test_a_changed_tensor_is_the_only_new_content(tmp_path):
    repo = Repo.init(tmp_path / "r")
    ts = tensors()
    first = modelweights.write_tensors(repo.objects, ts)
    ts[1] = (ts[1][0], ts[1][1], ts[1][2], b"b" * len(ts[1][3]))
    second = modelweights.write_tensors(repo.objects, ts)
    assert modelweights.changed_tensors(first, second) == ["layers.0.q_proj.lora_B.weight"]
    assert len(set(first["refs"]) & set(second["refs"])) == 2


def test_safetensors_export_and_import(tmp_path):
    repo = Repo.init(tmp_path / "r")
    ts = tensors()
    record = modelweights.write_tensors(repo.objects, ts, meta={"format": "pt", "r": 4})
    path = tmp_path / "adapter_model.safetensors"
    with open(path, "wb") as f:
        n = modelweights.write_safetensors(repo.objects, record, f)
    assert n == path.stat().st_size
    (hlen,) = struct.unpack("<Q", path.read_bytes()[:8])
    assert (8 + hlen) % 8 == 0
    got = [(name, d, s, bytes(b)) for name, d, s, b in modelweights.read_safetensors(path)]
    assert got == sorted((name, d, s, bytes(b)) for name, d, s, b in ts)


def test_bad_input_is_refused(tmp_path):
    repo = Repo.init(tmp_path / "r")
    with pytest.raises(InvalidInput, match="needs 16 bytes"):
        modelweights.write_tensors(repo.objects, [("w", "F32", [2, 2], b"123")])
    with pytest.raises(InvalidInput, match="unknown tensor dtype"):
        modelweights.write_tensors(repo.objects, [("w", "F31", [1], b"1234")])
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(struct.pack("<Q", 10**9) + b"{}")
    with pytest.raises(InvalidInput, match="does not fit"):
        list(modelweights.read_safetensors(bad))
    bad.write_bytes(struct.pack("<Q", 60) + b'{"w":{"dtype":"F32","shape":[4],"data_offsets":[0,64]}}'.ljust(60))
    with pytest.raises(InvalidInput, match="bad offsets"):
        list(modelweights.read_safetensors(bad))
