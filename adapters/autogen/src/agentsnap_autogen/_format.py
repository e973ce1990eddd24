"""What an AutoGen snapshot's state layer says it is (no AutoGen import here: the plugin module reads it in every
process that uses agentsnap)."""

from __future__ import annotations

from typing import Any

FORMAT = "agentsnap-autogen"
FORMAT_VERSION = 1


def is_payload(value: Any) -> bool:
    """True for a state layer this adapter wrote."""
    return isinstance(value, dict) and value.get("format") == FORMAT
