"""DynamicCache <-> agentsnap KV pages.

A page holds token slots ``[start, end)`` of every layer: for each layer, the keys then the values
of shape ``[kv_heads, end - start, head_dim]`` (batch 1), as raw bytes in the cache's dtype.
"""

from __future__ import annotations

import functools
import json
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
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
        slots = {layer.keys.shape[-2], layer.values.shape[-2]}
        if slots != {layers[0].keys.shape[-2]}:
            raise InvalidInput(f"cache layer {i} holds {min(slots)} token slots but layer 0 holds "
                               f"{layers[0].keys.shape[-2]}; the cache is inconsistent (a half-applied update?)")
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


#: config keys that do not change what a forward computes from given weights, besides those every config has
#: (generation defaults, labels, token ids: :func:`_config_keys_ignored`)
CONFIG_IGNORED = frozenset({"_name_or_path", "transformers_version", "architectures", "auto_map", "initializer_range",
                            "use_cache", "dtype", "torch_dtype", "_commit_hash", "_attn_implementation_autoset"})


@functools.cache
def _config_keys_ignored() -> frozenset[str]:
    """:data:`CONFIG_IGNORED`, the keys every config has, and the generation settings and token ids (in the base
    config in transformers 4, in ``GenerationConfig`` only in 5, where setting one on a model config adds it)."""
    base = getattr(transformers, "PreTrainedConfig", None) or transformers.PretrainedConfig
    generation = frozenset(transformers.GenerationConfig().to_dict())
    token_ids = frozenset({"pad_token_id", "bos_token_id", "eos_token_id", "sep_token_id", "decoder_start_token_id"})
    return CONFIG_IGNORED | frozenset(base().to_dict()) | generation | token_ids


def config_digest(config: Any) -> str:
    """A digest of the settings of ``config`` that shape the KV cache and are not parameters (RoPE base and
    scaling, norm epsilon, activation, sliding window, ...), nested configs included; the keys every config has
    (generation defaults, token ids, labels) and :data:`CONFIG_IGNORED` are left out."""
    ignored = _config_keys_ignored()

    def kept(value: Any) -> Any:
        if isinstance(value, Mapping):
            return {str(k): kept(v) for k, v in value.items() if k not in ignored}
        if isinstance(value, (list, tuple)):
            return [kept(v) for v in value]
        return value

    text = json.dumps(kept(json.loads(config.to_json_string(use_diff=False))), sort_keys=True)
    return blake3.blake3(text.encode()).hexdigest()[:32]


def fingerprint(model: torch.nn.Module, *, weights: str | None = None, tokenizer: str = "none") -> dict[str, str]:
    """What must match for a cache to be valid in another process: model, config, weights, dtype, engine, layout."""
    cfg = model.config
    return kvcache.fingerprint(
        model=f"{cfg.model_type}:{getattr(cfg, 'name_or_path', '') or 'from-config'}",
        weights=weights or weights_digest(model),
        dtype=str(next(model.parameters()).dtype).removeprefix("torch."),
        tokenizer=tokenizer,
        engine=f"transformers=={transformers.__version__};torch=={torch.__version__}",
        layout=layout(model),
        config=config_digest(cfg),
    )


def expected_fingerprint(record: Mapping[str, Any], fp: Mapping[str, str]) -> dict[str, str]:
    """``fp`` as a record is checked against: a record written before the config was part of the fingerprint has no
    ``config`` field and is compared on the other fields, as it was then."""
    fields = record.get("fingerprint") if isinstance(record, Mapping) else None
    if isinstance(fields, Mapping) and "config" not in fields:
        return {k: v for k, v in fp.items() if k != "config"}
    return dict(fp)


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

    # on the CPU a page is sliced out of byte views of the cache (no copy: in a contiguous [heads, tokens, dim]
    # tensor one head's token slots are contiguous); on a GPU, chunks of pages are put in stored order there and
    # copied to pinned host memory in one copy each, the next chunk's copy running while the core stores this one
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
    tensors and verifies it there (:func:`agentsnap_core.layers.kvcache.read_into`); on another device (a GPU)
    chunks of pages are read and verified the same way into pinned host memory, copied to the device in one copy
    each and put in place there (:func:`_read_staged`).
    """
    if fp is not None:
        kvcache.check_fingerprint(record, expected_fingerprint(record, fp))
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
    _read_staged(store, record, targets)
    return _cache(keys, values, config)


def _read_into(store: ObjectStore, record: Mapping[str, Any], targets: list[torch.Tensor]) -> None:
    """Read every segment straight into CPU tensors ``[1, heads, tokens, dim]`` (one scatter read each, verified
    where it landed): a page's bytes are, per layer's keys or values, per head, its token slots' rows."""
    item = targets[0].element_size()
    # byte views made once per head; a page's buffers are slices of them (slicing a memoryview costs a tenth of
    # slicing an array and wrapping it: ~8k buffers at 4096 tokens, made while no read has started)
    slots = [(memoryview(t[0, h].reshape(-1).view(torch.uint8).numpy()), t.shape[3] * item)
             for t in targets for h in range(t.shape[1])]
    kvcache.read_into(store, record, lambda start, end: [rows[start * row : end * row] for rows, row in slots])


def _read_staged(store: ObjectStore, record: Mapping[str, Any], targets: list[torch.Tensor]) -> None:
    """Read a record into tensors ``[1, heads, tokens, dim]`` on a device other than the CPU, a chunk of pages at a
    time: each chunk is read in the stored byte order (one buffer per page, verified where it landed) into a pinned
    host buffer of about :data:`STAGING_BYTES`, copied to the device in one copy, and put in place there (one
    strided copy per tensor on the device). The reads of the next chunks run on the core's worker threads while
    the device copies this one: a ring of :func:`_staging_depth` host buffers keeps every worker busy."""
    device = targets[0].device
    pin = device.type == "cuda"
    tensors = [t[0] for t in targets]
    dims, per_token = _page_layout(tensors)
    pages, size = record["pages"], record["page_size"]
    per_chunk = max(1, STAGING_BYTES // (per_token * size))
    chunks = [pages[i : i + per_chunk] for i in range(0, len(pages), per_chunk)]
    depth = min(len(chunks), _staging_depth())
    cap = min(per_chunk, len(pages)) * size * per_token
    hosts = [torch.empty(cap, dtype=torch.uint8, pin_memory=pin) for _ in range(depth)]
    staged = [torch.empty(cap, dtype=torch.uint8, device=device) for _ in range(min(2, depth))]
    copied: list[Any] = [None] * depth  # per host buffer: the event of its last copy to the device
    stream = torch.cuda.current_stream(device) if pin else None
    reading: deque[tuple[int, int, int, kvcache.PendingRead]] = deque()  # (first token slot, end, buffer, read)

    def finish_oldest() -> None:
        a, b, slot, pending = reading[0]
        pending.wait()
        reading.popleft()
        on_device = staged[slot % len(staged)][: (b - a) * per_token]
        on_device.copy_(hosts[slot][: (b - a) * per_token], non_blocking=pin)
        if stream is not None:
            copied[slot] = torch.cuda.Event()
            copied[slot].record(stream)
        for cache, stored in _pairs(on_device, tensors, dims, a, b, size, per_token):
            cache.copy_(stored)

    try:
        for k, chunk in enumerate(chunks):
            if len(reading) == depth:
                finish_oldest()
            slot = k % depth
            if copied[slot] is not None:
                copied[slot].synchronize()  # the host buffer's previous chunk is on the device
            a, b = chunk[0]["start"], chunk[-1]["start"] + chunk[-1]["n"]
            view = memoryview(hosts[slot].numpy())
            reading.append((a, b, slot, kvcache.start_pages_into(
                store, chunk, lambda s, e, a=a, v=view: [v[(s - a) * per_token : (e - a) * per_token]])))
        while reading:
            finish_oldest()
    finally:  # an error: the reads still queued are dropped or finished before their buffers are given back
        for *_, pending in reading:
            pending.cancel()
    if stream is not None:
        stream.synchronize()


def _staging_depth() -> int:
    """Host buffers a staged restore reads into: enough chunks in flight for every core worker (a chunk is about
    :data:`STAGING_BYTES`, read as segments of :data:`kvcache.SEGMENT_BYTES`), and one being copied to the device."""
    return 1 + max(1, -(-kvcache.workers() * kvcache.SEGMENT_BYTES // STAGING_BYTES))


def _page_layout(tensors: list[torch.Tensor]) -> tuple[list[tuple[int, int]], int]:
    """``([(heads, dim)] per tensor, bytes per token slot)`` of cache tensors ``[heads, tokens, dim]``."""
    dims = [(t.shape[0], t.shape[2]) for t in tensors]
    return dims, sum(h * d for h, d in dims) * tensors[0].element_size()


def _pairs(data: torch.Tensor, tensors: list[torch.Tensor], dims: list[tuple[int, int]], a: int, b: int, size: int,
           per_token: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """For token slots ``[a, b)`` (whole pages, but a record's last page): pairs of views of the same values, in the
    cache tensors ``[heads, tokens, dim]`` and in ``data`` (the pages' bytes in stored order, on the same device),
    shaped alike ``[heads, pages, slots, dim]``; a copy between them moves a chunk with one strided copy per tensor."""
    full = (b - a) // size * size  # only a record's last page can be short
    for start, n, count, slots in ((a, full, full // size, size), (a + full, b - a - full, 1, b - a - full)):
        if n == 0:
            continue
        pages = data[(start - a) * per_token : (start - a + n) * per_token].view(count, slots * per_token)
        at = 0
        for t, (h, d) in zip(tensors, dims, strict=True):
            width = h * slots * d * t.element_size()
            stored = pages[:, at : at + width].view(t.dtype).view(count, h, slots, d).permute(1, 0, 2, 3)
            yield t[:, start : start + n, :].view(h, count, slots, d), stored
            at += width


def _cache(keys: list[torch.Tensor], values: list[torch.Tensor], config: Any) -> DynamicCache:
    # DynamicCache's constructor concatenates what it is given onto empty tensors (a copy of the whole cache): it is
    # given zero-length slots, and each layer then holds the filled tensors (DynamicLayer.keys / .values, the tensors
    # its update() replaces; transformers 4.57 and 5.23)
    cache = DynamicCache(ddp_cache_data=[(k[:, :, :0], v[:, :, :0]) for k, v in zip(keys, values, strict=True)],
                         config=config)
    for layer, k, v in zip(cache.layers, keys, values, strict=True):
        layer.keys, layer.values = k, v
    return cache


class _HostStaging:
    """Device tensors ``[heads, tokens, dim]`` handed to the core as host bytes, a chunk of pages at a time: each
    chunk (about :data:`STAGING_BYTES`) is put in stored page order on the device (one strided copy per tensor) and
    copied to pinned host memory in one copy; the next chunk's copies are queued as soon as one is taken (they run
    while the core hashes and writes). Host memory is bounded by the chunks the core still holds (its segments in
    flight) plus the one ahead."""

    def __init__(self, tensors: list[torch.Tensor], page_size: int) -> None:
        self.tensors, self.size = tensors, page_size
        self.length = tensors[0].shape[1]
        self.pin = tensors[0].device.type == "cuda"
        self.dims, self.per_token = _page_layout(tensors)
        self.chunk = max(1, STAGING_BYTES // (self.per_token * page_size)) * page_size
        self.current: tuple[int, int, memoryview] | None = None
        self.ahead: tuple[int, int, torch.Tensor, Any] | None = None

    def _copy(self, a: int) -> tuple[int, int, torch.Tensor, Any]:
        b = min(a + self.chunk, self.length)
        device = self.tensors[0].device
        packed = torch.empty((b - a) * self.per_token, dtype=torch.uint8, device=device)
        for cache, stored in _pairs(packed, self.tensors, self.dims, a, b, self.size, self.per_token):
            stored.copy_(cache)
        host = torch.empty(packed.shape, dtype=torch.uint8, pin_memory=self.pin)
        host.copy_(packed, non_blocking=self.pin)
        done = None
        if self.pin:
            done = torch.cuda.Event()
            done.record(torch.cuda.current_stream(device))
        return a, b, host, done

    def page_bytes(self, start: int, end: int) -> memoryview:
        if self.current is None or not self.current[0] <= start < self.current[1]:
            a, b, host, done = self.ahead if self.ahead and self.ahead[0] == start else self._copy(start)
            self.ahead = self._copy(b) if b < self.length else None
            if done is not None:
                done.synchronize()
            self.current = (a, b, memoryview(host.numpy()))
        a, _b, view = self.current
        return view[(start - a) * self.per_token : (end - a) * self.per_token]
