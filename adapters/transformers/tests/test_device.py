"""KVSession places inputs and restored caches on the model's device (checked on CPU with the meta device;
the CUDA test runs where a GPU exists)."""

from __future__ import annotations

import pytest
import tinymodel
import torch
from agentsnap_core import Repo
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
