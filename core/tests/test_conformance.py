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


class _Notes:
    """An agent whose notes dict is read in insertion order; its load_state_dict sorts it, as agentsnap's own
    encoding did before layer values kept their maps' order."""

    def __init__(self) -> None:
        self.notes: dict[str, int] = {}

    def state_dict(self) -> dict:
        return {"notes": dict(self.notes)}

    def load_state_dict(self, state: dict) -> None:
        self.notes = dict(sorted(state["notes"].items()))


def test_the_kit_fails_an_adapter_that_gives_dicts_back_reordered(tmp_path: Path) -> None:
    """Before, the kit compared observations as JSON with sorted keys: an adapter (or core) that gave an agent's
    dicts back reordered passed every check. Now the order is part of what a restore must bring back."""
    from agentsnap_core.testing import AdapterCase

    case = AdapterCase(name="reordering", make=_Notes, step=lambda a, i: a.notes.update({f"z{i}": i, f"a{i}": i}),
                       observe=lambda a: a.notes)
    report = check_adapter(case, tmp_path)
    assert not report.passed and "roundtrip" in report.failed()
