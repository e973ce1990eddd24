"""Edges a demanding user meets: a model configured differently, an interrupted forward, bad token ids and
arguments, a refused adapter restore. Each test failed on the code before its fix (the docstring says how)."""

from __future__ import annotations

import copy

import pytest
import tinymodel
import torch
from agentsnap_core import InvalidInput, Repo
from agentsnap_core.layers import kvcache
from agentsnap_core.layers.kvcache import CacheMismatch
from agentsnap_transformers import KVSession, kv


def _same_weights(**changes) -> torch.nn.Module:
    """The tiny model's weights under a config with ``changes`` (nothing a parameter holds)."""
    config = copy.deepcopy(tinymodel.model().config)
    for key, value in changes.items():
        setattr(config, key, value)
    model = type(tinymodel.model())(config).eval()
    model.load_state_dict(tinymodel.model().state_dict())
    return model


def test_a_model_configured_differently_with_the_same_weights_is_refused(tmp_path):
    """Old: the fingerprint covered the weights, dtype and KV geometry but not the config, so a snapshot restored
    into the same weights under another ``rope_theta`` (or ``rms_norm_eps``, ``rope_scaling``...) was accepted and
    decoded [140, 55, 222, ...] where a prefill in that model gives [78, 118, 240, ...]: K rotated for one RoPE,
    read with another. Now the fingerprint has a ``config`` digest and the restore is refused, nothing changed."""
    repo = Repo.init(tmp_path / "repo")
    s = tinymodel.session()
    s.prefill(tinymodel.PROMPT)
    snap = repo.capture(s, "p")
    for changed in ({"rope_theta": 50.0}, {"rms_norm_eps": 0.5}):
        other = KVSession(_same_weights(**changed), page_size=tinymodel.PAGE_SIZE)
        assert other.fingerprint()["weights"] == s.fingerprint()["weights"]
        other.prefill([1, 2, 3])
        with pytest.raises(CacheMismatch) as info:
            repo.restore_into(other, snap.id)
        assert list(info.value.differences) == ["config"]
        assert other.tokens == [1, 2, 3] and other.cache.get_seq_length() == 3

    # settings that change nothing a forward computes (generation defaults, ids) do not refuse a restore
    same = KVSession(_same_weights(pad_token_id=0, temperature=0.7, max_length=99), page_size=tinymodel.PAGE_SIZE)
    repo.restore_into(same, snap.id)
    assert same.decode(4) == s.fork().decode(4)

    # a record written before the config was part of the fingerprint still restores (compared as before)
    old_fp = {k: v for k, v in s.fingerprint().items() if k != "config"}
    record = kv.write_cache(repo.objects, s.cache, s.tokens, old_fp, page_size=tinymodel.PAGE_SIZE)
    kvcache.check_record(record)
    restored = kv.read_cache(repo.objects, record, s.fingerprint(), config=s.model.config)
    assert all(torch.equal(a.keys, b.keys) for a, b in zip(restored.layers, s.cache.layers, strict=True))


class _Interrupted(Exception):
    pass


def test_an_interrupted_forward_leaves_the_session_as_it_was(tmp_path):
    """Old: an exception inside the model (Ctrl-C, out of memory in a late layer) left layer 0's cache two slots
    longer than layer 1's and than ``tokens``; the session decoded on from that silently ([140, 19, 95, ...] where
    the uninterrupted session gives [140, 226, 211, ...]) and a capture said 'cache holds 27 token slots but 25
    tokens were given'. Now the cache is put back as it was before the call."""
    repo = Repo.init(tmp_path / "repo")
    s = tinymodel.session()
    s.prefill(tinymodel.PROMPT)
    expected = s.fork().decode(6)
    model = s.model

    def boom(*_args):
        raise _Interrupted

    handle = model.model.layers[1].register_forward_pre_hook(boom)
    try:
        with pytest.raises(_Interrupted):
            s.feed([5, 6])
        fresh = KVSession(model, page_size=tinymodel.PAGE_SIZE)
        with pytest.raises(_Interrupted):
            fresh.prefill(tinymodel.PROMPT)
    finally:
        handle.remove()
    assert s.tokens == tinymodel.PROMPT and s.forward_lengths == [len(tinymodel.PROMPT)]
    assert [layer.keys.shape[-2] for layer in s.cache.layers] == [len(tinymodel.PROMPT)] * 2
    snap = repo.capture(s, "after the interruption")
    assert s.decode(6) == expected
    assert fresh.tokens == [] and fresh.cache.get_seq_length() == 0
    assert fresh.prefill(tinymodel.PROMPT) is not None and fresh.decode(6) == expected

    back = tinymodel.session()
    repo.restore_into(back, snap.id)
    assert back.decode(6) == expected


def test_a_cache_whose_layers_disagree_on_length_is_refused_at_capture(tmp_path):
    """Old: a cache with one layer shorter than the tokens (edited by hand, or a half-applied update) reached the
    page staging and failed with a bare RuntimeError "shape '[2, 3, 8, 16]' is invalid for input of size 640".
    Now the capture is refused naming the layer, and nothing is stored."""
    repo = Repo.init(tmp_path / "repo")
    s = tinymodel.session()
    s.prefill(tinymodel.PROMPT)
    layer = s.cache.layers[1]
    layer.keys, layer.values = layer.keys[:, :, :20], layer.values[:, :, :20]
    stored = set(repo.objects.iter_oids())
    with pytest.raises(InvalidInput, match="layer 1 holds 20 token slots"):
        repo.capture(s, "uneven")
    assert set(repo.objects.iter_oids()) == stored


def test_token_ids_and_arguments_that_cannot_be_meant_are_refused_before_the_model_runs():
    """Old: ``feed([1.7, 2.2])`` truncated the floats and fed tokens 1 and 2 (recorded as such); ``feed([True])`` fed
    token 1; ``feed([300])`` (vocab 256) gave a bare IndexError 'index out of range in self' (on a GPU a device-side
    assert that poisons the CUDA context); ``feed(torch.tensor([...]))`` said 'Boolean value of Tensor with more
    than one value is ambiguous'; ``decode(-2)`` returned [] as if it had decoded; ``KVSession(model,
    page_size="8")`` was accepted and failed at the first capture with a bare TypeError. Now each is refused with
    an InvalidInput naming the value, the session unchanged; a 1-D tensor of token ids is fed like a list."""
    s = tinymodel.session()
    s.prefill(tinymodel.PROMPT[:9])
    bad = [([1.7, 2.2], "integer"), ([True], "integer"), ([256], "vocabulary of 256"), ([-1], "vocabulary of 256"),
           ([[1, 2]], "integer"), (["a"], "integer")]
    for ids, message in bad:
        with pytest.raises(InvalidInput, match=message):
            s.feed(ids)
        assert s.tokens == tinymodel.PROMPT[:9] and s.cache.get_seq_length() == 9
    with pytest.raises(InvalidInput, match="one sequence"):
        s.feed(torch.tensor([[1, 2]]))
    with pytest.raises(InvalidInput, match="integer"):
        s.feed("abc")
    for n in (-2, 1.5, "3"):
        with pytest.raises(InvalidInput, match="decode"):
            s.decode(n)
    assert s.tokens == tinymodel.PROMPT[:9]

    a, b = tinymodel.session(), tinymodel.session()
    a.feed(torch.tensor(tinymodel.PROMPT))
    b.feed(tinymodel.PROMPT)
    assert a.tokens == b.tokens and all(type(t) is int for t in a.tokens)
    assert torch.equal(a.last_logits, b.last_logits)
    for page_size in ("8", 0, 2.0, True):
        with pytest.raises(InvalidInput, match="page_size"):
            KVSession(tinymodel.model(), page_size=page_size)


def test_a_refused_adapter_restore_leaves_the_model_and_session_as_they_were(tmp_path):
    """Old: restoring a LoRA snapshot whose adapter has tensors this model lacks (same LoRA settings, a base with
    more layers) raised 'adapter tensors the model does not have' only AFTER loading the tensors it did have: the
    shared model kept half of the snapshot's adapter, and the session's cached fingerprint still named the old
    weights (a later capture would label the new weights with the old digest). Now it is refused before anything
    is loaded, and the wrapper rolls back whatever a failed restore did."""
    from agentsnap_core.testing.servers import need_module

    need_module("peft")
    from peft import LoraConfig, get_peft_model, get_peft_model_state_dict
    from transformers import LlamaForCausalLM

    repo = Repo.init(tmp_path / "repo")
    config = copy.deepcopy(tinymodel.model().config)
    config.num_hidden_layers = 3
    torch.manual_seed(3)
    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    bigger = KVSession(get_peft_model(LlamaForCausalLM(config).eval(), lora).eval(), page_size=tinymodel.PAGE_SIZE)
    bigger.prefill(tinymodel.PROMPT)
    snap = repo.capture(bigger, "three layers")

    s = tinymodel.lora_session(random_lora=True)
    s.prefill([1, 2, 3])
    digest = s.fingerprint()["weights"]
    before = {k: v.clone() for k, v in get_peft_model_state_dict(s.model).items()}
    with pytest.raises(InvalidInput, match="does not have"):
        repo.restore_into(s, snap.id)
    after = get_peft_model_state_dict(s.model)
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert kv.weights_digest(s.model) == digest == s.fingerprint()["weights"]
    assert s.tokens == [1, 2, 3] and s.cache.get_seq_length() == 3


def test_a_session_over_something_that_is_not_a_decoder_only_lm_is_refused_when_it_is_made():
    """Old: ``KVSession(t5)`` was accepted and the first prefill failed inside transformers with 'You have to specify
    either decoder_input_ids or decoder_inputs_embeds' (which KVSession has no way to pass); ``KVSession("llama")``
    raised a bare AttributeError "'str' object has no attribute 'config'". Now both are refused at once, saying
    what a KVSession holds."""
    from transformers import T5Config, T5ForConditionalGeneration

    t5 = T5ForConditionalGeneration(T5Config(vocab_size=64, d_model=16, d_ff=32, num_layers=1, num_heads=2, d_kv=8))
    with pytest.raises(InvalidInput, match="encoder-decoder"):
        KVSession(t5.eval())
    with pytest.raises(InvalidInput, match="causal LM"):
        KVSession("llama")
