"""An SGLang general plugin (entry-point group ``sglang.srt.plugins``): warm-start a server's prefix cache from a
snapshot, and snapshot it while the server is idle.

SGLang calls ``load_plugins()`` at the start of every scheduler process (``run_scheduler_process``); with
``AGENTSNAP_SGLANG_REPO`` set, :func:`register` adds two hooks through SGLang's ``HookRegistry``:

- after ``sglang.srt.mem_cache.registry.create_tree_cache`` (the scheduler's tree factory, called by
  ``kv_cache_builder.build_kv_cache``): wrap the new tree in :class:`~agentsnap_sglang.SGLangCache` and, with
  ``AGENTSNAP_SGLANG_RESTORE`` set, load that snapshot into it before the first request;
- after ``sglang.srt.managers.scheduler.Scheduler.on_idle`` (the scheduler thread, between batches, the only
  place the tree may be read without racing a batch): when the file ``AGENTSNAP_SGLANG_SAVE_TRIGGER`` exists,
  capture the tree into the repository, write the snapshot id to ``<trigger>.done`` and remove the trigger.

Without ``AGENTSNAP_SGLANG_REPO`` nothing is registered. A failed restore or save is logged and the server keeps
serving (from a cold cache after a failed restore).
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any

logger = logging.getLogger("agentsnap_sglang.server")

ENV_REPO = "AGENTSNAP_SGLANG_REPO"
ENV_RESTORE = "AGENTSNAP_SGLANG_RESTORE"
ENV_WEIGHTS = "AGENTSNAP_SGLANG_WEIGHTS"
ENV_MODEL = "AGENTSNAP_SGLANG_MODEL"
ENV_TRIGGER = "AGENTSNAP_SGLANG_SAVE_TRIGGER"
TREE_FACTORY = "sglang.srt.mem_cache.registry.create_tree_cache"
IDLE = "sglang.srt.managers.scheduler.Scheduler.on_idle"
CHECK_EVERY_S = 1.0  # how often an idle scheduler looks for the trigger file

_state: dict[str, Any] = {}


def register() -> None:
    """The plugin entry point: register the hooks when ``AGENTSNAP_SGLANG_REPO`` is set."""
    if not os.environ.get(ENV_REPO):
        return
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    HookRegistry.register(TREE_FACTORY, after_create_tree_cache, HookType.AFTER)
    HookRegistry.register(IDLE, after_on_idle, HookType.AFTER)


def _repo() -> Any:
    from agentsnap_core import Repo

    return Repo.open(os.environ[ENV_REPO])


def after_create_tree_cache(tree: Any, ctx: Any) -> None:
    """Hook on ``create_tree_cache(ctx)``: wrap the scheduler's tree; restore ``AGENTSNAP_SGLANG_RESTORE`` into it."""
    from .radix import SGLangCache, restore

    _state.clear()
    weights = os.environ.get(ENV_WEIGHTS)
    if not weights:
        logger.error("agentsnap: %s is not set (a digest or revision of the served weights); cache not attached", ENV_WEIGHTS)
        return
    args = ctx.server_args
    sizes = {"tp": getattr(ctx, "tp_size", 1), "pp": getattr(args, "pp_size", 1), "dp": getattr(args, "dp_size", 1)}
    if any(n != 1 for n in sizes.values()):
        # tp/pp: each rank holds a shard of the KV and the pages carry no rank; dp: one tree per replica
        logger.error("agentsnap: parallel sizes %s are not supported (one scheduler, whole KV only); cache not attached", sizes)
        return
    model = os.environ.get(ENV_MODEL) or str(args.model_path)
    cache = SGLangCache(tree, model=model, weights=weights)
    _state.update(cache=cache, next_check=0.0)
    snap_id = os.environ.get(ENV_RESTORE)
    if not snap_id:
        return
    try:
        repo = _repo()
        record = repo.read_layer(snap_id, "cache")
        stats = restore(repo.objects, cache, record)
        logger.info("agentsnap: restored snapshot %s into the prefix cache: %s", snap_id, stats)
    except Exception:
        logger.exception("agentsnap: restoring snapshot %s failed; serving from a cold cache", snap_id)


def after_on_idle(_result: Any, scheduler: Any) -> None:
    """Hook on ``Scheduler.on_idle(self)``: capture the tree when the trigger file exists (checked once a second)."""
    cache, trigger = _state.get("cache"), os.environ.get(ENV_TRIGGER)
    if cache is None or not trigger or cache.tree is not scheduler.tree_cache:
        return
    now = time.monotonic()
    if now < _state["next_check"]:
        return
    _state["next_check"] = now + CHECK_EVERY_S
    path = Path(trigger)
    if not path.exists():
        return
    message = path.read_text().strip() or "sglang prefix cache"
    try:
        snap = _repo().capture(cache, message)
        Path(f"{trigger}.done").write_text(snap.id + "\n")
        logger.info("agentsnap: captured the prefix cache as snapshot %s", snap.id)
    except Exception as exc:
        logger.exception("agentsnap: capturing the prefix cache failed")
        Path(f"{trigger}.done").write_text(f"error: {exc}\n")
    finally:
        path.unlink(missing_ok=True)
