"""AgentsnapConnector: a vLLM KV connector (``KVConnectorBase_V1``) backed by an agentsnap store.

Configure it with ``kv_connector_module_path`` (see :func:`agentsnap_vllm.kv_transfer_config`)::

    KVTransferConfig(kv_connector="AgentsnapConnector", kv_connector_module_path="agentsnap_vllm.connector",
                     kv_role="kv_both", kv_connector_extra_config={"repo": "/path/to/repo", "save": True,
                                                                    "load": "<snapshot id, branch or tag>"})

*Save*: on a request's prefill step the worker copies the KV of the prompt's full blocks out of the paged
cache (``save_kv_layer``) and, after the forward pass (``wait_for_save``), streams it into the store as
agentsnap pages (one page = one vLLM block, all layers). ``collective_rpc`` hands the saved records to the
caller, who snapshots them (:func:`agentsnap_vllm.snapshot`).

*Load*: a fresh engine is configured with a snapshot (``load``), or a request names one in
``SamplingParams(extra_args={"kv_transfer_params": {"agentsnap_snapshot": id}})``. The scheduler matches
the prompt's chained page hashes against the snapshot; the matched tokens are reported as externally
computed (``get_num_new_matched_tokens``), so vLLM allocates blocks and skips their prefill, and the worker
writes the pages into those blocks before the forward pass (``start_load_kv``). A snapshot whose
fingerprint (model, weights, dtype, engine version, KV layout, block size) differs is refused.

The code uses only the connector API, so the CUDA build of vLLM (>= 0.32) runs the same connector; the
fingerprint keeps CPU and CUDA pages apart (their layouts differ).
"""

from __future__ import annotations

import hashlib
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from agentsnap_core import AgentSnapError, InvalidInput, Repo, content, kvcache
from vllm.distributed.kv_transfer.kv_connector.v1.base import (
    KVConnectorBase_V1,
    KVConnectorMetadata,
    KVConnectorRole,
)

if TYPE_CHECKING:
    from vllm.config import VllmConfig
    from vllm.forward_context import ForwardContext
    from vllm.v1.core.kv_cache_manager import KVCacheBlocks
    from vllm.v1.core.sched.output import SchedulerOutput
    from vllm.v1.kv_cache_interface import KVCacheConfig
    from vllm.v1.request import Request

FORMAT = "agentsnap-vllm"
SNAPSHOT_PARAM = "agentsnap_snapshot"
#: weight files larger than this (total) are identified by name, size and revision instead of content
MAX_HASHED_WEIGHTS = 2 * 1024**3


def weights_digest(model: str, revision: str | None = None) -> str:
    """A digest of a local model directory's weight files (content), or the hub id + revision."""
    path = Path(model)
    if not path.is_dir():
        return f"{model}@{revision or 'main'}"
    files = sorted(p for p in path.iterdir() if p.suffix in (".safetensors", ".bin", ".pt"))
    h = hashlib.sha256()
    hash_content = sum(p.stat().st_size for p in files) <= MAX_HASHED_WEIGHTS
    for p in files:
        h.update(f"{p.name}:{p.stat().st_size}\n".encode())
        if hash_content:
            with open(p, "rb") as f:
                for block in iter(lambda f=f: f.read(1 << 20), b""):
                    h.update(block)
    return h.hexdigest()


def engine_fingerprint(vllm_config: VllmConfig, kv_cache_config: KVCacheConfig | None) -> dict[str, str]:
    """What must match between the saving and the loading engine."""
    import vllm
    from vllm.platforms import current_platform

    mc, cc = vllm_config.model_config, vllm_config.cache_config
    extra = vllm_config.kv_transfer_config.kv_connector_extra_config or {}
    groups = []
    for g in getattr(kv_cache_config, "kv_cache_groups", None) or []:
        spec = g.kv_cache_spec
        groups.append(
            f"{type(spec).__name__}(block={spec.block_size},heads={getattr(spec, 'num_kv_heads', '?')},"
            f"head={getattr(spec, 'head_size', '?')},dtype={getattr(spec, 'dtype', '?')},layers={len(g.layer_names)})"
        )
    return kvcache.fingerprint(
        model=str(extra.get("model_id") or mc.model),
        weights=str(extra.get("weights") or weights_digest(mc.model, mc.revision)),
        dtype=str(mc.dtype).removeprefix("torch.") + f"/kv={cc.cache_dtype}",
        tokenizer=str(mc.tokenizer or "none"),
        engine=f"vllm=={vllm.__version__}",
        layout=f"{current_platform.device_type}/block={cc.block_size}/" + ";".join(groups),
    )


@dataclass
class _Transfer:
    req_id: str
    tokens: list[int]  # full blocks only
    block_ids: list[int]
    pages: list[dict[str, Any]] = field(default_factory=list)  # load: the snapshot pages to write


@dataclass
class AgentsnapConnectorMetadata(KVConnectorMetadata):
    loads: list[_Transfer] = field(default_factory=list)
    saves: list[_Transfer] = field(default_factory=list)


class AgentsnapConnector(KVConnectorBase_V1):
    """Save vLLM KV blocks into an agentsnap repository and load them into a fresh engine."""

    def __init__(self, vllm_config: VllmConfig, role: KVConnectorRole, kv_cache_config: KVCacheConfig | None = None):
        super().__init__(vllm_config=vllm_config, role=role, kv_cache_config=kv_cache_config)
        extra = self._kv_transfer_config.kv_connector_extra_config or {}
        if not extra.get("repo"):
            raise InvalidInput("AgentsnapConnector needs kv_connector_extra_config['repo'] (an agentsnap repository)")
        self._repo = Repo.open(str(extra["repo"]))
        self._block = vllm_config.cache_config.block_size
        self._save = bool(extra.get("save", True))
        self._fp = engine_fingerprint(vllm_config, kv_cache_config)
        self._lock = threading.Lock()
        # scheduler side
        self._indexes: dict[str, dict[str, list[dict[str, Any]]]] = {}  # snapshot id -> last page hash -> pages
        self._default = str(extra["load"]) if extra.get("load") else None
        self._need_load: dict[str, _Transfer] = {}
        self._saved_prefixes: set[str] = set()
        self.loaded_tokens: dict[str, int] = {}
        if self._default and role == KVConnectorRole.SCHEDULER:
            self._default = self._index(self._default)  # refuse a mismatched snapshot at engine start
        # worker side
        self._kv_caches: dict[str, torch.Tensor] = {}
        self._pending: dict[str, dict[str, torch.Tensor]] = {}
        self._saved: list[dict[str, Any]] = []

    # ------------------------------------------------------------------ scheduler side
    def _index(self, spec: str) -> str:
        """Read a snapshot's cache layer once; check its fingerprint; index its pages by chained hash."""
        snap = self._repo.get(spec)
        with self._lock:
            if snap.id in self._indexes:
                return snap.id
        layer = self._repo.read_layer(snap, "cache")
        if not isinstance(layer, dict) or layer.get("format") != FORMAT:
            raise InvalidInput(f"snapshot {snap.id[:12]} has no vLLM KV cache layer")
        index: dict[str, list[dict[str, Any]]] = {}
        for rec in layer["requests"]:
            kvcache.check_fingerprint(rec, self._fp)
            for i, page in enumerate(rec["pages"]):
                index.setdefault(page["hash"], rec["pages"][: i + 1])
        with self._lock:
            self._indexes[snap.id] = index
        return snap.id

    def _match(self, request: Request) -> list[dict[str, Any]]:
        params = getattr(request, "kv_transfer_params", None) or {}
        spec = params.get(SNAPSHOT_PARAM) or self._default
        if not spec:
            return []
        index = self._indexes[self._index(str(spec))]
        tokens = list(request.prompt_token_ids or [])
        usable = (len(tokens) - 1) // self._block  # always leave the last prompt token to compute
        hashes = kvcache.page_hashes(tokens[: usable * self._block], self._block, [kvcache.fingerprint_key(self._fp)])
        for n in range(len(hashes), 0, -1):
            pages = index.get(hashes[n - 1])
            if pages is not None:
                return pages
        return []

    def get_num_new_matched_tokens(self, request: Request, num_computed_tokens: int) -> tuple[int | None, bool]:
        pages = self._match(request)
        matched = len(pages) * self._block
        if matched <= num_computed_tokens:
            return 0, False
        tokens = list(request.prompt_token_ids or [])[:matched]
        self._need_load[request.request_id] = _Transfer(request.request_id, tokens, [], pages)
        return matched - num_computed_tokens, False

    def update_state_after_alloc(self, request: Request, blocks: KVCacheBlocks, num_external_tokens: int) -> None:
        if num_external_tokens == 0:
            self._need_load.pop(request.request_id, None)

    def build_connector_meta(self, scheduler_output: SchedulerOutput) -> KVConnectorMetadata:
        meta = AgentsnapConnectorMetadata()
        for new in scheduler_output.scheduled_new_reqs:
            tokens = list(new.prompt_token_ids or [])
            block_ids = list(new.block_ids[0])
            load = self._need_load.pop(new.req_id, None)
            if load is not None:
                load.block_ids = block_ids[: len(load.pages)]
                meta.loads.append(load)
                self.loaded_tokens[new.req_id] = len(load.tokens)
                continue
            scheduled = scheduler_output.num_scheduled_tokens.get(new.req_id, 0)
            full = len(tokens) // self._block * self._block
            if not self._save or full == 0 or new.num_computed_tokens + scheduled < len(tokens):
                continue  # nothing to save, or a chunked prefill (not saved)
            key = kvcache.page_hashes(tokens[:full], self._block, [kvcache.fingerprint_key(self._fp)])[-1]
            if key in self._saved_prefixes:
                continue
            self._saved_prefixes.add(key)
            meta.saves.append(_Transfer(new.req_id, tokens[:full], block_ids[: full // self._block]))
        self._need_load.clear()
        return meta

    # ------------------------------------------------------------------ worker side
    def register_kv_caches(self, kv_caches: dict[str, torch.Tensor]) -> None:
        self._kv_caches = dict(kv_caches)

    def _layers(self, forward_context: ForwardContext | None = None) -> dict[str, torch.Tensor]:
        if self._kv_caches:
            return self._kv_caches
        layers = {}
        for name, layer in (forward_context.no_compile_layers if forward_context else {}).items():
            kv = getattr(layer, "kv_cache", None)
            if isinstance(kv, torch.Tensor):
                layers[name] = kv
        return layers

    def _slots(self, block_ids: list[int], n_tokens: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        blocks = torch.tensor(block_ids, dtype=torch.long, device=device)
        slots = (blocks[:, None] * self._block + torch.arange(self._block, device=device)[None, :]).reshape(-1)
        slots = slots[:n_tokens]
        return slots // self._block, slots % self._block

    def start_load_kv(self, forward_context: ForwardContext, **kwargs: Any) -> None:
        meta = self._get_connector_metadata()
        assert isinstance(meta, AgentsnapConnectorMetadata)
        if not meta.loads:
            return
        layers = self._layers(forward_context)
        names = sorted(layers)
        for load in meta.loads:
            for page_no, page in enumerate(load.pages):
                data = content.get_bytes(self._repo.objects, page["content"])
                raw = torch.frombuffer(bytearray(data), dtype=torch.uint8)
                at = 0
                for name in names:
                    kv = layers[name]
                    idx, off = self._slots(load.block_ids[page_no : page_no + 1], self._block, kv.device)
                    target_shape = kv[idx, :, off].shape
                    size = target_shape.numel() * kv.element_size()
                    if at + size > len(raw):
                        raise InvalidInput(f"KV page {page_no} is smaller than this engine's layout")
                    kv[idx, :, off] = raw[at : at + size].view(kv.dtype).view(target_shape).to(kv.device)
                    at += size
                if at != len(raw):
                    raise InvalidInput(f"KV page {page_no} is larger than this engine's layout")

    def wait_for_layer_load(self, layer_name: str) -> None:
        return

    def save_kv_layer(self, layer_name: str, kv_layer: torch.Tensor, attn_metadata: Any, **kwargs: Any) -> None:
        meta = self._get_connector_metadata()
        assert isinstance(meta, AgentsnapConnectorMetadata)
        for save in meta.saves:
            idx, off = self._slots(save.block_ids, len(save.tokens), kv_layer.device)
            self._pending.setdefault(save.req_id, {})[layer_name] = kv_layer[idx, :, off].detach().to("cpu").contiguous()

    def wait_for_save(self) -> None:
        meta = self._get_connector_metadata()
        assert isinstance(meta, AgentsnapConnectorMetadata)
        for save in meta.saves:
            per_layer = self._pending.pop(save.req_id, {})
            if not per_layer:
                continue
            names = sorted(per_layer)

            def page_bytes(start: int, end: int, per_layer: dict[str, torch.Tensor] = per_layer, names: list[str] = names) -> bytes:
                return b"".join(per_layer[n][start:end].view(torch.uint8).numpy().tobytes() for n in names)

            record = kvcache.write_cache(
                self._repo.objects, self._fp, save.tokens, self._block, page_bytes,
                meta={"layers": names, "token_shape": list(per_layer[names[0]].shape[1:]),
                      "dtype": str(per_layer[names[0]].dtype).removeprefix("torch.")},
            )
            with self._lock:
                self._saved.append(record)

    # ------------------------------------------------------------------ diagnostics (collective_rpc)
    def take_saved(self) -> list[dict[str, Any]]:
        """The records saved since the last call (the worker's side of :func:`agentsnap_vllm.snapshot`)."""
        with self._lock:
            out, self._saved = self._saved, []
        return out

    def read_page(self, content_id: str) -> bytes:
        return content.get_bytes(self._repo.objects, content_id)

    def shutdown(self) -> None:
        try:
            self._repo.close()
        except AgentSnapError:
            pass
        super_shutdown = getattr(super(), "shutdown", None)
        if super_shutdown:
            super_shutdown()

