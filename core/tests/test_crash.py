"""Crash injection: SIGKILL snapshot, fork, merge, gc and push at counted system calls, then check the store.

Each scenario is crashed at seeded call counts (``os.write`` / ``fsync`` / ``replace`` / ``unlink`` /
``syncfs`` / opens for writing); after each crash ``verify`` must be clean, every ref must name a
complete snapshot, the last snapshot the child finished must restore byte-identically (0 losses),
and temp files left behind must be reported by ``verify`` and removed by ``gc``. The power-loss
mode also discards every write that was not fsynced at the crash; its control (the store's
durability barrier switched off) must fail, or the simulation would prove nothing.

A short seeded run by default; ``AGENTSNAP_LONG=1`` crashes at many more points.
``AGENTSNAP_CRASH_SEED`` picks the seed. Counts are printed (``pytest -s`` shows them).
"""

from __future__ import annotations

import os
import random
import shutil
from pathlib import Path
from typing import Any

import pytest
from agentsnap_core import Repo
from agentsnap_core.format.objects import Kind
from agentsnap_core.operations.merge import merge
from agentsnap_core.operations.remote import add_remote, push
from agentsnap_core.testing.crashkit import Recorder, Scenario, disable_barrier, run_points

LONG = os.environ.get("AGENTSNAP_LONG") == "1"
POINTS = 200 if LONG else 22
SEED = int(os.environ.get("AGENTSNAP_CRASH_SEED", "12"))
TOTALS: dict[str, int] = {"points": 0, "killed": 0, "stores": 0, "losses": 0}


@pytest.fixture(autouse=True)
def _effects_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTSNAP_EFFECTS_KEY", "11" * 32)


# ---------------------------------------------------------------- the working trees the scenarios write


def files_for(step: int) -> dict[str, bytes]:
    """The exact working tree of step ``step`` (deterministic, so the parent knows what to expect)."""
    rng = random.Random(1000 + min(step, 3))
    big = bytearray(random.Random(7).randbytes(200_000))
    big[5000:5100] = rng.randbytes(100)  # one chunk changes, the others are shared
    files = {f"src/m{i:02d}.py": f"# module {i}\nVALUE = {i}\n".encode() for i in range(12)}
    files["data/big.bin"] = bytes(big)
    files["README.md"] = b"hello\n"
    if step >= 1:
        files["src/m00.py"] = b"# module 0, edited in step 1\n"  # one small change: per-file fsync path
    if step >= 2:
        for i in range(2, 12):  # many new objects: the syncfs path
            files[f"src/m{i:02d}.py"] = f"# module {i} rewritten in step 2\n".encode()
        files["notes/new.txt"] = b"added in step 2\n"
    if step >= 3:
        del files["README.md"]
    return files


def write_tree(root: Path, files: dict[str, bytes]) -> None:
    for rel in sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()):
        if not rel.startswith(".agentsnap") and rel not in files:
            (root / rel).unlink()
    for rel, data in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        if not p.exists() or p.read_bytes() != data:
            p.write_bytes(data)


def read_tree(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in root.rglob("*")
        if p.is_file() and not p.relative_to(root).as_posix().startswith(".agentsnap")
    }


def _litter(root: Path) -> list[str]:
    out = []
    for dirpath, _dirs, names in os.walk(root):
        for n in names:
            if n.startswith(".tmp-") or n.startswith(".agentsnap-tmp-") or ".tmp" in n:
                out.append(os.path.join(dirpath, n))
    return sorted(out)


def check_repo(work: Path, ctx: dict[str, Any], expect: dict[str, dict[str, bytes]]) -> list[str]:
    """Problems with the repository at ``work``: verify, refs, byte-identical restores, temp litter."""
    problems: list[str] = []
    with Repo.open(work) as repo:
        report = repo.verify()
        problems += [f"verify: {p}" for p in report["problems"][:3]]
        for name, oid in repo.refs.list_refs().items():
            try:
                repo.world_entries(oid)
            except Exception as exc:
                problems.append(f"ref {name} -> incomplete snapshot {oid[:12]}: {exc}")
        for oid, files in expect.items():
            dest = work.parent / f"restore-{oid[:8]}"
            shutil.rmtree(dest, ignore_errors=True)
            try:
                repo.restore(oid, to=dest)
                got = read_tree(dest)
                if got != files:
                    problems.append(f"snapshot {oid[:12]} restores different files: {sorted(set(got) ^ set(files))}")
            except Exception as exc:
                problems.append(f"snapshot {oid[:12]} does not restore: {exc}")
            shutil.rmtree(dest, ignore_errors=True)
        # every temp file in the store is reported by verify, and gc removes it
        objects_dir = Path(getattr(repo.objects, "dir", repo.store_dir / "objects"))  # a bound store's own directory
        store_litter = _litter(objects_dir)
        ctx["_litter"] = len(store_litter)
        if len(store_litter) != report["temp_files"]:
            problems.append(f"unreported temp files: {store_litter}")
        # a half-written restore/merge file in the working tree must never be captured as user data
        tree_litter = [p for p in _litter(work) if "/.agentsnap/" not in p and ".agentsnap-tmp-" in p]
        ctx["_tree_litter"] = ctx.get("_tree_litter", 0) + len(tree_litter)
        captured = [e[0] for e in repo.working_entries() if ".agentsnap-tmp-" in e[0]]
        if captured:
            problems.append(f"temp files of an interrupted restore would be captured: {captured}")
        if store_litter:
            repo.gc(grace_seconds=0)
            if _litter(objects_dir):
                problems.append("gc left temp files behind")
            if not repo.verify()["ok"]:
                problems.append("verify fails after gc")
    return problems


def _reaches(work: Path, tip: str | None, oid: str) -> bool:
    with Repo.open(work) as repo:
        return tip is not None and (tip == oid or any(s.id == oid for s in repo.walk([tip])))


# ---------------------------------------------------------------- scenarios


def _setup_history(template: Path, steps: int) -> dict[str, Any]:
    work = template / "work"
    ids = []
    with Repo.init(work) as repo:
        for step in range(steps):
            write_tree(work, files_for(step))
            repo.append_message("user", f"step {step}")
            ids.append(repo.snapshot(f"s{step}").id)
    return {"ids": ids}


def snapshot_setup(template: Path) -> dict[str, Any]:
    return _setup_history(template, 1)


def snapshot_work(target: Path, ctx: dict[str, Any], rec: Recorder) -> None:
    work = target / "work"
    with Repo.open(work) as repo:
        for step in (1, 2, 3):
            write_tree(work, files_for(step))
            repo.append_message("user", f"step {step}")
            snap = repo.snapshot(f"s{step}", layers={"state": {"step": step}})
            rec.note(step=step, id=snap.id)


def snapshot_check(target: Path, ctx: dict[str, Any], notes: list[dict[str, Any]]) -> list[str]:
    work = target / "work"
    step, oid = (notes[-1]["step"], notes[-1]["id"]) if notes else (0, ctx["ids"][0])
    problems = check_repo(work, ctx, {oid: files_for(step)})
    with Repo.open(work) as repo:
        tip = repo.refs.get_ref("refs/heads/main")
    if not _reaches(work, tip, oid):
        problems.append(f"lost update: main ({tip and tip[:12]}) does not contain finished snapshot {oid[:12]}")
    return problems


def fork_setup(template: Path) -> dict[str, Any]:
    return _setup_history(template, 2)


def fork_work(target: Path, ctx: dict[str, Any], rec: Recorder) -> None:
    with Repo.open(target / "work") as repo:
        made = repo.fork("main", 3, worktrees=str(target / "attempts"))
        rec.note(branches=[m["branch"] for m in made])
        wt = Repo.open(made[0]["path"])
        write_tree(Path(made[0]["path"]), files_for(3))
        snap = wt.snapshot("attempt work")
        wt.close()
        rec.note(step=3, id=snap.id)


def fork_check(target: Path, ctx: dict[str, Any], notes: list[dict[str, Any]]) -> list[str]:
    base = ctx["ids"][1]
    expect = {base: files_for(1)}
    finished = [n for n in notes if "id" in n]
    if finished:
        expect[finished[-1]["id"]] = files_for(3)
    problems = check_repo(target / "work", ctx, expect)
    with Repo.open(target / "work") as repo:
        for name, oid in repo.branches().items():
            if name.startswith("attempt-") and oid != base and repo.manifest(oid)["parents"] != [base]:
                problems.append(f"branch {name} points at {oid[:12]}, neither the fork base nor the finished work")
        if notes and not all(f"attempt-{i}" in repo.branches() for i in (1, 2, 3)):
            problems.append("fork reported done but a branch is missing")
    return problems


def merge_setup(template: Path) -> dict[str, Any]:
    work = template / "work"
    ctx = _setup_history(template, 1)
    with Repo.open(work) as repo:
        repo.switch("other", create=True)
        (work / "theirs.txt").write_bytes(b"their side\n")
        (work / "src/m05.py").write_bytes(b"# module 5, theirs\n")
        ctx["theirs"] = repo.snapshot("theirs").id
        repo.switch("main")
        (work / "ours.txt").write_bytes(b"our side\n")
        (work / "src/m01.py").write_bytes(b"# module 1, ours\n")
        ctx["ours"] = repo.snapshot("ours").id
    base = files_for(0)
    ctx["ours_files"] = {**base, "ours.txt": b"our side\n", "src/m01.py": b"# module 1, ours\n"}
    ctx["merged"] = {**ctx["ours_files"], "theirs.txt": b"their side\n", "src/m05.py": b"# module 5, theirs\n"}
    return ctx


def merge_work(target: Path, ctx: dict[str, Any], rec: Recorder) -> None:
    with Repo.open(target / "work") as repo:
        result = merge(repo, "other")
        rec.note(id=result.snapshot, status=result.status)


def merge_check(target: Path, ctx: dict[str, Any], notes: list[dict[str, Any]]) -> list[str]:
    expect = {ctx["ours"]: ctx["ours_files"]}
    if notes:
        expect[notes[-1]["id"]] = ctx["merged"]
    problems = check_repo(target / "work", ctx, expect)
    with Repo.open(target / "work") as repo:
        tip = repo.refs.get_ref("refs/heads/main")
    if notes and tip != notes[-1]["id"]:
        problems.append("merge finished but main does not point at the merge snapshot")
    if tip not in (ctx["ours"], *(n["id"] for n in notes)):
        with Repo.open(target / "work") as repo:
            if repo.manifest(tip)["parents"] != [ctx["ours"], ctx["theirs"]]:
                problems.append(f"main moved to an unexpected snapshot {tip[:12]}")
    return problems


def gc_setup(template: Path) -> dict[str, Any]:
    ctx = _setup_history(template, 2)
    with Repo.open(template / "work") as repo:
        old = 1_000_000_000
        rng = random.Random(3)
        for _ in range(24):  # garbage no root names, older than the grace period
            oid = repo.objects.put(Kind.BLOB, rng.randbytes(300))
            path = repo.store_dir / "objects" / oid[:2] / oid[2:]
            os.utime(path, (old, old))
        repo.objects.barrier()
    return ctx


def gc_work(target: Path, ctx: dict[str, Any], rec: Recorder) -> None:
    with Repo.open(target / "work") as repo:
        rec.note(gc=repo.gc(grace_seconds=60))


def gc_check(target: Path, ctx: dict[str, Any], notes: list[dict[str, Any]]) -> list[str]:
    return check_repo(target / "work", ctx, {ctx["ids"][0]: files_for(0), ctx["ids"][1]: files_for(1)})


def push_setup(template: Path) -> dict[str, Any]:
    return _setup_history(template, 3)


def push_work(target: Path, ctx: dict[str, Any], rec: Recorder) -> None:
    with Repo.open(target / "work") as repo:
        add_remote(repo, "origin", str(target / "remote"))
        push(repo, "origin", jobs=2)
        rec.note(id=ctx["ids"][-1])


def push_check(target: Path, ctx: dict[str, Any], notes: list[dict[str, Any]]) -> list[str]:
    tip = ctx["ids"][-1]
    problems = check_repo(target / "work", ctx, {tip: files_for(2)})
    remote = target / "remote"
    if not (remote / "format.json").exists():
        if notes:
            problems.append("push finished but the remote store does not exist")
        return problems
    checker = target / "checker"
    with Repo.init(checker, store_url=str(remote)) as repo:
        remote_tip = repo.refs.get_ref("refs/heads/main")
    if notes and remote_tip != tip:
        problems.append(f"push finished but the remote main is {remote_tip}")
    if remote_tip not in (None, tip):
        problems.append(f"remote main points at an unexpected {remote_tip[:12]}")
    problems += [f"remote: {p}" for p in check_repo(checker, {}, {tip: files_for(2)} if remote_tip else {})]
    return problems


SCENARIOS = {
    "snapshot": Scenario("snapshot", snapshot_setup, snapshot_work, snapshot_check),
    "fork": Scenario("fork", fork_setup, fork_work, fork_check),
    "merge": Scenario("merge", merge_setup, merge_work, merge_check),
    "gc": Scenario("gc", gc_setup, gc_work, gc_check),
    "push": Scenario("push", push_setup, push_work, push_check),
}


def _account(report: Any) -> None:
    print("\n" + report.line())
    TOTALS["points"] += len(report.points)
    TOTALS["killed"] += report.killed
    TOTALS["stores"] += report.stores_verified
    TOTALS["losses"] += report.losses


@pytest.mark.timeout(600)
@pytest.mark.parametrize("power_loss", [False, True], ids=["kill", "power-loss"])
@pytest.mark.parametrize("name", list(SCENARIOS))
def test_crash_at_counted_calls_loses_nothing(tmp_path: Path, name: str, power_loss: bool) -> None:
    report = run_points(SCENARIOS[name], tmp_path, POINTS, SEED, power_loss=power_loss)
    _account(report)
    assert report.killed >= min(len(report.points) - 1, 1), report.line()
    assert report.losses == 0, "\n".join(report.failures[:5])
    if power_loss and name in ("snapshot", "push"):
        assert sum(report.discarded.values()) > 0, "the simulation discarded nothing: it tested nothing"


@pytest.mark.timeout(600)
def test_power_loss_control_without_barrier_loses_snapshots(tmp_path: Path) -> None:
    """A store that never fsyncs before moving a ref must fail the power-loss check (else the check is blind)."""
    report = run_points(SCENARIOS["snapshot"], tmp_path, POINTS, SEED, power_loss=True,
                        patch_child=disable_barrier, stop_after_failures=2)
    print("\ncontrol (barrier disabled): " + report.line())
    assert report.losses >= 1, "power-loss simulation did not catch a store that never fsyncs"


def test_crash_totals_printed() -> None:
    """Runs last in this module: the counts of the whole run (0 losses)."""
    print(f"\ncrash totals: {TOTALS['points']} points killed ({TOTALS['killed']} by SIGKILL), "
          f"{TOTALS['stores']} stores verified, {TOTALS['losses']} losses")
    assert TOTALS["losses"] == 0


def test_interrupted_restore_temp_file_is_never_captured(repo: Repo) -> None:
    """Regression: a restore/merge killed mid-file left ``.agentsnap-tmp-*`` that the next snapshot captured."""
    (repo.root / "sub").mkdir()
    (repo.root / "sub" / ".agentsnap-tmp-4242-real.txt").write_bytes(b"half a file")
    (repo.root / "sub" / "real.txt").write_bytes(b"the file")
    snap = repo.snapshot("after a crash")
    assert [e[0] for e in repo.world_entries(snap)] == ["sub", "sub/real.txt"]
