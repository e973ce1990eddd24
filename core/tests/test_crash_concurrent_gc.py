"""gc running beside writers never deletes an object a new snapshot needs.

The protection is a grace period plus a re-check (see docs/FORMAT.md, "Crash safety"): gc only
deletes unreachable objects older than ``grace_seconds``; a writer that re-uses an existing object
refreshes its mtime; gc renames an object aside before deleting it and puts it back when its mtime
moved since gc looked; a writer whose refresh finds the file gone writes it again.

The deterministic tests force each interleaving of that race; the process test runs the shared
concurrency workload (``agentsnap_core.testing.concurrency``, the same one the store tests use) with a gc
loop and writers that keep re-using old garbage objects, then checks 0 lost updates and a clean verify.
"""

from __future__ import annotations

import multiprocessing
import os
import time
from pathlib import Path
from typing import Any

import pytest
from agentsnap_core import Repo
from agentsnap_core.format import content
from agentsnap_core.format.encoding import pack
from agentsnap_core.stores import local as localstore
from agentsnap_core.testing.concurrency import check_workload, run_workload

LONG = os.environ.get("AGENTSNAP_LONG") == "1"
WORKERS, OPS = (16, 50) if LONG else (6, 6)
OLD = 1_000_000_000


def _age_out(repo: Repo, oid: str) -> None:
    path = repo.store_dir / "objects" / oid[:2] / oid[2:]
    os.utime(path, (OLD, OLD))


def test_writer_reuses_after_gc_looked_object_is_kept(repo: Repo) -> None:
    """gc checks the age, a writer re-uses the object, gc deletes: the object must survive."""
    oid = content.put_value(repo.objects, {"garbage": 1})
    _age_out(repo, oid)
    assert repo.objects.age(oid) > 3600  # gc's look: old and unreachable
    assert content.put_value(repo.objects, {"garbage": 1}) == oid  # a snapshot re-uses it
    repo.objects.delete(oid)  # gc acts on what it saw
    assert repo.objects.has(oid)
    assert content.get_value(repo.objects, oid) == {"garbage": 1}
    assert not repo.objects.temp_files()


def test_gc_deletes_between_writers_check_and_refresh(repo: Repo, monkeypatch: pytest.MonkeyPatch) -> None:
    """The writer saw the file, gc deleted it before the refresh: the writer must write it again."""
    oid = content.put_value(repo.objects, {"garbage": 2})
    _age_out(repo, oid)
    real = localstore._freshen

    def gc_in_between(path: str) -> bool:
        repo.objects.age(oid)
        repo.objects.delete(oid)
        return real(path)

    monkeypatch.setattr(localstore, "_freshen", gc_in_between)
    assert content.put_value(repo.objects, {"garbage": 2}) == oid
    monkeypatch.setattr(localstore, "_freshen", real)
    assert content.get_value(repo.objects, oid) == {"garbage": 2}


def test_object_written_after_gc_read_the_refs_is_kept_however_long_gc_takes(repo: Repo, monkeypatch: pytest.MonkeyPatch) -> None:
    """A snapshot writes an object after gc walked the roots and commits its ref before gc sweeps; gc's walk and
    sweep then take longer than the grace period (a loaded machine). The object's age counts from gc's start, so it is
    kept (it was deleted: the committed snapshot lost its trace layer, and verify said "missing")."""
    from agentsnap_core.repository import maintenance

    real_reachable, real_time = maintenance.reachable, time.time
    written: list[str] = []

    def slow_walk(*args: Any, **kw: Any) -> set[str]:
        live = real_reachable(*args, **kw)
        written.append(content.put_value(repo.objects, {"written during gc": 1}))  # after the roots were read
        monkeypatch.setattr(time, "time", lambda: real_time() + 10.0)  # the sweep runs 10 s later
        return live

    monkeypatch.setattr(maintenance, "reachable", slow_walk)
    repo.gc(grace_seconds=0.5)
    monkeypatch.setattr(time, "time", real_time)
    assert repo.objects.has(written[0])


def test_gc_prune_now_keeps_what_a_running_snapshot_wrote(repo: Repo) -> None:
    """`gc --prune now` (no grace at all) beside a snapshot that has written its objects but not yet its ref: the
    writer's session marker makes gc keep them; once the session ends the same garbage is collected."""
    with repo.writer_sessions.session():
        oid = content.put_value(repo.objects, {"being snapshotted": 1})
        with Repo.open(repo.root) as other:  # gc from another handle (another process would do the same)
            other.gc(grace_seconds=0)
        assert repo.objects.has(oid)
    with Repo.open(repo.root) as other:
        other.gc(grace_seconds=0)
    assert not repo.objects.has(oid)


def _hold_session_then_die(root: str, ready: str) -> None:
    with Repo.open(root) as repo:
        repo.writer_sessions._enter()
        content.put_value(repo.objects, {"written by a writer that dies": 1})
        Path(ready).touch()
        time.sleep(600)


def test_a_dead_writers_marker_protects_nothing(repo: Repo, tmp_path: Path) -> None:
    """A writer killed mid-snapshot leaves its marker; nobody holds its lock, so gc ignores and removes it."""
    ready = tmp_path / "ready"
    proc = multiprocessing.get_context("spawn").Process(target=_hold_session_then_die, args=(str(repo.root), str(ready)))
    proc.start()
    try:
        deadline = time.monotonic() + 300
        while not ready.exists() and proc.is_alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert ready.exists()
        marker_dir = repo.store_dir / "writers"
        assert [n for n in os.listdir(marker_dir) if not n.startswith(".tmp-")]
        repo.gc(grace_seconds=0)  # alive: its object is kept
        assert repo.gc(grace_seconds=0)["removed"] == 0
    finally:
        proc.kill()
        proc.join()
    report = repo.gc(grace_seconds=0)
    assert report["removed"] >= 1
    assert not [n for n in os.listdir(repo.store_dir / "writers") if not n.startswith(".tmp-")]


def test_unused_old_object_is_still_collected(repo: Repo) -> None:
    oid = content.put_value(repo.objects, {"garbage": 3})
    _age_out(repo, oid)
    report = repo.gc(grace_seconds=60)
    assert report["removed"] >= 1 and not repo.objects.has(oid)
    assert not repo.objects.temp_files()


def _gc_loop(root: str, stop_file: str, grace: float) -> dict[str, int]:
    runs = removed = refused = 0
    with Repo.open(root) as repo:
        while not os.path.exists(stop_file):
            try:
                removed += repo.gc(grace_seconds=grace)["removed"]
                runs += 1
            except Exception:  # gc refuses while the store has problems; count it, never hide a loss
                refused += 1
            Path(stop_file + ".started").touch()  # the workload starts once gc is running, however slow the machine
            time.sleep(0.05)
    return {"runs": runs, "removed": removed, "refused": refused}


def _reuser(root: str, values: list[Any], rounds: int, who: int) -> list[str]:
    made = []
    with Repo.open(root) as repo:
        for r in range(rounds):
            value = values[(r + who) % len(values)]
            snap = repo.snapshot(f"reuse {who}/{r}", layers={"state": value}, capture_world=False,
                                 ref=f"refs/heads/reuse-{who}")
            made.append(snap.id)
    return made


@pytest.mark.timeout(900)
def test_gc_beside_the_shared_concurrency_workload_loses_nothing(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    values = [{"reused": i, "pad": "x" * 100} for i in range(12)]
    with Repo.init(root) as repo:
        for v in values:  # garbage no root names, aged out, that the re-users will need again
            oid = content.put_bytes(repo.objects, pack(v))
            _age_out(repo, oid)
        for i in range(20):  # and garbage nobody needs, which gc must still collect
            _age_out(repo, content.put_value(repo.objects, {"unused": i}))
        repo.objects.barrier()
    stop = tmp_path / "stop"
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(3) as pool:
        gc_job = pool.apply_async(_gc_loop, (str(root), str(stop), 0.5))
        started = Path(str(stop) + ".started")
        deadline = time.monotonic() + 600
        while not started.exists() and not gc_job.ready() and time.monotonic() < deadline:
            time.sleep(0.05)
        reusers = [pool.apply_async(_reuser, (str(root), values, 2 * OPS, w)) for w in range(2)]
        report = run_workload(root, None, WORKERS, OPS, seed=5)
        made = [m for job in reusers for m in job.get(timeout=600)]
        stop.write_text("")
        gc_stats = gc_job.get(timeout=600)
    with Repo.open(root) as repo:
        summary = check_workload(repo, report)
        for oid in made:  # every re-using snapshot is complete
            assert repo.read_layer(oid, "state")["pad"] == "x" * 100
        verify = repo.verify()
    print(f"\nconcurrent gc: {WORKERS}x{OPS} workload + 2 re-users ({len(made)} snapshots), gc {gc_stats}, "
          f"lost {summary['lost']}, verify ok {verify['ok']}")
    assert summary["lost"] == 0 and summary["phantom"] == 0
    assert verify["ok"], verify["problems"][:3]
    assert gc_stats["runs"] >= 1 and gc_stats["removed"] >= 1
