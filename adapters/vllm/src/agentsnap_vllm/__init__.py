"""agentsnap adapter for vLLM: a KV connector that saves prompt KV blocks as agentsnap pages and loads them
into a fresh engine (the scheduler counts them as computed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agentsnap_core import InvalidInput, Repo, Snapshot

CONNECTOR = "AgentsnapConnector"
MODULE = "agentsnap_vllm.connector"
FORMAT = "agentsnap-vllm"
SNAPSHOT_PARAM = "agentsnap_snapshot"

__all__ = ["kv_transfer_config", "saved_layer", "snapshot", "snapshot_params"]


def kv_transfer_config(
    repo: str | Path, *, save: bool = True, load: str | None = None, on_load_error: str = "recompute", **extra: Any
) -> Any:
    """A ``vllm.config.KVTransferConfig`` that plugs the agentsnap connector into an engine.

    Args:
        repo: the agentsnap repository holding the pages.
        save: save the prompt KV of every prefilled request (picked up by :func:`snapshot`).
        load: a snapshot (id, branch or tag) whose pages every request may load; refused at engine start
            when its fingerprint does not match the engine.
        on_load_error: vLLM's ``kv_load_failure_policy``: ``"recompute"`` (a page that cannot be read is
            recomputed and the engine keeps serving) or ``"fail"`` (the request fails).
        extra: more connector options (``model_id``, ``weights`` to override the fingerprint's fields).
    """
    from vllm.config import KVTransferConfig

    config = {"repo": str(Path(repo).resolve()), "save": save, **extra}
    if load:
        config["load"] = load
    return KVTransferConfig(
        kv_connector=CONNECTOR, kv_connector_module_path=MODULE, kv_role="kv_both", kv_connector_extra_config=config,
        kv_load_failure_policy=on_load_error,
    )


def snapshot_params(snapshot_id: str) -> dict[str, Any]:
    """``SamplingParams(extra_args=...)`` that make one request load its prefix from ``snapshot_id``."""
    return {"kv_transfer_params": {SNAPSHOT_PARAM: snapshot_id}}


def _take_saved(worker: Any) -> list[dict[str, Any]]:
    from vllm.distributed.kv_transfer import get_kv_transfer_group

    return get_kv_transfer_group().take_saved()


def _drain(llm: Any) -> None:
    """Step an in-process engine core until the saves of finished requests are handed to the workers.

    A finished turn's blocks stay allocated until the worker has copied them (``request_finished`` -> the next
    step); ``LLM.generate`` returns before that step. A multiprocess engine core steps on by itself.
    """
    core = getattr(getattr(llm.llm_engine, "engine_core", None), "engine_core", None)
    sched = getattr(core, "scheduler", None)
    for _ in range(64):
        if sched is None or sched.has_unfinished_requests() or not sched.has_finished_requests():
            return
        llm.llm_engine.step()


def saved_layer(llm: Any) -> dict[str, Any]:
    """Collect (via ``collective_rpc``) the KV records the workers saved since the last call, as a cache layer."""
    _drain(llm)
    records = [rec for worker in llm.collective_rpc(_take_saved) for rec in worker]
    refs = list(dict.fromkeys(r for rec in records for r in rec["refs"]))
    return {"format": FORMAT, "v": 1, "requests": records, "refs": refs}


def connector_repo(llm: Any) -> Path | None:
    """The repository the engine's agentsnap connector writes to, or None if it has none."""
    config = getattr(llm.llm_engine.vllm_config, "kv_transfer_config", None)
    if config is None or config.kv_connector != CONNECTOR:
        return None
    return Path((config.kv_connector_extra_config or {})["repo"]).resolve()


def snapshot(llm: Any, repo: Repo, message: str = "vllm KV cache", *, lora: Any = None, **kw: Any) -> Snapshot:
    """Snapshot the KV pages the engine saved, and the ``lora`` adapter (a ``LoRARequest``) as the model layer."""
    where = connector_repo(llm)
    if where is None:
        raise InvalidInput("this LLM has no agentsnap connector; build it with kv_transfer_config=kv_transfer_config(...)")
    if where != repo.root:
        raise InvalidInput(f"the engine's connector writes to {where}, not to {repo.root}; snapshot with that repository")
    layer = saved_layer(llm)
    if not layer["requests"]:
        raise InvalidInput("the engine saved no KV pages since the last snapshot (prompts shorter than one block?)")
    layers = {"cache": layer}
    if lora is not None:
        from .lora import capture_lora

        layers["model"] = capture_lora(repo.objects, lora)
    return repo.snapshot(message, layers=layers, capture_world=kw.pop("capture_world", False), **kw)
