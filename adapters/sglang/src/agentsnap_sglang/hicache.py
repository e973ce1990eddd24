"""AgentsnapHiCacheStorage: an SGLang HiCache L3 storage backend whose pages live in an agentsnap store.

Plug it into a running server with SGLang's dynamic backend loader::

    --enable-hierarchical-cache --hicache-storage-backend dynamic --hicache-storage-backend-extra-config
    '{"backend_name": "agentsnap", "module_path": "agentsnap_sglang.hicache",
      "class_name": "AgentsnapHiCacheStorage", "repo": "/path/to/repo"}'

Every page SGLang writes back becomes content in the store (deduplicated, verified on read). The key -> page
map of a namespace (model, TP/PP/CP/DP rank, KV layout, dtype, page size) is committed on
``refs/hicache/<namespace>`` every ``flush_every`` new pages and on ``close``. Each flush is one snapshot holding
only the keys written since the previous one (its parent): a flush costs O(new pages), never a rewrite of the
whole map, and the map is the chain of deltas back to the last ``clear``. The server's L3 cache then has
history like any agentsnap branch (``agentsnap log refs/hicache/...``), survives restarts, and an older state is
restored by pointing the ref back. Pages written since the last flush are protected from ``gc`` by its grace
period; flushed pages stay reachable through the ref's snapshot chain.

The namespace's layout part comes from the host pool SGLang registers (``register_mem_pool_host``: its layout,
KV dtype and page size); ``extra_config`` may name them up front (``"dtype"``, ``"page_size"``).
"""

from __future__ import annotations

import re
import threading
from typing import Any

import torch
from agentsnap_core import Repo
from agentsnap_core.format import content
from agentsnap_core.format.objects import is_oid
from sglang.srt.mem_cache.hicache_storage import HiCacheStorage, HiCacheStorageConfig

FORMAT = "agentsnap-sglang-hicache"


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-.")


def namespace(config: HiCacheStorageConfig, layout: str | None = None) -> str:
    """A ref-safe namespace per model, shard and KV layout (MLA pages are shared across TP ranks, like SGLang's
    file backend). ``layout`` names the page layout, dtype and page size (see :func:`pool_layout`)."""
    model = _safe(config.model_name or "model") or "model"
    shard = "mla" if config.is_mla_model else f"tp{config.tp_rank}of{config.tp_size}"
    for name, rank, size in (("pp", config.pp_rank, config.pp_size), ("cp", config.attn_cp_rank, config.attn_cp_size),
                             ("dcp", config.dcp_rank, config.dcp_size)):
        if size > 1:
            shard += f"-{name}{rank}of{size}"
    if config.dp_rank:
        shard += f"-dp{config.dp_rank}"
    if layout is None:
        extra = config.extra_config or {}
        layout = "page-first" if config.is_page_first_layout else "layer-first"
        layout += f"-{extra.get('dtype', 'dtype-unknown')}-p{extra.get('page_size', config.logical_page_size or 'x')}"
    return f"{model}/{shard}/{_safe(layout)}"


def pool_layout(pool: Any) -> str:
    """Layout, KV dtype and page size of an SGLang host KV pool (what a stored page's bytes mean)."""
    dtype = getattr(pool, "dtype", None) or getattr(getattr(pool, "device_pool", None), "dtype", "dtype-unknown")
    return f"{getattr(pool, 'layout', 'layout-unknown')}-{str(dtype).removeprefix('torch.')}-p{getattr(pool, 'page_size', 'x')}"


class AgentsnapHiCacheStorage(HiCacheStorage):
    """SGLang's ``HiCacheStorage`` interface over an agentsnap repository (``extra_config['repo']``)."""

    def __init__(self, storage_config: HiCacheStorageConfig, kwargs: dict[str, Any] | None = None) -> None:
        extra = storage_config.extra_config or {}
        if not extra.get("repo"):
            raise ValueError("AgentsnapHiCacheStorage needs extra_config['repo'] (an agentsnap repository path)")
        self.repo = Repo.open(str(extra["repo"]))
        self.config = storage_config
        self.flush_every = int(extra.get("flush_every", 256))
        self._lock = threading.Lock()
        self._open(namespace(storage_config))

    def _open(self, ns: str) -> None:
        """Use namespace ``ns``: read its key -> page map from the ref's chain of flushes."""
        self.ref = f"refs/hicache/{ns}"
        self._pages: dict[str, str] = {}
        self._delta: dict[str, str] = {}  # written since the last flush
        self._reset = False  # cleared since the last flush
        chain = []
        tip = self.repo.refs.get_ref(self.ref)
        while tip:
            snap = self.repo.get(tip)
            layer = self.repo.read_layer(snap, "cache")
            if not isinstance(layer, dict) or layer.get("format") != FORMAT:
                break
            chain.append(layer)
            if layer.get("v") == 1 or layer.get("reset"):  # v1 layers held the whole map
                break
            tip = snap.parents[0] if snap.parents else None
        for layer in reversed(chain):
            delta = layer["pages"] if layer.get("v") == 1 else layer["delta"]
            self._pages.update({k: v for k, v in delta.items() if is_oid(v)})

    @property
    def _unflushed(self) -> int:
        return len(self._delta) + int(self._reset)

    def register_mem_pool_host(self, mem_pool_host: Any) -> None:
        """SGLang hands over its host pool: the namespace takes the pool's real layout, dtype and page size."""
        super().register_mem_pool_host(mem_pool_host)
        ns = namespace(self.config, pool_layout(mem_pool_host))
        if f"refs/hicache/{ns}" != self.ref:
            self.flush("hicache: layout known")
            self._open(ns)

    # ---------------------------------------------------------------- HiCacheStorage
    def exists(self, key: str) -> bool:
        with self._lock:
            return key in self._pages

    def set(self, key: str, value: Any = None, target_location: Any = None, target_sizes: Any = None) -> bool:
        tensor = value if value is not None else target_location
        if tensor is None:
            return False
        data = tensor.detach().to("cpu").contiguous().view(torch.uint8).numpy()
        oid = content.put_bytes(self.repo.objects, memoryview(data).cast("B"))
        with self._lock:
            if self._pages.get(key) != oid:
                self._pages[key] = oid
                self._delta[key] = oid
            due = self._unflushed >= self.flush_every
        if due:
            self.flush()
        return True

    def batch_set(self, keys: list[str], values: Any = None, target_locations: Any = None, target_sizes: Any = None) -> bool:
        values = values if values is not None else target_locations
        return all(self.set(k, v) for k, v in zip(keys, values or [None] * len(keys), strict=True))

    def get(self, key: str, target_location: Any = None, target_sizes: Any = None) -> torch.Tensor | None:
        with self._lock:
            oid = self._pages.get(key)
        if oid is None:
            return None
        data = content.get_bytes(self.repo.objects, oid)
        raw = torch.frombuffer(bytearray(data), dtype=torch.uint8)
        if target_location is None:
            return raw
        flat = target_location.view(torch.uint8).reshape(-1)
        if flat.numel() != raw.numel():
            return None  # a page of another size (other layout): a miss, never a partial write
        flat.copy_(raw)
        return target_location

    def batch_get(self, keys: list[str], target_locations: Any = None, target_sizes: Any = None) -> list[Any]:
        return [self.get(k, t) for k, t in zip(keys, target_locations or [None] * len(keys), strict=True)]

    def clear(self) -> None:
        with self._lock:
            self._pages.clear()
            self._delta.clear()
            self._reset = True
        self.flush()

    def get_stats(self) -> dict[str, int]:
        with self._lock:
            return {"pages": len(self._pages), "unflushed": self._unflushed}

    # ---------------------------------------------------------------- agentsnap
    def flush(self, message: str = "hicache pages") -> str | None:
        """Commit the keys written since the last flush as a snapshot on this namespace's ref; return its id."""
        with self._lock:
            tip = self.repo.refs.get_ref(self.ref)
            if self._unflushed == 0 and tip:
                return tip
            delta, reset = self._delta, self._reset or not tip
            self._delta, self._reset = {}, False
        layer = {"format": FORMAT, "v": 2, "reset": reset, "delta": delta, "refs": sorted(set(delta.values()))}
        snap = self.repo.snapshot(message, layers={"cache": layer}, capture_world=False, ref=self.ref, move_head=False)
        return snap.id

    def close(self) -> None:
        self.flush("hicache close")
        self.repo.close()
