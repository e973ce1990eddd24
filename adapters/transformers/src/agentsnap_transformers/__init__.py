"""agentsnap adapter for Hugging Face transformers: snapshot a DynamicCache and resume in a fresh process.

Attributes are imported on first use, so loading the agentsnap plugin does not import torch.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["KVSession", "fingerprint", "read_cache", "weights_digest", "write_cache"]
_WHERE = {"KVSession": "session", "fingerprint": "kv", "read_cache": "kv", "weights_digest": "kv", "write_cache": "kv"}


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(importlib.import_module(f".{_WHERE[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
