"""The core conformance kit, run against the transformers adapter (tiny random Llama, real DynamicCache)."""

from __future__ import annotations

import tinymodel
from agentsnap_core.testing import assert_conformance


def test_conformance(tmp_path):
    report = assert_conformance(tinymodel.case(), tmp_path)
    assert {r.name for r in report.results} >= {"roundtrip", "fresh_process", "fork_isolation", "continue_equivalence"}
