"""DynamicCache <-> agentsnap KV pages.

A page holds token slots ``[start, end)`` of every layer: for each layer, the keys then the values
of shape ``[kv_heads, end - start, head_dim]`` (batch 1), as raw bytes in the cache's dtype.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import blake3
import torch
import transformers
from agentsnap_core import InvalidInput
from agentsnap_core.layers import kvcache
from agentsnap_core.stores.base import ObjectStore
from transformers.cache_utils import DynamicCache, DynamicLayer

DEFAULT_PAGE_SIZE = 16


def tensor_bytes(t: torch.Tensor) -> memoryview:
    """The raw bytes of a CPU tensor (any dtype, bfloat16 included), copied only if not contiguous."""
    flat = t.detach().to("cpu").contiguous().reshape(-1).view(torch.uint8)
    return memoryview(flat.numpy()).cast("B")


def weights_digest(model: torch.nn.Module) -> str:
    """A digest of every parameter and buffer (name, dtype, shape, bytes) of ``model``."""
    h = blake3.blake3()
    for name, t in sorted(model.state_dict().items()):
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(tensor_bytes(t))
    return h.hexdigest()


def _layers(cache: DynamicCache) -> list[DynamicLayer]:
    if not isinstance(cache, DynamicCache):
        raise InvalidInput(f"only DynamicCache can be captured, not {type(cache).__name__}")
    layers = list(cache.layers)
    for i, layer in enumerate(layers):
        if type(layer) is not DynamicLayer:
            raise InvalidInput(f"cache layer {i} is a {type(layer).__name__}; only full-attention DynamicLayer is supported")
        if not layer.is_initialized or layer.keys is None or layer.keys.numel() == 0:
            raise InvalidInput(f"cache layer {i} is empty; run a prefill before capturing")
        if layer.keys.shape[0] != 1:
            raise InvalidInput(f"cache layer {i} has batch size {layer.keys.shape[0]}; capture one sequence at a time")
    return layers


def _geometry(model: torch.nn.Module) -> tuple[int, int, int]:
    cfg = model.config.get_text_config(decoder=True)
    heads = cfg.num_attention_heads
    kv_heads = getattr(cfg, "num_key_value_heads", None) or heads
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // heads
    return cfg.num_hidden_layers, kv_heads, head_dim


def layout(model: torch.nn.Module) -> str:
    """The page byte layout of ``model``'s DynamicCache (part of the fingerprint; CPU and CUDA differ)."""
    n_layers, kv_heads, head_dim = _geometry(model)
    device = next(model.parameters()).device.type
    return f"hf-dynamic/layer-kv-head-token-dim/{n_layers}x{kv_heads}x{head_dim}/{device}"


def fingerprint(model: torch.nn.Module, *, weights: str | None = None, tokenizer: str = "none") -> dict[str, str]:
    """What must match for a cache to be valid in another process: model, weights, dtype, engine, layout."""
    cfg = model.config
    return kvcache.fingerprint(
        model=f"{cfg.model_type}:{getattr(cfg, 'name_or_path', '') or 'from-config'}",
        weights=weights or weights_digest(model),
        dtype=str(next(model.parameters()).dtype).removeprefix("torch."),
        tokenizer=tokenizer,
        engine=f"transformers=={transformers.__version__};torch=={torch.__version__}",
        layout=layout(model),
    )


def write_cache(
    store: ObjectStore,
    cache: DynamicCache,
    tokens: Sequence[int],
    fp: Mapping[str, str],
    *,
    page_size: int = DEFAULT_PAGE_SIZE,
    previous: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Stream ``cache`` (holding the KV of ``tokens``) into the store page by page; return the record."""
    layers = _layers(cache)
    length = layers[0].keys.shape[-2]
    if length != len(tokens):
        raise InvalidInput(f"cache holds {length} token slots but {len(tokens)} tokens were given")

    def page_bytes(start: int, end: int) -> bytes:
        parts = []
        for layer in layers:
            parts.append(tensor_bytes(layer.keys[0, :, start:end, :]))
            parts.append(tensor_bytes(layer.values[0, :, start:end, :]))
        return b"".join(parts)

    meta = {
        "shapes": [[[x.keys.shape[1], x.keys.shape[3]], [x.values.shape[1], x.values.shape[3]]] for x in layers],
        "dtype": str(layers[0].keys.dtype).removeprefix("torch."),
    }
    return kvcache.write_cache(store, fp, tokens, page_size, page_bytes, previous=previous, meta=meta)


def read_cache(
    store: ObjectStore,
    record: Mapping[str, Any],
    fp: Mapping[str, str] | None,
    config: Any = None,
    device: torch.device | str = "cpu",
) -> DynamicCache:
    """Build a fresh DynamicCache on ``device`` (the model's) from a record, page by page.

    The fingerprint is checked first when given. Pages are decoded on the CPU and copied to ``device``
    one page at a time.
    """
    if fp is not None:
        kvcache.check_fingerprint(record, fp)
    else:
        kvcache.check_record(record)
    meta = record["meta"]
    dtype = getattr(torch, meta["dtype"])
    total = len(record["tokens"])
    keys = [torch.empty((1, k[0], total, k[1]), dtype=dtype, device=device) for k, _v in meta["shapes"]]
    values = [torch.empty((1, v[0], total, v[1]), dtype=dtype, device=device) for _k, v in meta["shapes"]]
    item = torch.empty((), dtype=dtype).element_size()
    per_token = sum(k[0] * k[1] + v[0] * v[1] for k, v in meta["shapes"]) * item
    if sum(p["nbytes"] for p in record["pages"]) != per_token * total:
        raise InvalidInput("KV cache record's page sizes do not match its layer shapes")
    for start, end, data in kvcache.iter_pages(store, record):
        buf = torch.frombuffer(bytearray(data), dtype=torch.uint8)
        at = 0
        for target in (t for pair in zip(keys, values, strict=True) for t in pair):
            heads, dim = target.shape[1], target.shape[3]
            n = heads * (end - start) * dim * item
            if at + n > len(buf):
                raise InvalidInput(f"KV page at token {start} is shorter than its layout says")
            target[0, :, start:end, :] = buf[at : at + n].view(dtype).view(heads, end - start, dim).to(target.device)
            at += n
        if at != len(buf):
            raise InvalidInput(f"KV page at token {start} is longer than its layout says")
    return DynamicCache(ddp_cache_data=list(zip(keys, values, strict=True)), config=config)
