"""agentsnap hooks for SGLang: an :class:`SGLangCache`'s cache layer.

Loaded in every agentsnap process (entry-point discovery), so it imports neither torch nor sglang.
"""

from __future__ import annotations

import sys
from typing import Any

from agentsnap_core import hookimpl


def _is_cache(obj: Any) -> bool:
    mod = sys.modules.get("agentsnap_sglang.radix")
    return mod is not None and isinstance(obj, mod.SGLangCache)


@hookimpl
def agentsnap_handles(obj: Any) -> str | None:
    return "sglang" if _is_cache(obj) else None


@hookimpl
def agentsnap_capture_cache(obj: Any, context: dict[str, Any]) -> Any:
    if not _is_cache(obj):
        return None
    from . import radix

    return radix.capture(context["repo"].objects, obj)


@hookimpl
def agentsnap_restore_cache(obj: Any, cache: Any, context: dict[str, Any]) -> bool | None:
    if not _is_cache(obj):
        return None
    from . import radix

    radix.restore(context["repo"].objects, obj, cache)
    return True
