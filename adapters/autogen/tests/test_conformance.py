"""agentsnap's conformance kit against a real AutoGen team (one step = one turn)."""

from __future__ import annotations

from agentsnap_core.testing import assert_conformance
from conformance_case import case


def test_conformance_kit_passes_for_a_roundrobin_team(tmp_path):
    report = assert_conformance(case(), tmp_path)
    assert {r.name for r in report.results} >= {"handles", "roundtrip", "continue_equivalence", "fresh_process"}
