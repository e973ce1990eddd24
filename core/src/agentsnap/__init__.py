"""agentsnap: git for live AI agents - snapshot, fork, merge, restore and share agent state."""

from __future__ import annotations

from .errors import (
    AgentSnapError,
    AmbiguousId,
    InvalidInput,
    ObjectCorrupt,
    ObjectMissing,
    RefConflict,
    StoreNotFound,
    TargetNotEmpty,
    UnknownSnapshot,
    UnsafeSnapshot,
    UnsupportedFormat,
)
from .hookspecs import hookimpl
from .repo import Repo, Snapshot

__version__ = "0.1.0"

__all__ = [
    "AgentSnapError",
    "AmbiguousId",
    "InvalidInput",
    "ObjectCorrupt",
    "ObjectMissing",
    "RefConflict",
    "Repo",
    "Snapshot",
    "StoreNotFound",
    "TargetNotEmpty",
    "UnknownSnapshot",
    "UnsafeSnapshot",
    "UnsupportedFormat",
    "hookimpl",
    "__version__",
]
