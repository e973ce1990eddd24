"""SGLang RadixCache + MHATokenToKVPool <-> agentsnap KV pages.

Capture walks the radix tree: for each cached sequence ``match_prefix`` gives the tree node, the path to
it gives the pool's device indices, and ``MHATokenToKVPool.get_cpu_copy`` reads those slots page by page.
Restore allocates slots from the target's allocator, writes the pages with ``load_cpu_copy`` and inserts
the tokens into the target tree; a prefix the target already caches is kept, not overwritten.
A page holds, per layer, the keys then the values of its token slots (``[tokens, heads, head_dim]``).
"""

from __future__ import annotations

from array import array
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from agentsnap_core import InvalidInput, kvcache
from agentsnap_core.store import ObjectStore

FORMAT = "agentsnap-sglang-radix"
DEFAULT_PAGE_SIZE = 64


def _sglang() -> Any:
    import sglang
    from sglang.srt.mem_cache import base_prefix_cache, radix_cache

    return sglang, radix_cache, base_prefix_cache


class SGLangCache:
    """A live SGLang prefix cache (``RadixCache`` over an ``MHATokenToKVPool``) and the model it serves.

    Args:
        tree: the scheduler's ``RadixCache``.
        model: the served model's id (``--model-path``).
        weights: a digest or revision of the weights (part of the fingerprint).
        tokenizer: the tokenizer id.
        page_size: token slots per stored page.
    """

    def __init__(self, tree: Any, *, model: str, weights: str, tokenizer: str = "none", page_size: int = DEFAULT_PAGE_SIZE):
        self.tree = tree
        self.model, self.weights, self.tokenizer, self.page_size = model, weights, tokenizer, page_size

    @property
    def pool(self) -> Any:
        return self.tree.token_to_kv_pool_allocator.get_kvcache()

    def fingerprint(self) -> dict[str, str]:
        sglang, _, _ = _sglang()
        pool = self.pool
        layout = (
            f"sglang-mha/token-head-dim/{pool.layer_num}x{pool.head_num}x{pool.head_dim}x{pool.v_head_dim}/"
            f"{pool.k_buffer[0].device.type}"
        )
        return kvcache.fingerprint(
            model=self.model,
            weights=self.weights,
            dtype=str(pool.dtype).removeprefix("torch."),
            tokenizer=self.tokenizer,
            engine=f"sglang=={sglang.__version__}",
            layout=layout,
        )

    def sequences(self) -> list[list[int]]:
        """The token sequence of every leaf of the radix tree (each cached prefix ends in one)."""
        out: list[list[int]] = []
        stack: list[tuple[Any, list[int]]] = [(self.tree.root_node, [])]
        while stack:
            node, prefix = stack.pop()
            children = [c for c in node.children.values() if c.value is not None]
            if not children and prefix:
                out.append(prefix)
            for child in children:
                stack.append((child, prefix + [int(t) for t in child.key.token_ids]))
        return sorted(out)

    def match(self, tokens: Sequence[int]) -> tuple[int, Any, torch.Tensor]:
        """``(cached length, last node, device indices)`` of the longest cached prefix of ``tokens``."""
        _, radix_cache, base = _sglang()
        res = self.tree.match_prefix(base.MatchPrefixParams(key=radix_cache.RadixKey(array("q", tokens))))
        indices = self.tree.path_device_indices(res.last_device_node)[: res.device_prefix_len]
        return res.device_prefix_len, res.last_device_node, indices

    def page(self, indices: torch.Tensor) -> bytes:
        """The bytes of the pool slots ``indices`` (read through ``get_cpu_copy``)."""
        parts = []
        for layer in self.pool.get_cpu_copy(indices):
            for k, v in layer:
                parts.append(k.contiguous().view(torch.uint8).numpy().tobytes())
                parts.append(v.contiguous().view(torch.uint8).numpy().tobytes())
        return b"".join(parts)


def capture(store: ObjectStore, cache: SGLangCache, sequences: Sequence[Sequence[int]] | None = None) -> dict[str, Any]:
    """Stream the KV of ``sequences`` (default: every sequence the tree caches) into the store."""
    fp = cache.fingerprint()
    records: list[dict[str, Any]] = []
    previous: dict[str, Any] | None = None
    for seq in cache.sequences() if sequences is None else [list(s) for s in sequences]:
        n, node, indices = cache.match(seq)
        if n == 0:
            continue
        lock = cache.tree.inc_lock_ref(node)  # no eviction while the slots are read
        try:
            record = kvcache.write_cache(
                store, fp, seq[:n], cache.page_size, lambda s, e, idx=indices: cache.page(idx[s:e]), previous=previous
            )
        finally:
            cache.tree.dec_lock_ref(node, lock.to_dec_params())
        records.append(record)
        previous = record  # same tree: equal prefix hashes mean the same slots
    refs = list(dict.fromkeys(r for rec in records for r in rec["refs"]))
    return {"format": FORMAT, "v": 1, "fingerprint": fp, "sequences": records, "refs": refs}


def restore(store: ObjectStore, cache: SGLangCache, record: Mapping[str, Any]) -> dict[str, int]:
    """Load a captured tree into ``cache`` (checks every fingerprint first); return token counts."""
    if not isinstance(record, Mapping) or record.get("format") != FORMAT:
        raise InvalidInput("not an agentsnap SGLang cache record")
    fp = cache.fingerprint()
    for rec in record["sequences"]:
        kvcache.check_fingerprint(rec, fp)
    _, radix_cache, base = _sglang()
    pool, allocator = cache.pool, cache.tree.token_to_kv_pool_allocator
    item = torch.empty((), dtype=pool.dtype).element_size()
    shapes = [(pool.head_num, pool.head_dim), (pool.head_num, pool.v_head_dim)]
    per_token = pool.layer_num * sum(h * d for h, d in shapes) * item
    loaded = kept = 0
    for rec in record["sequences"]:
        tokens = rec["tokens"]
        have, _node, prefix_idx = cache.match(tokens)
        need = len(tokens) - have
        if need == 0:
            kept += have
            continue
        new_idx = allocator.alloc(need)
        if new_idx is None:
            raise InvalidInput(f"the SGLang pool has no room for {need} more tokens; evict or grow the pool first")
        try:
            for start, end, data in kvcache.iter_pages(store, rec, fp):
                if end <= have:
                    continue
                lo = max(start, have)
                if len(data) != per_token * (end - start):
                    raise InvalidInput(f"page at token {start} has {len(data)} bytes, the pool layout needs {per_token * (end - start)}")
                buf = torch.frombuffer(bytearray(data), dtype=torch.uint8)
                at, layers = 0, []
                for _ in range(pool.layer_num):
                    kv = []
                    for heads, dim in shapes:
                        size = (end - start) * heads * dim * item
                        t = buf[at : at + size].view(pool.dtype).view(end - start, heads, dim)[lo - start :]
                        kv.append(t)
                        at += size
                    layers.append([kv])  # one chunk per layer
                pool.load_cpu_copy(layers, new_idx[lo - have : end - have])
        except BaseException:
            allocator.free(new_idx)
            raise
        value = torch.cat([prefix_idx.to(new_idx.device), new_idx])
        cache.tree.insert(base.InsertParams(key=radix_cache.RadixKey(array("q", tokens)), value=value))
        loaded += need
        kept += have
    return {"loaded_tokens": loaded, "already_cached_tokens": kept}
