"""The core's conformance kit on a Claude Code session (its transcript is the trace layer)."""

from __future__ import annotations

from pathlib import Path

from agentsnap_claude_code.conformance import case
from agentsnap_core.plugins import get_plugin_manager
from agentsnap_core.testing import assert_conformance


def test_conformance(tmp_path: Path) -> None:
    report = assert_conformance(case(), tmp_path)
    assert {r.name for r in report.results} >= {"roundtrip", "restore_rewinds", "fork_isolation", "fresh_process"}


def test_entry_point_registers_the_plugin() -> None:
    assert get_plugin_manager().has_plugin("claude_code")
