"""agentsnap: git for live AI agents - snapshot, fork, merge, restore and share agent state.

The public names below are loaded on first use (PEP 562), so that `import agentsnap_core.<module>` - the CLI, a
hook - does not pay for the Python API's asyncio client and every layer at start-up.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

#: public name -> the module that defines it
_EXPORTS = {
    **dict.fromkeys(("AsyncClient", "Client", "SnapshotInfo"), "client"),
    **dict.fromkeys(
        ("AgentSnapError", "AmbiguousId", "InvalidInput", "ObjectCorrupt", "ObjectMissing", "RefConflict",
         "StoreNotFound", "TargetNotEmpty", "UnknownSnapshot", "UnsafeSnapshot", "UnsupportedFormat"),
        "errors",
    ),
    "hookimpl": "hookspecs",
    **dict.fromkeys(("MigrationError", "register_migration"), "migrations"),
    **dict.fromkeys(("Repo", "Snapshot"), "repo"),
    "SnapshotGone": "retention",
    **dict.fromkeys(("AutoSnapshot", "auto_snapshot", "checkpoint", "rollback"), "rollback"),
    **dict.fromkeys(("Snapshottable", "SupportsStateDict", "UnsupportedValue", "register_type"), "snapshottable"),
}

__all__ = [
    "AgentSnapError", "AmbiguousId", "InvalidInput", "ObjectCorrupt", "ObjectMissing", "RefConflict", "Repo",
    "Snapshot", "StoreNotFound", "TargetNotEmpty", "UnknownSnapshot", "UnsafeSnapshot", "UnsupportedFormat",
    "hookimpl", "AsyncClient", "AutoSnapshot", "auto_snapshot", "Client", "MigrationError", "SnapshotGone",
    "SnapshotInfo", "Snapshottable", "SupportsStateDict", "UnsupportedValue", "checkpoint", "register_migration",
    "register_type", "rollback", "__version__",
]
assert set(__all__) == {*_EXPORTS, "__version__"}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'agentsnap_core' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value  # later lookups are plain attribute reads
    return value


def __dir__() -> list[str]:
    return sorted(__all__)


class _Package(types.ModuleType):
    """`agentsnap_core.rollback` is the function, as before, even after the submodule of that name is imported
    (the import system sets the submodule as an attribute of its package; for an exported name it must not)."""

    def __setattr__(self, name: str, value: Any) -> None:
        if isinstance(value, types.ModuleType) and _EXPORTS.get(name) == name:
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


if TYPE_CHECKING:  # for type checkers and IDEs: the same names, imported eagerly
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
