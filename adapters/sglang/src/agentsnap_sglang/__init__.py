"""agentsnap adapter for SGLang: snapshot the radix-tree prefix cache and its KV pool pages.

Attributes are imported on first use, so loading the agentsnap plugin does not import torch or sglang.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["Entry", "SGLangCache", "capture", "restore"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        return getattr(importlib.import_module(".radix", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
