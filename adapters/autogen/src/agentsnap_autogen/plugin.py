"""agentsnap hook implementations for AutoGen teams and agents (entry point ``autogen``).

The hooks are synchronous; they drive AutoGen's coroutines on the adapter's background loop
(:mod:`agentsnap_autogen._bridge`). From async code use :func:`agentsnap_autogen.snapshot` /
:func:`agentsnap_autogen.restore` instead of ``repo.capture`` / ``repo.restore_into``.
"""

from __future__ import annotations

from typing import Any

from agentsnap_core import hookimpl

from ._bridge import run_sync
from ._team import FORMAT, capture_layers, kind_of, restore_state


@hookimpl
def agentsnap_handles(obj: Any) -> str | None:
    return "autogen" if kind_of(obj) else None


@hookimpl
def agentsnap_capture(obj: Any, context: dict[str, Any]) -> dict[str, Any] | None:
    if kind_of(obj) is None:
        return None
    return run_sync(capture_layers(obj))


@hookimpl
def agentsnap_restore(obj: Any, layers: dict[str, Any], context: dict[str, Any]) -> bool | None:
    state = layers.get("state")
    if kind_of(obj) is None or not isinstance(state, dict) or state.get("format") != FORMAT:
        return None
    run_sync(restore_state(obj, state))
    return True


@hookimpl
def agentsnap_merge_state(base: Any, ours: Any, theirs: Any, context: dict[str, Any]) -> Any:
    from ._merge import _is_payload, merge_payloads

    if not (_is_payload(ours) and _is_payload(theirs)):
        return None
    return merge_payloads(base, ours, theirs, context)
