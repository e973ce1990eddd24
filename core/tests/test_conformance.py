"""The conformance kit passes a correct adapter and fails a deliberately broken one."""

from __future__ import annotations

from pathlib import Path

from agentsnap_core.testing import assert_conformance, check_adapter, reference


def test_reference_adapter_passes(tmp_path: Path) -> None:
    report = assert_conformance(reference.case(), tmp_path)
    assert {r.name for r in report.results} == {
        "handles", "roundtrip", "restore_rewinds", "fork_isolation", "continue_equivalence", "fresh_process", "store_verify",
    }


def test_broken_adapter_fails_the_kit(tmp_path: Path) -> None:
    from agentsnap_core.testing import broken

    pm_plugin = broken.PLUGIN
    try:
        report = check_adapter(broken.case(), tmp_path)
    finally:
        from agentsnap_core.plugins import get_plugin_manager

        get_plugin_manager().unregister(pm_plugin)
    assert not report.passed
    assert {"roundtrip", "restore_rewinds", "fresh_process"} <= set(report.failed())
