"""Hook specifications: what an agentsnap plugin (adapter) can implement.

Capture hooks return a layer's payload (plain msgpack-able data) or ``None`` when the plugin
does not handle the object; restore hooks return ``True`` when they restored it. Call them by
keyword. A plugin wraps ``agentsnap_capture`` / ``agentsnap_restore`` with
``@hookimpl(wrapper=True)`` for cross-cutting work such as pausing an engine.
"""

from __future__ import annotations

from typing import Any

import pluggy

hookspec = pluggy.HookspecMarker("agentsnap")
hookimpl = pluggy.HookimplMarker("agentsnap")


@hookspec(firstresult=True)
def agentsnap_handles(obj: Any) -> str | None:
    """Return the adapter name that handles ``obj``, or None."""


@hookspec(firstresult=True)
def agentsnap_capture(obj: Any, context: dict[str, Any]) -> dict[str, Any] | None:
    """Return ``{layer name: payload}`` for ``obj``; wrap it to pause/resume around capture."""


@hookspec(firstresult=True)
def agentsnap_restore(obj: Any, layers: dict[str, Any], context: dict[str, Any]) -> bool | None:
    """Restore ``obj`` from ``{layer name: payload}``; return True when done."""


@hookspec(firstresult=True)
def agentsnap_capture_world(root: str, context: dict[str, Any]) -> dict[str, Any] | None:
    """Return the world layer record (tree id, env id, counts) for the directory ``root``."""


@hookspec(firstresult=True)
def agentsnap_restore_world(root: str, world: dict[str, Any], context: dict[str, Any]) -> dict[str, Any] | None:
    """Materialise a world layer record into ``root``; return what changed."""


@hookspec(firstresult=True)
def agentsnap_capture_trace(obj: Any, context: dict[str, Any]) -> list[dict[str, Any]] | None:
    """Return the ordered messages (role, content, tool calls, ids) of ``obj``."""


@hookspec(firstresult=True)
def agentsnap_restore_trace(obj: Any, messages: list[dict[str, Any]], context: dict[str, Any]) -> bool | None:
    """Put ``messages`` back into ``obj``; return True when done."""


@hookspec(firstresult=True)
def agentsnap_capture_state(obj: Any, context: dict[str, Any]) -> Any:
    """Return the framework execution state of ``obj`` as plain data."""


@hookspec(firstresult=True)
def agentsnap_restore_state(obj: Any, state: Any, context: dict[str, Any]) -> bool | None:
    """Load ``state`` into ``obj``; return True when done."""


@hookspec(firstresult=True)
def agentsnap_capture_effects(obj: Any, context: dict[str, Any]) -> Any:
    """Return the effects-ledger view of ``obj`` (entries, head), or None."""


@hookspec(firstresult=True)
def agentsnap_restore_effects(obj: Any, effects: Any, context: dict[str, Any]) -> bool | None:
    """Re-attach an effects ledger to ``obj``; return True when done."""


@hookspec(firstresult=True)
def agentsnap_capture_cache(obj: Any, context: dict[str, Any]) -> Any:
    """Return the inference-engine KV cache record of ``obj`` (pages, block table, fingerprint)."""


@hookspec(firstresult=True)
def agentsnap_restore_cache(obj: Any, cache: Any, context: dict[str, Any]) -> bool | None:
    """Load a KV cache record into ``obj``; return True when done."""


@hookspec(firstresult=True)
def agentsnap_capture_model(obj: Any, context: dict[str, Any]) -> Any:
    """Return weight deltas of ``obj`` (LoRA / adapter tensors) as a record."""


@hookspec(firstresult=True)
def agentsnap_restore_model(obj: Any, model: Any, context: dict[str, Any]) -> bool | None:
    """Apply a weight-delta record to ``obj``; return True when done."""


@hookspec(firstresult=True)
def agentsnap_merge_state(base: Any, ours: Any, theirs: Any, context: dict[str, Any]) -> Any:
    """Return ``(merged state, conflicts)`` for a framework's state layer, or None for the default."""


@hookspec(firstresult=True)
def agentsnap_summarize_branch(messages: list[dict[str, Any]], context: dict[str, Any]) -> dict[str, Any] | None:
    """Return one note message folding a branch's trace tail, or None for the default."""
