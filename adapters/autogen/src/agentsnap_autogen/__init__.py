"""agentsnap adapter for AutoGen AgentChat 0.7: atomic snapshot, restore and fork of whole teams."""

from __future__ import annotations

from ._bridge import run_sync
from ._config import REDACTED, MissingSecret, SuppliedModelClient, UntrustedCode, model_slots, redact
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
from ._turns import TESTED_AUTOGEN, TurnSnapshots, UntestedAutoGen

__all__ = [
    "REDACTED",
    "IncompatibleTarget",
    "MissingSecret",
    "SuppliedModelClient",
    "TeamRunning",
    "TurnSnapshots",
    "UntestedAutoGen",
    "TESTED_AUTOGEN",
    "UntrustedCode",
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
