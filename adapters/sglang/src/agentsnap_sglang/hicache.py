"""AgentsnapHiCacheStorage: an SGLang HiCache L3 storage backend whose pages live in an agentsnap store.

Plug it into a running server with SGLang's dynamic backend loader::

    --enable-hierarchical-cache --hicache-storage-backend dynamic --hicache-storage-backend-extra-config
    '{"backend_name": "agentsnap", "module_path": "agentsnap_sglang.hicache",
      "class_name": "AgentsnapHiCacheStorage", "repo": "/path/to/repo"}'

Every page SGLang writes back becomes content in the store (deduplicated, verified on read). The key -> page
map of a namespace (model, TP/PP rank) is committed as a snapshot on ``refs/hicache/<namespace>`` every
``flush_every`` new pages and on ``close``: the server's L3 cache then has history like any agentsnap branch
(``agentsnap log refs/hicache/...``), survives restarts, and an older state can be restored by pointing the
ref back. Pages written since the last flush are protected from ``gc`` by its grace period.
"""

from __future__ import annotations

import re
import threading
from typing import Any

import torch
from agentsnap_core import Repo, content
from agentsnap_core.objects import is_oid
from sglang.srt.mem_cache.hicache_storage import HiCacheStorage, HiCacheStorageConfig

FORMAT = "agentsnap-sglang-hicache"


def namespace(config: HiCacheStorageConfig) -> str:
    """A ref-safe namespace per model and shard (MLA pages are shared across TP ranks, like SGLang's file backend)."""
    model = re.sub(r"[^A-Za-z0-9._-]+", "-", config.model_name or "model").strip("-.") or "model"
    shard = "mla" if config.is_mla_model else f"tp{config.tp_rank}of{config.tp_size}"
    if config.pp_size > 1:
        shard += f"-pp{config.pp_rank}of{config.pp_size}"
    return f"{model}/{shard}"


class AgentsnapHiCacheStorage(HiCacheStorage):
    """SGLang's ``HiCacheStorage`` interface over an agentsnap repository (``extra_config['repo']``)."""

    def __init__(self, storage_config: HiCacheStorageConfig, kwargs: dict[str, Any] | None = None) -> None:
        extra = storage_config.extra_config or {}
        if not extra.get("repo"):
            raise ValueError("AgentsnapHiCacheStorage needs extra_config['repo'] (an agentsnap repository path)")
        self.repo = Repo.open(str(extra["repo"]))
        self.ref = f"refs/hicache/{namespace(storage_config)}"
        self.flush_every = int(extra.get("flush_every", 256))
        self._lock = threading.Lock()
        self._pages: dict[str, str] = {}
        self._unflushed = 0
        if self.repo.refs.get_ref(self.ref):
            layer = self.repo.read_layer(self.ref, "cache")
            if isinstance(layer, dict) and layer.get("format") == FORMAT:
                self._pages = {k: v for k, v in layer["pages"].items() if is_oid(v)}

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
            fresh = self._pages.get(key) != oid
            self._pages[key] = oid
            self._unflushed += int(fresh)
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
            self._unflushed += 1
        self.flush()

    def get_stats(self) -> dict[str, int]:
        with self._lock:
            return {"pages": len(self._pages), "unflushed": self._unflushed}

    # ---------------------------------------------------------------- agentsnap
    def flush(self, message: str = "hicache pages") -> str | None:
        """Commit the key -> page map as a snapshot on this namespace's ref; return its id."""
        with self._lock:
            if self._unflushed == 0 and self.repo.refs.get_ref(self.ref):
                return self.repo.refs.get_ref(self.ref)
            pages = dict(self._pages)
            self._unflushed = 0
        layer = {"format": FORMAT, "v": 1, "pages": pages, "refs": sorted(set(pages.values()))}
        snap = self.repo.snapshot(message, layers={"cache": layer}, capture_world=False, ref=self.ref, move_head=False)
        return snap.id

    def close(self) -> None:
        self.flush("hicache close")
        self.repo.close()
