"""AgentsnapConnector: a vLLM KV connector (``KVConnectorBase_V1``) backed by an agentsnap store.

Configure it with ``kv_connector_module_path`` (see :func:`agentsnap_vllm.kv_transfer_config`)::

    KVTransferConfig(kv_connector="AgentsnapConnector", kv_connector_module_path="agentsnap_vllm.connector",
                     kv_role="kv_both", kv_connector_extra_config={"repo": "/path/to/repo", "save": True,
                                                                    "load": "<snapshot id, branch or tag>"})

*Save*: on the step that completes a request's prefill (the last chunk of a chunked prefill included) and
when the request finishes (prompt + decoded tokens: the turn's whole context), the worker gathers, after the
forward pass (``wait_for_save``), the full blocks it has not saved for the request yet out of the paged cache
into host memory; a writer thread streams them into the store as agentsnap pages (one page = one vLLM block,
all layers) off the forward path, through a bounded staging queue. A finished request's blocks stay allocated
until they are copied (``request_finished`` -> ``get_finished``). ``collective_rpc`` hands the saved records
(after waiting for the writer) to the caller, who snapshots them (:func:`agentsnap_vllm.snapshot`).

*Load*: a fresh engine is configured with a snapshot (``load``), or a request names one in
``SamplingParams(extra_args={"kv_transfer_params": {"agentsnap_snapshot": id}})``. The scheduler matches
the prompt's chained page hashes against the snapshot; the matched tokens are reported as externally
computed (``get_num_new_matched_tokens``), so vLLM allocates blocks and skips their prefill, and the worker
writes the pages into those blocks before the forward pass (``start_load_kv``). A snapshot whose
fingerprint (model, weights, dtype, engine version, KV layout, block size, parallel layout) differs is refused.

Pages are keyed like vLLM's own prefix cache: the chained page hash covers the fingerprint and the request's
LoRA adapter (name + content digest), multimodal input hashes and ``cache_salt``, so a LoRA request never
matches a base-model page. A request preempted and resumed reloads its pages (``scheduled_cached_reqs`` with
``resumed_req_ids``); a page that cannot be read is reported through ``get_block_ids_with_load_errors`` and
vLLM recomputes it (``kv_load_failure_policy="recompute"``, set by :func:`agentsnap_vllm.kv_transfer_config`).
Tensor/pipeline/context parallel engines are refused at start: pages hold one rank's shard (the fingerprint
names each dimension's rank and size). Counters go to vLLM's connector stats (:class:`AgentsnapStats`).

The code uses only the connector API, so the CUDA build of vLLM (>= 0.32) runs the same connector; the
fingerprint keeps CPU and CUDA pages apart (their layouts differ).
"""

from __future__ import annotations

import functools
import hashlib
import queue
import re
import threading
import weakref
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from agentsnap_core import AgentSnapError, InvalidInput, Repo, kvcache
from vllm.distributed.kv_transfer.kv_connector.v1.base import (
    KVConnectorBase_V1,
    KVConnectorMetadata,
    KVConnectorRole,
)
from vllm.distributed.kv_transfer.kv_connector.v1.metrics import KVConnectorStats

if TYPE_CHECKING:
    from vllm.config import VllmConfig
    from vllm.forward_context import ForwardContext
    from vllm.v1.core.kv_cache_manager import KVCacheBlocks
    from vllm.v1.core.sched.output import SchedulerOutput
    from vllm.v1.kv_cache_interface import KVCacheConfig
    from vllm.v1.request import Request

FORMAT = "agentsnap-vllm"
SNAPSHOT_PARAM = "agentsnap_snapshot"
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf")
_SHA256 = re.compile(r"[0-9a-f]{64}")
MAX_SAVED_RECORDS = 1024  # records kept for the next snapshot; the oldest go first (counted: records_dropped)
MAX_SAVED_PREFIXES = 65536  # saved chains remembered by the scheduler to skip re-saving
SAVE_QUEUE = 4  # saves staged in host memory for the writer thread


def _file_digest(path: Path) -> str:
    """The checkpoint's own digest when it has one (a Hugging Face cache blob is named by its sha256), else the
    content's blake3 (multithreaded)."""
    target = path.resolve()
    if target != path.absolute() and _SHA256.fullmatch(target.name) and target.parent.name == "blobs":
        return "sha256:" + target.name
    import blake3

    h = blake3.blake3(max_threads=blake3.blake3.AUTO)
    h.update_mmap(target)
    return "blake3:" + h.hexdigest()


@functools.cache
def weights_digest(model: str, revision: str | None = None) -> str:
    """A digest of a model's weight files by content (or their checkpoint digests), never by name alone.

    ``model`` is a local directory, or a hub id resolved in the local Hugging Face cache at ``revision``
    (the snapshot's commit is part of the digest). A hub id that is not in the cache is refused.
    """
    path = Path(model)
    if not path.is_dir():
        try:
            from huggingface_hub import snapshot_download

            path = Path(snapshot_download(model, revision=revision, local_files_only=True))
        except Exception as exc:
            raise InvalidInput(
                f"cannot fingerprint the weights of {model!r} (revision {revision or 'default'}): not a local directory "
                f"and not in the local Hugging Face cache ({type(exc).__name__}); download it first or pass weights=..."
            ) from exc
    files = sorted(p for p in path.rglob("*") if p.suffix in WEIGHT_SUFFIXES and p.is_file())
    if not files:
        raise InvalidInput(f"no weight files ({', '.join(WEIGHT_SUFFIXES)}) in {path}; pass weights=... to name them")
    h = hashlib.sha256()
    for p in files:
        h.update(f"{p.relative_to(path).as_posix()}:{_file_digest(p)}\n".encode())
    return h.hexdigest()


def _rank(group: str) -> int:
    """This process's rank in vLLM's tensor / pipeline parallel group (0 where none is initialised: the
    scheduler, or a unit test)."""
    from vllm.distributed import parallel_state

    try:
        return int(parallel_state.get_tp_group().rank_in_group if group == "tp" else parallel_state.get_pp_group().rank_in_group)
    except (AssertionError, AttributeError):
        return 0


def parallel_layout(vllm_config: VllmConfig) -> str:
    """The engine's parallel layout and this process's shard in it (``tp=rank/size;pp=rank/size;dcp=..;pcp=..``),
    part of the fingerprint, so a page never loads into another rank's shard or pipeline stage.

    Refused (InvalidInput, at connector start) unless every rank holds the whole KV (one rank): with tensor
    parallelism each rank holds only its heads of every page, with pipeline parallelism only its stage's layers,
    with context parallelism only some tokens; restoring those needs every rank's record and is not supported.
    """
    pc = vllm_config.parallel_config
    sizes = {
        "tp": pc.tensor_parallel_size,
        "pp": pc.pipeline_parallel_size,
        "dcp": getattr(pc, "decode_context_parallel_size", 1),
        "pcp": getattr(pc, "prefill_context_parallel_size", 1),
    }
    split = {k: v for k, v in sizes.items() if v != 1}
    if split:
        raise InvalidInput(
            f"AgentsnapConnector cannot save or restore a sharded KV cache ({', '.join(f'{k}={v}' for k, v in split.items())}):"
            " each rank holds only its shard of every page; run the engine with tensor/pipeline/context parallel size 1"
        )
    return f"tp={_rank('tp')}/{sizes['tp']};pp={_rank('pp')}/{sizes['pp']};dcp={sizes['dcp']};pcp={sizes['pcp']}"


@functools.cache
def _lora_digest(path: str) -> str:
    return weights_digest(path) if Path(path).is_dir() else f"path:{path}"


def request_keys(lora_request: Any = None, mm_features: Any = None, cache_salt: str | None = None) -> list[str]:
    """Extra keys of a request's page hash chain, as vLLM's prefix cache keys its blocks: the LoRA adapter (name and
    weights digest), the multimodal inputs' hashes and the cache salt. Empty for a plain text request."""
    keys = []
    if lora_request is not None:
        path = getattr(lora_request, "lora_path", None) or getattr(lora_request, "path", None)
        keys.append(f"lora:{lora_request.lora_name}:{_lora_digest(str(path)) if path else lora_request.lora_int_id}")
    for f in mm_features or []:
        keys.append(f"mm:{getattr(f, 'identifier', None) or getattr(f, 'mm_hash', None)}")
    if cache_salt:
        keys.append(f"salt:{cache_salt}")
    return keys


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
        parallel=parallel_layout(vllm_config),
    )


@dataclass
class _Transfer:
    req_id: str
    tokens: list[int]  # full blocks only
    block_ids: list[int]
    pages: list[dict[str, Any]] = field(default_factory=list)  # load: the snapshot pages to write
    keys: list[str] = field(default_factory=list)  # save: the request's extra page-hash keys
    first: int = 0  # save: blocks before this one are in the worker's previous record of the request
    final: bool = False  # save: the request has finished (its blocks are held until the save is copied)


@dataclass
class _Running:
    """Scheduler-side view of a running request: its prompt and its block table (rebuilt on resume)."""

    prompt: list[int]
    block_ids: list[int]
    saved: bool = False
    worker_blocks: int = 0  # blocks of this request in the worker's last record of it (0: none)


@dataclass
class AgentsnapConnectorMetadata(KVConnectorMetadata):
    loads: list[_Transfer] = field(default_factory=list)
    saves: list[_Transfer] = field(default_factory=list)
    forget: list[str] = field(default_factory=list)  # finished requests whose worker record can go


@dataclass
class AgentsnapStats(KVConnectorStats):
    """Connector counters for vLLM's KV connector logging (``KV Transfer metrics: ...``), summed over workers."""

    FIELDS = ("pages_saved", "bytes_saved", "pages_loaded", "bytes_loaded", "load_errors", "save_failures",
              "records_dropped", "match_hashed", "match_cached")

    def __post_init__(self) -> None:
        for k in self.FIELDS:
            self.data.setdefault(k, 0)

    def reset(self) -> None:
        self.data = dict.fromkeys(self.FIELDS, 0)

    def aggregate(self, other: KVConnectorStats) -> AgentsnapStats:
        for k, v in other.data.items():
            self.data[k] = self.data.get(k, 0) + v
        return self

    def reduce(self) -> dict[str, int | float]:
        return dict(self.data)

    def is_empty(self) -> bool:
        return not any(self.data.values())

    def add(self, **counts: int) -> None:
        for k, v in counts.items():
            self.data[k] = self.data.get(k, 0) + v


def _stop_writer(jobs: queue.Queue[Any]) -> None:
    try:
        jobs.put_nowait(None)
    except queue.Full:  # the writer drains it and stops at the next job (its connector is gone)
        pass


def _write_loop(ref: weakref.ref[AgentsnapConnector], jobs: queue.Queue[Any]) -> None:
    """The writer thread: run the connector's save jobs in order until told to stop (None) or the connector is gone."""
    while True:
        job = jobs.get()
        try:
            conn = ref() if job is not None else None
            if conn is None:
                return
            conn._run_job(job)
            del conn
        finally:
            jobs.task_done()


class AgentsnapConnector(KVConnectorBase_V1):
    """Save vLLM KV blocks into an agentsnap repository and load them into a fresh engine."""

    def __init__(self, vllm_config: VllmConfig, role: KVConnectorRole, kv_cache_config: KVCacheConfig | None = None):
        super().__init__(vllm_config=vllm_config, role=role, kv_cache_config=kv_cache_config)
        extra = self._kv_transfer_config.kv_connector_extra_config or {}
        if not extra.get("repo"):
            raise InvalidInput("AgentsnapConnector needs kv_connector_extra_config['repo'] (an agentsnap repository)")
        self._repo = Repo.open(str(extra["repo"]))
        self._pages = kvcache.PageReader(self._repo.objects, keep=4)  # worker side: start_load_kv's reads
        self._block = vllm_config.cache_config.block_size
        self._save = bool(extra.get("save", True))
        self._fp = engine_fingerprint(vllm_config, kv_cache_config)
        self._lock = threading.Lock()
        self._stats = AgentsnapStats()  # since the last get_kv_connector_stats
        self.totals = AgentsnapStats()  # since start (diagnostics)
        # scheduler side
        self._indexes: dict[str, dict[str, list[dict[str, Any]]]] = {}  # snapshot id -> last page hash -> pages
        self._default = str(extra["load"]) if extra.get("load") else None
        self._need_load: dict[str, _Transfer] = {}
        self._running: dict[str, _Running] = {}
        self._keys: dict[str, list[str]] = {}  # request id -> extra page-hash keys (LoRA, multimodal, salt)
        self._matches: dict[str, tuple[str, list[dict[str, Any]]]] = {}  # request id -> (snapshot spec, pages)
        self._saved_prefixes: OrderedDict[str, None] = OrderedDict()  # last page hashes saved (bounded, LRU)
        self._finals: list[_Transfer] = []  # saves of finished requests for the next step
        self._forget: list[str] = []
        self.loaded_tokens: dict[str, int] = {}
        if self._default and role == KVConnectorRole.SCHEDULER:
            self._default = self._index(self._default)  # refuse a mismatched snapshot at engine start
        # worker side
        self._kv_caches: dict[str, torch.Tensor] = {}
        self._max_records = int(extra.get("max_saved_records", MAX_SAVED_RECORDS))
        self._saved: OrderedDict[str, dict[str, Any]] = OrderedDict()  # request id -> its latest record
        self._last: dict[str, dict[str, Any]] = {}  # writer thread: request id -> its previous record
        self._jobs: queue.Queue[Any] = queue.Queue(maxsize=int(extra.get("save_queue", SAVE_QUEUE)))
        self._writer: threading.Thread | None = None
        self._finished_sending: set[str] = set()
        self._load_errors: set[int] = set()
        self.load_failures: list[str] = []  # why pages could not be loaded (their blocks were recomputed)
        self.save_failures: list[str] = []  # why a save was not written (nothing half-written is recorded)

    def _count(self, **counts: int) -> None:
        with self._lock:
            self._stats.add(**counts)
            self.totals.add(**counts)

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

    def on_new_request(self, request: Request) -> None:
        self._keys[request.request_id] = self._request_keys(request)

    @staticmethod
    def _request_keys(request: Request) -> list[str]:
        return request_keys(request.lora_request, request.mm_features, getattr(request, "cache_salt", None))

    def _hashes(self, tokens: list[int], keys: list[str]) -> list[str]:
        return kvcache.page_hashes(tokens, self._block, [kvcache.fingerprint_key(self._fp), *keys])

    def _match(self, request: Request) -> list[dict[str, Any]]:
        """The snapshot pages matching the request's prompt; hashed once per request (the scheduler asks on every
        scheduling attempt of a waiting request)."""
        params = getattr(request, "kv_transfer_params", None) or {}
        spec = params.get(SNAPSHOT_PARAM) or self._default
        if not spec:
            return []
        cached = self._matches.get(request.request_id)
        if cached is not None and cached[0] == spec:
            self._count(match_cached=1)
            return cached[1]
        index = self._indexes[self._index(str(spec))]
        tokens = list(request.prompt_token_ids or [])
        usable = (len(tokens) - 1) // self._block  # always leave the last prompt token to compute
        keys = self._keys.get(request.request_id)
        if keys is None:
            keys = self._keys[request.request_id] = self._request_keys(request)
        hashes = self._hashes(tokens[: usable * self._block], keys)
        self._count(match_hashed=1)
        pages: list[dict[str, Any]] = []
        for n in range(len(hashes), 0, -1):
            found = index.get(hashes[n - 1])
            if found is not None:
                pages = found
                break
        self._matches[request.request_id] = (spec, pages)
        return pages

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
        scheduled = scheduler_output.num_scheduled_tokens
        for new in scheduler_output.scheduled_new_reqs:
            state = self._running[new.req_id] = _Running(list(new.prompt_token_ids or []), list(new.block_ids[0]))
            self._plan(meta, new.req_id, state, new.num_computed_tokens + scheduled.get(new.req_id, 0))
        cached = scheduler_output.scheduled_cached_reqs
        for i, req_id in enumerate(cached.req_ids):
            state = self._running.get(req_id)
            if state is None:
                continue
            new_ids = cached.new_block_ids[i]
            if req_id in cached.resumed_req_ids:  # preempted and rescheduled: a fresh block table, KV to reload
                state.block_ids = list(new_ids[0]) if new_ids else []
            elif new_ids:
                state.block_ids.extend(new_ids[0])
            self._plan(meta, req_id, state, cached.num_computed_tokens[i] + scheduled.get(req_id, 0))
        self._need_load.clear()
        meta.saves.extend(self._finals)
        meta.forget, self._finals, self._forget = self._forget, [], []
        return meta

    def _new_prefix(self, tokens: list[int], keys: list[str]) -> bool:
        """True (and remembered) unless a save of exactly these full blocks was already planned (bounded LRU)."""
        key = self._hashes(tokens, keys)[-1]
        if key in self._saved_prefixes:
            self._saved_prefixes.move_to_end(key)
            return False
        self._saved_prefixes[key] = None
        while len(self._saved_prefixes) > MAX_SAVED_PREFIXES:
            self._saved_prefixes.popitem(last=False)
        return True

    def _plan(self, meta: AgentsnapConnectorMetadata, req_id: str, state: _Running, computed_after: int) -> None:
        """Add this step's load (pages matched at scheduling) and save (prefill complete after this step)."""
        load = self._need_load.pop(req_id, None)
        if load is not None:
            load.block_ids = state.block_ids[: len(load.pages)]
            meta.loads.append(load)
            self.loaded_tokens[req_id] = len(load.tokens)
        if not self._save or state.saved or computed_after < len(state.prompt):
            return  # saving off, already saved, or a prefill chunk that does not finish the prompt yet
        state.saved = True
        full = len(state.prompt) // self._block * self._block
        keys = self._keys.get(req_id, [])
        if full == 0 or not self._new_prefix(state.prompt[:full], keys):
            return
        state.worker_blocks = full // self._block
        meta.saves.append(_Transfer(req_id, state.prompt[:full], state.block_ids[: state.worker_blocks], keys=keys))

    def request_finished(self, request: Request, block_ids: list[int]) -> tuple[bool, dict[str, Any] | None]:
        """Save the turn's whole context (prompt + decoded tokens, full blocks whose KV is computed) and forget the
        request. When there is something new to save, vLLM keeps the blocks until the worker has copied them
        (``get_finished``)."""
        rid = request.request_id
        state = self._running.pop(rid, None)
        keys = self._keys.pop(rid, [])
        for table in (self._need_load, self.loaded_tokens, self._matches):
            table.pop(rid, None)
        if state is None or not self._save:
            return False, None
        done = request.num_computed_tokens - getattr(request, "num_in_flight_tokens", 0)
        tokens = list(request.all_token_ids)
        n = min(max(done, 0) // self._block, len(tokens) // self._block, len(block_ids))
        full = n * self._block
        if n > state.worker_blocks and full > len(state.prompt) // self._block * self._block and self._new_prefix(tokens[:full], keys):
            first = state.worker_blocks
            self._finals.append(_Transfer(rid, tokens[:full], list(block_ids[:n]), keys=keys, first=first, final=True))
            return True, None
        if state.worker_blocks:
            self._forget.append(rid)
        return False, None

    def get_kv_connector_stats(self) -> KVConnectorStats | None:
        with self._lock:
            if self._stats.is_empty():
                return None
            out, self._stats = self._stats, AgentsnapStats()
        return out

    @classmethod
    def build_kv_connector_stats(cls, data: dict[str, Any] | None = None) -> KVConnectorStats | None:
        return AgentsnapStats(data=dict(data or {}))

    # ------------------------------------------------------------------ worker side
    def register_kv_caches(self, kv_caches: dict[str, torch.Tensor]) -> None:
        self._kv_caches = dict(kv_caches)

    def _layers(self, forward_context: ForwardContext | None = None) -> dict[str, torch.Tensor]:
        if self._kv_caches:
            return self._kv_caches
        if forward_context is None:
            from vllm.forward_context import get_forward_context, is_forward_context_available

            forward_context = get_forward_context() if is_forward_context_available() else None
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
            self._load(layers, names, load)

    def _load(self, layers: dict[str, torch.Tensor], names: list[str], load: _Transfer) -> None:
        """A request's pages into its blocks: each page read (verified) into one host buffer for the request (pinned
        on a GPU), copied to the device in one copy and scattered into every layer's blocks with one indexed copy per
        layer (not one small copy per page and layer). A page that fails stops the request there: its block and
        every later one are reported for vLLM to recompute; the pages before it are loaded."""
        kvs = [layers[name] for name in names]
        # bytes of one block of each layer, in the stored order: [block slots, *kv[idx, :, off] per token]
        sizes = [self._block * kv[0, :, 0].numel() * kv.element_size() for kv in kvs]
        device = kvs[0].device
        pin = device.type == "cuda"
        host = torch.empty((len(load.pages), sum(sizes)), dtype=torch.uint8, pin_memory=pin)
        loaded = nbytes = 0
        for page_no, page in enumerate(load.pages):
            try:
                data = self._pages.read(page)  # a verified view into the page's segment (the last few are kept)
                if len(data) != host.shape[1]:
                    relation = "smaller" if len(data) < host.shape[1] else "larger"
                    raise InvalidInput(f"KV page at token {page.get('start')} is {relation} than this engine's layout")
                memoryview(host[page_no].numpy())[:] = data
            except (AgentSnapError, ValueError, RuntimeError) as exc:
                self._failed(load, page_no, f"page {page_no}", exc)
                break
            loaded, nbytes = loaded + 1, nbytes + len(data)
        if not loaded:
            return
        try:
            on_device = host[:loaded].to(device, non_blocking=pin)  # the CPU: the same tensor, no copy
            idx, off = self._slots(load.block_ids[:loaded], loaded * self._block, device)
            at = 0
            for kv, size in zip(kvs, sizes, strict=True):
                part = on_device[:, at : at + size].view(kv.dtype)  # [pages, block slots x token elements]
                kv[idx, :, off] = part.reshape(loaded * self._block, *kv[0, :, 0].shape)
                at += size
        except RuntimeError as exc:
            self._failed(load, 0, f"pages 0-{loaded - 1}", exc)
            return
        self._count(pages_loaded=loaded, bytes_loaded=nbytes)

    def _failed(self, load: _Transfer, first: int, where: str, exc: BaseException) -> None:
        """A load's pages from ``first`` on did not land: vLLM recomputes their blocks
        (kv_load_failure_policy="recompute"); said in ``load_failures``; the engine keeps serving."""
        self._load_errors.update(load.block_ids[first:])
        self.load_failures.append(f"request {load.req_id} {where}: {type(exc).__name__}: {exc}")
        self._count(load_errors=1)

    def get_block_ids_with_load_errors(self) -> set[int]:
        """Blocks whose pages failed to load in this step (vLLM recomputes them)."""
        out, self._load_errors = self._load_errors, set()
        return out

    def wait_for_layer_load(self, layer_name: str) -> None:
        return

    def save_kv_layer(self, layer_name: str, kv_layer: torch.Tensor, attn_metadata: Any, **kwargs: Any) -> None:
        return  # saved after the forward pass, all layers at once (wait_for_save)

    def wait_for_save(self) -> None:
        """After the forward pass: copy the blocks to save out of the paged cache (one gather per layer, only the
        blocks the worker has not saved for the request before) and hand them to the writer thread, which hashes
        and stores them (raw segments) off the forward path. The staging queue is bounded (``save_queue``): when the
        writer falls behind, this waits instead of holding more copies."""
        meta = self._get_connector_metadata()
        assert isinstance(meta, AgentsnapConnectorMetadata)
        if not meta.saves and not meta.forget:
            return
        layers = self._layers()
        for save in meta.saves:
            blocks = save.block_ids[save.first :]
            host = {}
            for name in sorted(layers):
                kv = layers[name]
                idx, off = self._slots(blocks, len(blocks) * self._block, kv.device)
                host[name] = kv[idx, :, off].detach().to("cpu")  # advanced indexing copies: the blocks may be reused
            self._enqueue(("save", save, host))
            if save.final:
                self._finished_sending.add(save.req_id)  # copied: vLLM may free the blocks
        for req_id in meta.forget:
            self._enqueue(("forget", req_id, None))

    def get_finished(self, finished_req_ids: set[str]) -> tuple[set[str] | None, set[str] | None]:
        out, self._finished_sending = self._finished_sending, set()
        return (out or None), None

    def _enqueue(self, job: Any) -> None:
        if self._writer is None or not self._writer.is_alive():
            # the thread holds the connector weakly: an engine dropped without shutdown() frees its KV caches, and
            # the thread is told to stop when the connector goes
            self._writer = threading.Thread(target=_write_loop, args=(weakref.ref(self), self._jobs),
                                            name="agentsnap-kv-writer", daemon=True)
            weakref.finalize(self, _stop_writer, self._jobs)
            self._writer.start()
        self._jobs.put(job)

    def _run_job(self, job: Any) -> None:
        kind, arg, host = job
        try:
            if kind == "forget":
                self._last.pop(arg, None)
            else:
                self._write(arg, host)
        except Exception as exc:  # a failed save must not stop the engine (or the writer); reported, not recorded
            self.save_failures.append(f"request {getattr(arg, 'req_id', arg)}: {type(exc).__name__}: {exc}")
            self._count(save_failures=1)

    def _write(self, save: _Transfer, host: dict[str, torch.Tensor]) -> None:
        names = sorted(host)
        if not names:
            raise InvalidInput("no KV cache layers registered with the connector")
        base = save.first * self._block
        written = [0, 0]

        def page_bytes(start: int, end: int) -> list[memoryview]:  # views of the host copies, one per layer
            if start < base:
                raise InvalidInput(f"page at token {start} is neither copied nor in the request's previous record")
            parts = [memoryview(host[n][start - base : end - base].view(torch.uint8).numpy()).cast("B") for n in names]
            written[0] += 1
            written[1] += sum(p.nbytes for p in parts)
            return parts

        previous = self._last.pop(save.req_id, None) if save.first else None
        record = kvcache.write_cache(
            self._repo.objects, self._fp, save.tokens, self._block, page_bytes, extra=save.keys, previous=previous,
            meta={"layers": names, "token_shape": list(host[names[0]].shape[1:]),
                  "dtype": str(host[names[0]].dtype).removeprefix("torch.")},
        )
        if not save.final:
            self._last[save.req_id] = record
        dropped = 0
        with self._lock:
            self._saved[save.req_id] = record  # supersedes the request's earlier record (a prefix of this one)
            self._saved.move_to_end(save.req_id)
            while len(self._saved) > self._max_records:
                self._saved.popitem(last=False)
                dropped += 1
        self._count(pages_saved=written[0], bytes_saved=written[1], records_dropped=dropped)

    def flush(self) -> None:
        """Wait until every save handed to the writer thread is in the store."""
        if self._writer is not None:
            self._jobs.join()

    # ------------------------------------------------------------------ diagnostics (collective_rpc)
    def take_saved(self) -> list[dict[str, Any]]:
        """The records saved since the last call (the worker's side of :func:`agentsnap_vllm.snapshot`)."""
        self.flush()
        with self._lock:
            out, self._saved = list(self._saved.values()), OrderedDict()
        return out

    def read_page(self, page: dict[str, Any]) -> bytes:
        """One saved page's bytes, by its record entry."""
        return bytes(kvcache.read_page(self._repo.objects, page))

    def shutdown(self) -> None:
        if self._writer is not None:
            self.flush()
            self._jobs.put(None)
            self._writer.join()
            self._writer = None
        try:
            self._repo.close()
        except AgentSnapError:
            pass
        super_shutdown = getattr(super(), "shutdown", None)
        if super_shutdown:
            super_shutdown()
