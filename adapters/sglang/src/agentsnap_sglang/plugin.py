"""agentsnap hooks for SGLang: an :class:`SGLangCache`'s cache layer."""

from __future__ import annotations

from typing import Any

from agentsnap import hookimpl

from . import radix
from .radix import SGLangCache


@hookimpl
def agentsnap_handles(obj: Any) -> str | None:
    return "sglang" if isinstance(obj, SGLangCache) else None


@hookimpl
def agentsnap_capture_cache(obj: Any, context: dict[str, Any]) -> Any:
    if not isinstance(obj, SGLangCache):
        return None
    return radix.capture(context["repo"].objects, obj)


@hookimpl
def agentsnap_restore_cache(obj: Any, cache: Any, context: dict[str, Any]) -> bool | None:
    if not isinstance(obj, SGLangCache):
        return None
    radix.restore(context["repo"].objects, obj, cache)
    return True
