"""agentsnap adapter for SGLang: snapshot the radix-tree prefix cache and its KV pool pages."""

from __future__ import annotations

from .radix import SGLangCache, capture, restore

__all__ = ["SGLangCache", "capture", "restore"]
