"""agentsnap: git for live AI agents - snapshot, fork, merge, restore and share agent state."""

from __future__ import annotations

from .client import AsyncClient, Client, SnapshotInfo
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
from .migrations import MigrationError, register_migration
from .repo import Repo, Snapshot
from .retention import SnapshotGone
from .rollback import AutoSnapshot, auto_snapshot, checkpoint, rollback
from .snapshottable import Snapshottable, SupportsStateDict, UnsupportedValue, register_type

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
    "AsyncClient",
    "AutoSnapshot",
    "auto_snapshot",
    "Client",
    "MigrationError",
    "SnapshotGone",
    "SnapshotInfo",
    "Snapshottable",
    "SupportsStateDict",
    "UnsupportedValue",
    "checkpoint",
    "register_migration",
    "register_type",
    "rollback",
    "__version__",
]
