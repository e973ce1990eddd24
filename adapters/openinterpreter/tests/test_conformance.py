"""agentsnap's conformance kit against a real OpenInterpreter (one step = one chat turn running a shell cell)."""

from __future__ import annotations

from agentsnap_core.testing import assert_conformance
from conformance_case import case


def test_conformance_kit_passes_for_an_open_interpreter(tmp_path):
    report = assert_conformance(case(), tmp_path)
    assert {r.name for r in report.results} >= {"handles", "roundtrip", "restore_rewinds", "fork_isolation",
                                                "continue_equivalence", "fresh_process", "store_verify"}
