"""Crash injection while gc packs and repacks (issue 19 store size): SIGKILL, and power loss, at counted calls.

The template store has two snapshots whose objects are loose, plus an old pack holding live objects and
unreachable garbage; the child runs ``gc``, which packs the loose objects, copies the old pack into the new one
without the garbage and retires the old pack. After a crash at any counted call the store must verify, every
snapshot must restore byte-identically, temp files must be reported by verify and removed by gc (the same checks
as core/tests/test_crash.py); an uninterrupted run must leave one pack and no small loose object.
"""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any

import pytest
from agentsnap_core import Repo
from agentsnap_core.format.objects import Kind
from agentsnap_core.stores import pack as packmod
from agentsnap_core.testing.crashkit import Recorder, Scenario, run_points
from test_crash import LONG, SEED, _effects_key, _setup_history, check_repo, files_for  # noqa: F401

POINTS = 200 if LONG else 30
OLD = 1_000_000_000


def pack_setup(template: Path) -> dict[str, Any]:
    ctx = _setup_history(template, 1)
    with Repo.open(template / "work") as repo:
        rng = random.Random(5)
        garbage = {repo.objects.put(Kind.BLOB, rng.randbytes(300)) for _ in range(12)}
        repo.objects.pack_live(set(repo.objects.iter_oids()), None)  # an old pack: live objects and garbage
    more = _setup_history_more(template)
    pack_dir = template / "work" / ".agentsnap" / "objects" / "pack"
    for n in os.listdir(pack_dir):
        if packmod.is_pack_name(n):
            os.utime(pack_dir / n, (OLD, OLD))  # last re-used long ago
    ctx["ids"].append(more)
    ctx["garbage"] = sorted(garbage)
    return ctx


def _setup_history_more(template: Path) -> str:
    from test_crash import write_tree

    work = template / "work"
    with Repo.open(work) as repo:
        write_tree(work, files_for(1))
        repo.append_message("user", "step 1")
        return repo.snapshot("s1").id  # its new objects are loose


def pack_work(target: Path, ctx: dict[str, Any], rec: Recorder) -> None:
    with Repo.open(target / "work") as repo:
        rec.note(gc=repo.gc(grace_seconds=60))


def pack_check(target: Path, ctx: dict[str, Any], notes: list[dict[str, Any]]) -> list[str]:
    work = target / "work"
    problems = check_repo(work, ctx, {ctx["ids"][0]: files_for(0), ctx["ids"][1]: files_for(1)})
    if notes:  # gc finished: everything small is packed, in one pack, the garbage gone
        with Repo.open(work) as repo:
            small = [o for o in repo.objects.iter_loose() if len(repo.objects.get_stored(o)) < packmod.PACK_MAX_STORED]
            packs = [n for n in os.listdir(repo.store_dir / "objects" / "pack") if packmod.is_pack_name(n)]
            if small or len(packs) != 1:
                problems.append(f"finished gc left {len(small)} small loose objects and {len(packs)} packs")
            if any(repo.objects.has(g) for g in ctx["garbage"]):
                problems.append("finished gc kept unreachable packed garbage older than the grace period")
    return problems


SCENARIO = Scenario("gc-pack", pack_setup, pack_work, pack_check)


@pytest.mark.timeout(900)
@pytest.mark.parametrize("power_loss", [False, True], ids=["kill", "power-loss"])
def test_kill_mid_pack_loses_nothing(tmp_path: Path, power_loss: bool) -> None:
    report = run_points(SCENARIO, tmp_path, POINTS, SEED, power_loss=power_loss)
    print("\n" + report.line())
    assert report.killed >= len(report.points) - 1, report.line()
    assert report.losses == 0, "\n".join(report.failures[:5])
