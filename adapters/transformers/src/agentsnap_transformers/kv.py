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
#: host memory per chunk of token slots staged from a GPU cache for a snapshot (pinned; one chunk copied ahead)
STAGING_BYTES = 32 << 20


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
    """Stream ``cache`` (holding the KV of ``tokens``) into the store page by page; return the record.

    The page bytes are handed to the core one buffer per layer and K/V (no join here)."""
    layers = _layers(cache)
    length = layers[0].keys.shape[-2]
    if length != len(tokens):
        raise InvalidInput(f"cache holds {length} token slots but {len(tokens)} tokens were given")

    # a page is sliced out of byte views of host memory (no copy: in a contiguous [heads, tokens, dim] tensor one
    # head's token slots are contiguous): the cache itself on the CPU; on a GPU, chunks of token slots copied to
    # pinned host memory in one batch per chunk, the next chunk's copy running while the core stores this one
    tensors = [t[0] for layer in layers for t in (layer.keys, layer.values)]
    if all(t.device.type == "cpu" and t.is_contiguous() for t in tensors):
        heads = [(tensor_bytes(head), head.shape[-1] * head.element_size()) for t in tensors for head in t]

        def page_bytes(start: int, end: int) -> list[memoryview]:  # joined by the core straight into its segment
            return [view[start * row : end * row] for view, row in heads]
    else:
        page_bytes = _HostStaging(tensors, page_size).page_bytes

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

    The fingerprint is checked first when given. On the CPU the core reads each segment straight into the cache
    tensors and verifies it there (:func:`agentsnap_core.layers.kvcache.read_into`); on another device each page
    is a view into its segment (read ahead and verified by the core) copied to ``device``, one layer's keys or
    values at a time.
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
    targets = [t for pair in zip(keys, values, strict=True) for t in pair]
    if all(t.device.type == "cpu" for t in targets):
        _read_into(store, record, targets)
        return _cache(keys, values, config)
    # elsewhere (a GPU) the segments are read the same way into pinned host memory, then copied to the device in
    # one batch of large copies (not one small copy per page and layer)
    pin = targets[0].device.type == "cuda"
    host = [torch.empty(t.shape, dtype=dtype, pin_memory=pin) for t in targets]
    _read_into(store, record, host)
    for t, h in zip(targets, host, strict=True):
        t.copy_(h, non_blocking=pin)
    if pin:
        torch.cuda.current_stream(targets[0].device).synchronize()  # the host buffers are released after this
    return _cache(keys, values, config)


def _read_into(store: ObjectStore, record: Mapping[str, Any], targets: list[torch.Tensor]) -> None:
    """Read every segment straight into CPU tensors ``[1, heads, tokens, dim]`` (one scatter read each, verified
    where it landed): a page's bytes are, per layer's keys or values, per head, its token slots' rows."""
    item = targets[0].element_size()
    slots = [(t[0, h].reshape(-1).view(torch.uint8).numpy(), t.shape[3] * item)
             for t in targets for h in range(t.shape[1])]
    kvcache.read_into(store, record, lambda start, end: [
        memoryview(rows[start * row : end * row]) for rows, row in slots])


class _HostStaging:
    """Device tensors ``[heads, tokens, dim]`` handed to the core as host byte views, a chunk of token slots at a
    time: each chunk (about :data:`STAGING_BYTES`) is copied to pinned host memory with one copy per tensor, and
    the next chunk's copies are queued as soon as one is taken (they run while the core hashes and writes).
    Host memory is bounded by the chunks the core still holds (its segments in flight) plus the one ahead."""

    def __init__(self, tensors: list[torch.Tensor], page_size: int) -> None:
        self.tensors = tensors
        self.length = tensors[0].shape[1]
        self.pin = tensors[0].device.type == "cuda"
        per_token = sum(t.shape[0] * t.shape[2] * t.element_size() for t in tensors)
        self.chunk = max(page_size, STAGING_BYTES // max(1, per_token) // page_size * page_size)
        self.current: tuple[int, int, list[tuple[memoryview, int]]] | None = None
        self.ahead: tuple[int, int, list[torch.Tensor], Any] | None = None

    def _copy(self, a: int) -> tuple[int, int, list[torch.Tensor], Any]:
        b = min(a + self.chunk, self.length)
        host = [torch.empty((t.shape[0], b - a, t.shape[2]), dtype=t.dtype, pin_memory=self.pin) for t in self.tensors]
        for h, t in zip(host, self.tensors, strict=True):
            h.copy_(t[:, a:b, :], non_blocking=self.pin)
        done = None
        if self.pin:
            done = torch.cuda.Event()
            done.record(torch.cuda.current_stream(self.tensors[0].device))
        return a, b, host, done

    def page_bytes(self, start: int, end: int) -> list[memoryview]:
        if self.current is None or not self.current[0] <= start < self.current[1]:
            a, b, host, done = self.ahead if self.ahead and self.ahead[0] == start else self._copy(start)
            self.ahead = self._copy(b) if b < self.length else None
            if done is not None:
                done.synchronize()
            self.current = (a, b, [(tensor_bytes(head), head.shape[-1] * head.element_size())
                                   for h in host for head in h])
        a, _b, heads = self.current
        return [view[(start - a) * row : (end - a) * row] for view, row in heads]


def _cache(keys: list[torch.Tensor], values: list[torch.Tensor], config: Any) -> DynamicCache:
    # DynamicCache's constructor concatenates what it is given onto empty tensors (a copy of the whole cache): it is
    # given zero-length slots, and each layer then holds the filled tensors (DynamicLayer.keys / .values, the tensors
    # its update() replaces; transformers 4.57 and 5.23)
    cache = DynamicCache(ddp_cache_data=[(k[:, :, :0], v[:, :, :0]) for k, v in zip(keys, values, strict=True)],
                         config=config)
    for layer, k, v in zip(cache.layers, keys, values, strict=True):
        layer.keys, layer.values = k, v
    return cache
