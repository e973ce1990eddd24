"""vLLM LoRA adapters as the model layer: restored directories load through vLLM's own LoRA loader."""

from __future__ import annotations

import json

import pytest
import torch
from agentsnap_core import InvalidInput, Repo, modelweights
from agentsnap_core.testing.servers import need_module

MODULES = ["q_proj", "v_proj"]


def adapter_dir(path, scale: float = 1.0):
    from safetensors.torch import save_file

    g = torch.Generator().manual_seed(3)
    tensors = {}
    for layer in range(2):
        for m in MODULES:
            prefix = f"base_model.model.model.layers.{layer}.self_attn.{m}"
            out_dim = 128 if m == "q_proj" else 64
            tensors[f"{prefix}.lora_A.weight"] = torch.randn(4, 128, generator=g)
            tensors[f"{prefix}.lora_B.weight"] = torch.randn(out_dim, 4, generator=g) * scale
    path.mkdir()
    save_file(tensors, str(path / "adapter_model.safetensors"))
    (path / "adapter_config.json").write_text(json.dumps({
        "peft_type": "LORA", "r": 4, "lora_alpha": 8, "target_modules": MODULES, "bias": "none",
        "lora_dropout": 0.0, "task_type": "CAUSAL_LM"}))
    return path, tensors


def test_lora_round_trips_into_a_directory_vllm_loads(tmp_path):
    need_module("vllm")
    from agentsnap_vllm.lora import capture_lora, restore_lora
    from vllm.lora.lora_model import LoRAModel
    from vllm.lora.peft_helper import PEFTHelper
    from vllm.lora.request import LoRARequest

    repo = Repo.init(tmp_path / "repo")
    src, tensors = adapter_dir(tmp_path / "adapter")
    record = capture_lora(repo.objects, LoRARequest("tone", 1, str(src)))
    snap = repo.snapshot("lora", layers={"model": record}, capture_world=False)

    req = restore_lora(repo.objects, repo.read_layer(snap.id, "model"), tmp_path / "restored", lora_int_id=7)
    assert req.lora_name == "tone" and req.lora_int_id == 7
    helper = PEFTHelper.from_local_dir(req.lora_path, max_position_embeddings=1024)
    model = LoRAModel.from_local_checkpoint(req.lora_path, set(MODULES), helper, lora_model_id=7, device="cpu",
                                            dtype=torch.float32)
    a = model.loras["model.layers.1.self_attn.v_proj"]
    assert torch.equal(a.lora_a, tensors["base_model.model.model.layers.1.self_attn.v_proj.lora_A.weight"])
    assert helper.r == 4 and helper.lora_alpha == 8

    with pytest.raises(InvalidInput, match="not empty"):
        restore_lora(repo.objects, record, tmp_path / "restored")


def test_retrained_adapter_shares_unchanged_tensors(tmp_path):
    need_module("vllm")
    from agentsnap_vllm.lora import capture_lora

    repo = Repo.init(tmp_path / "repo")
    first = capture_lora(repo.objects, adapter_dir(tmp_path / "a")[0])
    second = capture_lora(repo.objects, adapter_dir(tmp_path / "b", scale=2.0)[0])
    changed = modelweights.changed_tensors(first, second)
    assert changed and all(name.endswith("lora_B.weight") for name in changed)
    assert len(set(first["refs"]) & set(second["refs"])) == 4  # the lora_A tensors are stored once
