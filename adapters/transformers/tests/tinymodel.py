"""A tiny random Llama built from a config (no download), the same weights in every process."""

from __future__ import annotations

import functools

import torch
from agentsnap_core.testing import AdapterCase
from agentsnap_transformers import KVSession
from transformers import LlamaConfig, LlamaForCausalLM

#: a prompt long enough to fill several pages (page size 8 in the tests)
PROMPT = [17, 201, 5, 99, 143, 7, 64, 250, 33, 180, 2, 76, 121, 9, 230, 48, 11, 160, 88, 3, 199, 41, 127, 60, 15]
PAGE_SIZE = 8


@functools.cache
def model() -> LlamaForCausalLM:
    return fresh_model()


def fresh_model() -> LlamaForCausalLM:
    """A new instance with the same weights (peft wraps models in place, so LoRA tests take their own)."""
    torch.manual_seed(1234)
    config = LlamaConfig(
        vocab_size=256,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        initializer_range=0.5,
        attn_implementation="eager",
    )
    torch.set_num_threads(1)
    return LlamaForCausalLM(config).eval()


def session() -> KVSession:
    return KVSession(model(), page_size=PAGE_SIZE)


def _step(s: KVSession, i: int) -> None:
    if not s.tokens:
        s.prefill(PROMPT[: 10 + 3 * i])
    else:
        s.decode(2)


def _observe(s: KVSession) -> dict:
    layers = [(layer.keys.clone(), layer.values.clone()) for layer in s.cache.layers] if s.tokens else []
    import blake3

    h = blake3.blake3()
    for k, v in layers:
        h.update(bytes(k.contiguous().view(-1).view(torch.uint8).numpy()))
        h.update(bytes(v.contiguous().view(-1).view(torch.uint8).numpy()))
    logits = None if s.last_logits is None else blake3.blake3(s.last_logits.numpy().tobytes()).hexdigest()
    return {"tokens": s.tokens, "kv": h.hexdigest() if layers else None, "logits": logits}


def case() -> AdapterCase:
    return AdapterCase(name="transformers KVSession", make=session, step=_step, observe=_observe,
                       factory="tinymodel:case", steps=3)


def lora_session(random_lora: bool) -> KVSession:
    """A session over the tiny model with a peft LoRA adapter (random weights, or peft's no-op init)."""
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(7)
    config = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=not random_lora)
    return KVSession(get_peft_model(fresh_model(), config).eval(), page_size=PAGE_SIZE)
