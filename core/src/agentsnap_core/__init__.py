"""agentsnap: git for live AI agents - snapshot, fork, merge, restore and share agent state.

The public names below are loaded on first use (PEP 562), so that `import agentsnap_core.<module>` - the CLI, a
hook - does not pay for the Python API's asyncio client and every layer at start-up.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import sys
import types

__version__ = "0.1.0"

#: public name -> the module that defines it
_EXPORTS = {
    **dict.fromkeys(("AsyncClient", "Client", "SnapshotInfo"), "client"),
    **dict.fromkeys(
        ("AgentSnapError", "AmbiguousId", "InvalidInput", "ObjectCorrupt", "ObjectMissing", "RefConflict",
         "StoreNotFound", "TargetNotEmpty", "UnknownSnapshot", "UnsafeSnapshot", "UnsupportedFormat"),
        "errors",
    ),
    "hookimpl": "plugins.hookspecs",
    **dict.fromkeys(("MigrationError", "register_migration"), "format.migrations"),
    **dict.fromkeys(("Repo", "Snapshot"), "repository.repo"),
    "SnapshotGone": "repository.retention",
    **dict.fromkeys(("AutoSnapshot", "auto_snapshot", "checkpoint", "rollback"), "rollback"),
    **dict.fromkeys(("Snapshottable", "SupportsStateDict", "UnsupportedValue", "register_type"), "format.snapshottable"),
}

__all__ = [
    "AgentSnapError", "AmbiguousId", "InvalidInput", "ObjectCorrupt", "ObjectMissing", "RefConflict", "Repo",
    "Snapshot", "StoreNotFound", "TargetNotEmpty", "UnknownSnapshot", "UnsafeSnapshot", "UnsupportedFormat",
    "hookimpl", "AsyncClient", "AutoSnapshot", "auto_snapshot", "Client", "MigrationError", "SnapshotGone",
    "SnapshotInfo", "Snapshottable", "SupportsStateDict", "UnsupportedValue", "checkpoint", "register_migration",
    "register_type", "rollback", "__version__",
]
assert set(__all__) == {*_EXPORTS, "__version__"}


#: modules that moved in the layered layout (0.1.x: one flat package) -> where they live now. The old names keep
#: working for one release: importing one gives the very same module object (monkeypatching it still works).
MOVED_MODULES = {
    "encoding": "format.encoding",
    "objects": "format.objects",
    "content": "format.content",
    "crypto": "format.crypto",
    "snapshottable": "format.snapshottable",
    "migrations": "format.migrations",
    "store": "stores.base",
    "localstore": "stores.local",
    "hookspecs": "plugins.hookspecs",
    "defaults": "plugins.defaults",
    "world": "layers.world",
    "effects": "layers.effects",
    "effects_ledger": "layers.effects_ledger",
    "kvcache": "layers.kvcache",
    "modelweights": "layers.modelweights",
    "environment": "layers.environment",
    "redact": "layers.redact",
    "repo": "repository.repo",
    "maintenance": "repository.maintenance",
    "diffing": "repository.diffing",
    "retention": "repository.retention",
    "merge": "operations.merge",
    "merge_layers": "operations.merge_layers",
    "merge_world": "operations.merge_world",
    "modelmerge": "operations.modelmerge",
    "remote": "operations.remote",
    "fanout": "operations.fanout",
    "scan": "operations.scan",
    "merge_cli": "cli.merge",
    "effects_cli": "cli.effects",
    "fanout_cli": "cli.fanout",
    "remote_cli": "cli.remote",
    "retention_cli": "cli.retention",
}


class _MovedModules:
    """A meta path finder and loader (importlib.abc's protocols; not subclassed: importing importlib.abc costs more
    than the CLI's whole start-up). Resolves ``agentsnap_core.<old name>`` to the module at its new place (see :data:`MOVED_MODULES`)."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        old = fullname[len(__name__) + 1 :] if fullname.startswith(__name__ + ".") else None
        if old not in MOVED_MODULES:
            return None
        return importlib.machinery.ModuleSpec(fullname, self)  # type: ignore[arg-type]  # a Loader by protocol

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        return importlib.import_module(f"{__name__}.{MOVED_MODULES[spec.name[len(__name__) + 1 :]]}")

    def exec_module(self, module: types.ModuleType) -> None:
        """The module was executed at its new place."""


if not any(isinstance(finder, _MovedModules) for finder in sys.meta_path):
    sys.meta_path.append(_MovedModules())


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


TYPE_CHECKING = False  # typing is not imported: `agentsnap --version` loads nothing it does not need
if TYPE_CHECKING:  # for type checkers and IDEs: the same names, imported eagerly
    from typing import Any

    from agentsnap_core.client import AsyncClient, Client, SnapshotInfo
    from agentsnap_core.errors import (
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
    from agentsnap_core.format.migrations import MigrationError, register_migration
    from agentsnap_core.format.snapshottable import Snapshottable, SupportsStateDict, UnsupportedValue, register_type
    from agentsnap_core.plugins.hookspecs import hookimpl
    from agentsnap_core.repository.repo import Repo, Snapshot
    from agentsnap_core.repository.retention import SnapshotGone
    from agentsnap_core.rollback import AutoSnapshot, auto_snapshot, checkpoint, rollback
