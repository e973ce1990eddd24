"""The model layer for transformers: a peft LoRA adapter's tensors, restored (with the KV cache) in a NEW process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import tinymodel
import torch
from agentsnap_core import InvalidInput, Repo
from agentsnap_core.layers import modelweights

HERE = Path(__file__).parent
STEPS = 8


@pytest.fixture(autouse=True)
def _peft():
    from agentsnap_core.testing.servers import need_module

    need_module("peft")


def test_lora_adapter_and_cache_restore_in_a_new_process(tmp_path):
    repo = Repo.init(tmp_path / "repo")
    s = tinymodel.lora_session(random_lora=True)
    s.prefill(tinymodel.PROMPT)
    s.decode(3)
    snap = repo.capture(s, "lora + kv")
    assert set(snap.layers) >= {"cache", "model", "state"}
    straight = s.fork().decode(STEPS)

    plain = tinymodel.session()  # the same base weights without the adapter continue differently
    plain.prefill(s.tokens)
    assert plain.decode(STEPS) != straight

    proc = subprocess.run(
        [sys.executable, str(HERE / "model_child.py"), str(repo.root), snap.id, str(STEPS)],
        capture_output=True, text=True, timeout=600,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), *sys.path])},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads([x for x in proc.stdout.splitlines() if x.startswith("MODEL ")][-1][len("MODEL "):])
    assert got["continuation"] == straight
    assert got["calls"] == [1] * STEPS  # restored adapter + restored KV: no prefill


def test_adapter_exports_as_safetensors_and_dedups_unchanged_tensors(tmp_path):
    from peft import get_peft_model_state_dict
    from safetensors.torch import load_file

    repo = Repo.init(tmp_path / "repo")
    s = tinymodel.lora_session(random_lora=True)
    s.prefill(tinymodel.PROMPT[:9])
    first = repo.read_layer(repo.capture(s, "a").id, "model")
    path = tmp_path / "adapter_model.safetensors"
    with open(path, "wb") as f:
        modelweights.write_safetensors(repo.objects, first, f)
    loaded, state = load_file(str(path)), get_peft_model_state_dict(s.model)
    assert sorted(loaded) == sorted(state) and all(torch.equal(loaded[k], state[k]) for k in state)

    name = "base_model.model.model.layers.1.self_attn.v_proj.lora_B.weight"
    with torch.no_grad():
        dict(s.model.named_parameters())[name.replace(".weight", ".default.weight")].add_(1.0)
    s.reset()
    s._fingerprint = None
    s.prefill(tinymodel.PROMPT[:9])
    second = repo.read_layer(repo.capture(s, "b").id, "model")
    assert modelweights.changed_tensors(first, second) == [name]


def test_mismatched_adapter_config_is_refused_and_nothing_changes(tmp_path):
    from agentsnap_transformers import KVSession
    from peft import LoraConfig, get_peft_model, get_peft_model_state_dict

    repo = Repo.init(tmp_path / "repo")
    s = tinymodel.lora_session(random_lora=True)
    s.prefill(tinymodel.PROMPT[:9])
    snap = repo.capture(s, "r=4")
    other = KVSession(get_peft_model(tinymodel.fresh_model(), LoraConfig(r=8, target_modules=["q_proj", "v_proj"])))
    before = {k: v.clone() for k, v in get_peft_model_state_dict(other.model).items()}
    with pytest.raises(InvalidInput, match="configured differently"):
        repo.restore_into(other, snap.id)
    after = get_peft_model_state_dict(other.model)
    assert all(torch.equal(before[k], after[k]) for k in before) and other.tokens == []
