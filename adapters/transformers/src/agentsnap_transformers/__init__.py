"""agentsnap adapter for Hugging Face transformers: snapshot a DynamicCache and resume in a fresh process."""

from __future__ import annotations

from .kv import fingerprint, read_cache, weights_digest, write_cache
from .session import KVSession

__all__ = ["KVSession", "fingerprint", "read_cache", "weights_digest", "write_cache"]
