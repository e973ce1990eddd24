"""agentsnap adapter for AutoGen AgentChat 0.7: atomic snapshot, restore and fork of whole teams."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentsnap_core.plugins import lazy_exports

if TYPE_CHECKING:
    from ._bridge import run_sync
    from ._config import (
        REDACTED,
        MissingApproval,
        MissingFunction,
        MissingSecret,
        SuppliedModelClient,
        UntrustedCode,
        UntrustedSettings,
        model_slots,
        redact,
    )
    from ._graph import UnserializableCondition
    from ._merge import findings_note
    from ._team import (
        IncompatibleTarget,
        TeamRunning,
        build,
        capture_layers,
        fork,
        load,
        restore,
        snapshot,
        trace_of,
        wrap_tools,
    )
    from ._turns import TESTED_AUTOGEN, TurnSnapshotFailed, TurnSnapshots, UntestedAutoGen

# This package is imported with its plugin by every process that uses agentsnap (the CLI's too): AutoGen loads when
# one of these names is first used, not before.
__getattr__ = lazy_exports(__name__, {
    "run_sync": "_bridge",
    **dict.fromkeys(("REDACTED", "MissingApproval", "MissingFunction", "MissingSecret", "SuppliedModelClient", "UntrustedCode", "UntrustedSettings", "model_slots",
                     "redact"),
                    "_config"),
    "findings_note": "_merge",
    "UnserializableCondition": "_graph",
    **dict.fromkeys(("IncompatibleTarget", "TeamRunning", "build", "capture_layers", "fork", "load", "restore",
                     "snapshot", "trace_of", "wrap_tools"), "_team"),
    **dict.fromkeys(("TESTED_AUTOGEN", "TurnSnapshotFailed", "TurnSnapshots", "UntestedAutoGen"), "_turns"),
})

__all__ = [
    "REDACTED",
    "IncompatibleTarget",
    "MissingApproval",
    "MissingFunction",
    "MissingSecret",
    "SuppliedModelClient",
    "TeamRunning",
    "TurnSnapshotFailed",
    "TurnSnapshots",
    "UnserializableCondition",
    "UntestedAutoGen",
    "TESTED_AUTOGEN",
    "UntrustedCode",
    "UntrustedSettings",
    "build",
    "capture_layers",
    "findings_note",
    "fork",
    "load",
    "model_slots",
    "redact",
    "restore",
    "run_sync",
    "snapshot",
    "trace_of",
    "wrap_tools",
]
