"""Crash injection during batched snapshots (issue 22 durable mode, issue 19 packs): SIGKILL and power loss.

The child takes three snapshots in one ``repo.batch()`` (one pack, one barrier, one transaction) and then one
more on its own. After a crash at any counted call the store must verify, no ref may name an object that did not
survive (refs move only after the barrier), every finished batch must be reachable from main and restore
byte-identically, and temp files must be reported by verify and removed by gc (checks of core/tests/test_crash.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from agentsnap_core import Repo
from agentsnap_core.testing.crashkit import Recorder, Scenario, disable_barrier, run_points
from test_crash import (  # noqa: F401
    LONG,
    SEED,
    _effects_key,
    _reaches,
    _setup_history,
    check_repo,
    files_for,
    write_tree,
)

POINTS = 200 if LONG else 24


def batch_setup(template: Path) -> dict[str, Any]:
    return _setup_history(template, 1)


def batch_work(target: Path, ctx: dict[str, Any], rec: Recorder) -> None:
    work = target / "work"
    with Repo.open(work) as repo:
        with repo.batch():
            last = None
            for step in (1, 2, 3):
                write_tree(work, files_for(step))
                repo.append_message("user", f"step {step}")
                last = repo.snapshot(f"s{step}", layers={"state": {"step": step}})
        rec.note(step=3, id=last.id)
        write_tree(work, files_for(4))
        rec.note(step=4, id=repo.snapshot("s4").id)


def batch_check(target: Path, ctx: dict[str, Any], notes: list[dict[str, Any]]) -> list[str]:
    work = target / "work"
    step, oid = (notes[-1]["step"], notes[-1]["id"]) if notes else (0, ctx["ids"][0])
    problems = check_repo(work, ctx, {oid: files_for(step)})
    with Repo.open(work) as repo:
        tip = repo.refs.get_ref("refs/heads/main")
    if not _reaches(work, tip, oid):
        problems.append(f"lost update: main ({tip and tip[:12]}) does not contain finished snapshot {oid[:12]}")
    return problems


SCENARIO = Scenario("batch", batch_setup, batch_work, batch_check)


@pytest.mark.timeout(900)
@pytest.mark.parametrize("power_loss", [False, True], ids=["kill", "power-loss"])
def test_crash_mid_batch_loses_nothing(tmp_path: Path, power_loss: bool) -> None:
    report = run_points(SCENARIO, tmp_path, POINTS, SEED, power_loss=power_loss)
    print("\n" + report.line())
    assert report.killed >= len(report.points) - 1, report.line()
    assert report.losses == 0, "\n".join(report.failures[:5])
    if power_loss:
        assert sum(report.discarded.values()) > 0, "the simulation discarded nothing: it tested nothing"


@pytest.mark.timeout(900)
def test_power_loss_control_batch_without_barrier_loses_snapshots(tmp_path: Path) -> None:
    """Without the barrier the batch's refs name objects that never reached the disk: the check must see it."""
    report = run_points(SCENARIO, tmp_path, POINTS, SEED, power_loss=True, patch_child=disable_barrier,
                        stop_after_failures=2)
    print("\ncontrol (barrier disabled): " + report.line())
    assert report.losses >= 1
