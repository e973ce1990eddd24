"""SGLang's prefix tree + MHATokenToKVPool <-> agentsnap KV pages.

The tree is the scheduler's ``tree_cache``: ``UnifiedRadixCache`` (SGLang 0.5.23's default, on its Rust or
Python tree core) or the older ``RadixCache``; any page size. Capture lists the tree's leaves (see
:meth:`SGLangCache.entries`); for each, ``match_prefix`` gives the tree node, the path to it gives the pool's
device indices, and ``MHATokenToKVPool.get_cpu_copy`` reads those slots page by page.
Restore allocates slots from the target's allocator, writes the pages with ``load_cpu_copy`` and inserts
the tokens into the target tree; a prefix the target already caches is kept, not overwritten.
A page holds, per layer, the keys then the values of its token slots (``[tokens, heads, head_dim]``).
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import torch
from agentsnap_core import InvalidInput
from agentsnap_core.layers import kvcache
from agentsnap_core.stores.base import ObjectStore

FORMAT = "agentsnap-sglang-radix"
DEFAULT_PAGE_SIZE = 64


def _sglang() -> Any:
    import sglang
    from sglang.srt.mem_cache import base_prefix_cache, radix_cache

    return sglang, radix_cache, base_prefix_cache


class Entry(NamedTuple):
    """One cached prefix: its tokens and the namespace SGLang keys it under (LoRA ``extra_key``, ``cache_salt``)."""

    tokens: tuple[int, ...]
    extra_key: str | None = None
    cache_salt: str | None = None

    def hash_extra(self) -> list[str]:
        """Extra keys of the page hash chain: a namespaced prefix never shares pages with another namespace."""
        out = []
        if self.extra_key is not None:
            out.append(f"extra_key={self.extra_key}")
        if self.cache_salt is not None:
            out.append(f"cache_salt={self.cache_salt}")
        return out


def _sort_key(e: Entry) -> tuple[Any, ...]:
    return (e.extra_key is not None, e.extra_key or "", e.cache_salt is not None, e.cache_salt or "", e.tokens)


def _walk(root: Any, value: Callable[[Any], Any]) -> list[Entry]:
    """Leaves of a tree of Python nodes (``children``, ``key``); ``value(node)`` is None once evicted from the device."""
    out: list[Entry] = []
    stack: list[tuple[Any, tuple[int, ...], Any]] = [(root, (), None)]
    while stack:
        node, prefix, key = stack.pop()
        children = [c for c in node.children.values() if value(c) is not None]
        if not children and prefix:
            out.append(Entry(prefix, key.extra_key, key.cache_salt))
        for child in children:
            stack.append((child, prefix + tuple(int(t) for t in child.key.raw_token_ids()), child.key))
    return sorted(out, key=_sort_key)


# NodeIds past the root probed before giving up on a Rust tree (at about 0.5 us each, half a minute).
MAX_NODE_PROBES = 1 << 26


def _snapshot_entries(core: Any) -> list[Entry]:
    """Leaves of a Rust tree core, which has no node objects: its NodeIds are never reused and count up from the
    root, and ``snapshot_buffer_backup(node_id)`` gives a live node's key and parent (None for any other id, or a
    node whose KV is not on the device). Ids are probed upward until the nodes found hold every token the tree
    keeps on the device (``full_evictable_size + full_protected_size``)."""
    core.backfill_missing_hash_values()  # snapshots need the page hashes (computed once, as when storage attaches)
    total = core.full_evictable_size() + core.full_protected_size()
    root = core.root_node_handle()
    nodes: dict[int, Any] = {}
    covered, node_id = 0, root
    while covered < total:
        node_id += 1
        if node_id - root > MAX_NODE_PROBES:
            raise InvalidInput(
                f"found {covered} of the {total} tokens of the Rust radix tree in {MAX_NODE_PROBES} node ids; "
                "pass the sequences to capture explicitly"
            )
        snap = core.snapshot_buffer_backup(node_id, False)
        if snap is not None:
            nodes[node_id] = snap
            covered += len(snap.key)
    parents = {s.parent_node_id for s in nodes.values() if not s.parent_is_root}
    out = []
    for leaf_id in sorted(set(nodes) - parents):
        leaf, chain, snap = nodes[leaf_id], [], nodes[leaf_id]
        while True:
            chain.append(snap.key.raw_token_ids())
            if snap.parent_is_root:
                break
            if snap.parent_node_id not in nodes:
                raise InvalidInput(f"radix tree node {snap.node_id} has a parent without device KV; capture again")
            snap = nodes[snap.parent_node_id]
        tokens = tuple(int(t) for part in reversed(chain) for t in part)
        out.append(Entry(tokens, leaf.key.extra_key, leaf.key.cache_salt))
    return sorted(out, key=_sort_key)


class SGLangCache:
    """A live SGLang prefix cache (the scheduler's tree over an ``MHATokenToKVPool``) and the model it serves.

    Args:
        tree: the scheduler's ``tree_cache`` (``UnifiedRadixCache`` or ``RadixCache``).
        model: the served model's id (``--model-path``).
        weights: a digest or revision of the weights (part of the fingerprint).
        tokenizer: the tokenizer id.
        page_size: token slots per stored agentsnap page (independent of the tree's own page size).
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

    def entries(self) -> list[Entry]:
        """Every cached prefix that ends in a leaf of the tree: ``(tokens, extra_key, cache_salt)``.

        Reads ``RadixCache`` and ``UnifiedRadixCache`` on the Python tree core by walking the nodes, and
        ``UnifiedRadixCache`` on the Rust tree core (which exposes no nodes) through its node snapshots.
        Only prefixes whose KV is in the device pool are listed (a prefix evicted to HiCache's host tier is not).
        """
        tree = self.tree
        core = getattr(tree, "tree_core", None)
        if core is None:  # RadixCache
            return _walk(tree.root_node, lambda node: node.value)
        if getattr(core, "is_eagle", False):
            raise InvalidInput("the tree is keyed by token bigrams (EAGLE speculative decoding), which is not supported")
        from sglang.srt.mem_cache.unified_cache.components import ComponentType

        try:
            root = core.root_node
        except NotImplementedError:  # the Rust tree core
            return _snapshot_entries(core)
        full = ComponentType.FULL
        return _walk(root, lambda node: node.component_data[full].value)

    def sequences(self) -> list[list[int]]:
        """The token sequence of every leaf of the radix tree (each cached prefix ends in one), any namespace."""
        return sorted(list(e.tokens) for e in self.entries())

    def match(self, tokens: Sequence[int], extra_key: str | None = None, cache_salt: str | None = None) -> tuple[int, Any, torch.Tensor]:
        """``(cached length, last node, device indices)`` of the longest cached prefix of ``tokens``."""
        _, radix_cache, base = _sglang()
        key = radix_cache.RadixKey(array("q", tokens), extra_key, cache_salt=cache_salt)
        res = self.tree.match_prefix(base.MatchPrefixParams(key=key))
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


def _as_entry(seq: Any) -> Entry:
    if isinstance(seq, Entry):
        return seq
    if hasattr(seq, "token_ids"):  # a RadixKey
        return Entry(tuple(int(t) for t in seq.raw_token_ids()), seq.extra_key, seq.cache_salt)
    return Entry(tuple(int(t) for t in seq))


def capture(store: ObjectStore, cache: SGLangCache, sequences: Sequence[Any] | None = None) -> dict[str, Any]:
    """Stream the KV of ``sequences`` (default: every prefix the tree caches) into the store.

    ``sequences`` items are token lists (no namespace), :class:`Entry` or SGLang ``RadixKey`` objects.
    """
    fp = cache.fingerprint()
    records: list[dict[str, Any]] = []
    previous: dict[str, Any] | None = None
    for entry in cache.entries() if sequences is None else [_as_entry(s) for s in sequences]:
        seq = list(entry.tokens)
        n, node, indices = cache.match(seq, entry.extra_key, entry.cache_salt)
        if n == 0:
            continue
        lock = cache.tree.inc_lock_ref(node)  # no eviction while the slots are read
        try:
            record = kvcache.write_cache(
                store, fp, seq[:n], cache.page_size, lambda s, e, idx=indices: cache.page(idx[s:e]),
                extra=entry.hash_extra(), previous=previous,
                meta={"extra_key": entry.extra_key, "cache_salt": entry.cache_salt},
            )
        finally:
            cache.tree.dec_lock_ref(node, lock.to_dec_params())
        records.append(record)
        previous = record  # same tree: equal prefix hashes mean the same slots
    refs = list(dict.fromkeys(r for rec in records for r in rec["refs"]))
    return {"format": FORMAT, "v": 1, "fingerprint": fp, "sequences": records, "refs": refs}


def _entry_of(rec: Mapping[str, Any]) -> Entry:
    meta = rec.get("meta") or {}
    entry = Entry(tuple(rec["tokens"]), meta.get("extra_key"), meta.get("cache_salt"))
    if list(rec.get("extra", [])) != entry.hash_extra():
        raise InvalidInput("an SGLang cache record's namespace does not match its page hashes (tampered record)")
    return entry


def restore(store: ObjectStore, cache: SGLangCache, record: Mapping[str, Any]) -> dict[str, int]:
    """Load a captured tree into ``cache`` (checks every fingerprint first); return token counts.

    Each prefix is cut to whole pages of the target tree (``tree.page_size``): the tokens of a partial last
    page are not loaded (counted in ``partial_page_tokens``; the server recomputes them on the next request).
    """
    if not isinstance(record, Mapping) or record.get("format") != FORMAT:
        raise InvalidInput("not an agentsnap SGLang cache record")
    fp = cache.fingerprint()
    for rec in record["sequences"]:
        kvcache.check_fingerprint(rec, fp)
        _entry_of(rec)
    _, radix_cache, base = _sglang()
    pool, allocator = cache.pool, cache.tree.token_to_kv_pool_allocator
    tree_page = int(cache.tree.page_size)
    item = torch.empty((), dtype=pool.dtype).element_size()
    shapes = [(pool.head_num, pool.head_dim), (pool.head_num, pool.v_head_dim)]
    per_token = pool.layer_num * sum(h * d for h, d in shapes) * item
    loaded = kept = partial = 0
    for rec in record["sequences"]:
        entry = _entry_of(rec)
        tokens = list(entry.tokens)
        n = len(tokens) // tree_page * tree_page
        partial += len(tokens) - n
        if n == 0:
            continue
        have, _node, prefix_idx = cache.match(tokens[:n], entry.extra_key, entry.cache_salt)
        need = n - have
        if need == 0:
            kept += have
            continue
        new_idx = allocator.alloc(need)
        if new_idx is None:
            raise InvalidInput(f"the SGLang pool has no room for {need} more tokens; evict or grow the pool first")
        try:
            for start, end, data in kvcache.iter_pages(store, rec, fp):
                lo, hi = max(start, have), min(end, n)
                if lo >= hi:
                    continue
                if len(data) != per_token * (end - start):
                    raise InvalidInput(f"page at token {start} has {len(data)} bytes, the pool layout needs {per_token * (end - start)}")
                buf = torch.frombuffer(bytearray(data), dtype=torch.uint8)
                at, layers = 0, []
                for _ in range(pool.layer_num):
                    kv = []
                    for heads, dim in shapes:
                        size = (end - start) * heads * dim * item
                        t = buf[at : at + size].view(pool.dtype).view(end - start, heads, dim)[lo - start : hi - start]
                        kv.append(t)
                        at += size
                    layers.append([kv])  # one chunk per layer
                pool.load_cpu_copy(layers, new_idx[lo - have : hi - have])
        except BaseException:
            allocator.free(new_idx)
            raise
        key = radix_cache.RadixKey(array("q", tokens[:n]), entry.extra_key, cache_salt=entry.cache_salt)
        value = torch.cat([prefix_idx.to(new_idx.device), new_idx]).to(torch.int64)
        # prev_prefix_len: the first ``have`` slots are the tree's own; UnifiedRadixCache frees duplicates past it
        cache.tree.insert(base.InsertParams(key=key, value=value, prev_prefix_len=have))
        loaded += need
        kept += have
    return {"loaded_tokens": loaded, "already_cached_tokens": kept, "partial_page_tokens": partial}
