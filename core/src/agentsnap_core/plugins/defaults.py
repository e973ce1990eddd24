"""The core's own hook implementations, registered before any adapter.

They capture the world layer (a directory) and the trace layer of the repository, and give
any object with ``state_dict()`` / ``load_state_dict()`` (and optionally a ``messages`` list)
a state and trace layer. Adapters registered later take precedence (they run first).
"""

from __future__ import annotations

from typing import Any

from agentsnap_core.plugins.hookspecs import HookContext, hookimpl

# agentsnap_core.format.snapshottable (pickle, uuid, decimal...) is imported by the object hooks that use it, not
# by every snapshot or restore of a working tree, which load this module for the world hooks (issue 19)

LAYER_HOOKS = ("trace", "state", "effects", "cache", "model")


@hookimpl(trylast=True)
def agentsnap_capture(obj: Any, context: HookContext) -> dict[str, Any] | None:
    hook = context["pm"].hook
    layers: dict[str, Any] = {}
    for layer in LAYER_HOOKS:
        value = getattr(hook, f"agentsnap_capture_{layer}")(obj=obj, context=context)
        if value is not None:
            layers[layer] = value
    return layers or None


@hookimpl(trylast=True)
def agentsnap_restore(obj: Any, layers: dict[str, Any], context: HookContext) -> bool | None:
    hook = context["pm"].hook
    done = False
    for layer in LAYER_HOOKS:
        if layer in layers:
            kwargs = {"obj": obj, layer if layer != "trace" else "messages": layers[layer], "context": context}
            done = bool(getattr(hook, f"agentsnap_restore_{layer}")(**kwargs)) or done
    return done or None


@hookimpl(trylast=True)
def agentsnap_handles(obj: Any) -> str | None:
    if callable(getattr(obj, "state_dict", None)) and callable(getattr(obj, "load_state_dict", None)):
        return "agentsnap.state_dict"
    return None


@hookimpl(trylast=True)
def agentsnap_capture_state(obj: Any, context: HookContext) -> Any:
    from agentsnap_core.format.snapshottable import dump_state, is_typed

    if is_typed(obj):  # Snapshottable: typed msgpack encoding, schema version (agentsnap_core.format.snapshottable)
        return dump_state(obj)
    if agentsnap_handles(obj):
        return obj.state_dict()
    return None


@hookimpl(trylast=True)
def agentsnap_restore_state(obj: Any, state: Any, context: HookContext) -> bool | None:
    from agentsnap_core.format.snapshottable import is_typed, load_state

    if is_typed(obj):
        load_state(obj, state, trust_pickle=bool(context.get("trust_pickle", False)))
        return True
    if agentsnap_handles(obj):
        obj.load_state_dict(state)
        return True
    return None


@hookimpl(trylast=True)
def agentsnap_capture_trace(obj: Any, context: HookContext) -> list[dict[str, Any]] | None:
    from agentsnap_core.format.snapshottable import is_typed, typed_trace

    if is_typed(obj):
        return typed_trace(obj)
    messages = getattr(obj, "messages", None)
    if agentsnap_handles(obj) and isinstance(messages, list):
        return [dict(m) for m in messages]
    return None


@hookimpl(trylast=True)
def agentsnap_restore_trace(obj: Any, messages: list[dict[str, Any]], context: HookContext) -> bool | None:
    from agentsnap_core.format.snapshottable import is_typed

    if is_typed(obj):
        return True  # the state layer restores a typed agent's messages, with their types
    if agentsnap_handles(obj) and isinstance(getattr(obj, "messages", None), list):
        obj.messages[:] = [dict(m) for m in messages]
        return True
    return None


@hookimpl(trylast=True)
def agentsnap_capture_world(root: str, context: HookContext) -> dict[str, Any] | None:
    repo = context["repo"]
    return None if repo is None else repo._capture_world_default(root, context)


@hookimpl(trylast=True)
def agentsnap_restore_world(root: str, world: dict[str, Any], context: HookContext) -> dict[str, Any] | None:
    repo = context["repo"]
    return None if repo is None else repo._restore_world_default(root, world, context)
