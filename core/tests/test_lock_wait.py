"""A snapshot beside another process's snapshot or restore of the same tree waits for it (the CLI for 10 s,
AGENTSNAP_LOCK_WAIT to change it) instead of failing at once; still busy after the wait, it fails with one line."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from agentsnap_core import Repo


def _hold(root: str, held: str, release: str) -> None:
    with Repo.open(root) as repo, repo.tree_lock("snapshot"):
        Path(held).touch()
        deadline = time.monotonic() + 300
        while not os.path.exists(release) and time.monotonic() < deadline:
            time.sleep(0.02)


@pytest.fixture
def holder(tmp_path: Path):
    root = tmp_path / "tree"
    Repo.init(root).close()
    (root / "a.txt").write_text("a\n")
    held, release = tmp_path / "held", tmp_path / "release"
    proc = multiprocessing.get_context("spawn").Process(target=_hold, args=(str(root), str(held), str(release)))
    proc.start()
    deadline = time.monotonic() + 300
    while not held.exists() and proc.is_alive() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert held.exists()
    yield root, release
    release.touch()
    proc.join(60)


def _has_open(pid: int, path: str) -> bool:
    try:
        return any(os.readlink(f"/proc/{pid}/fd/{fd}") == path for fd in os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return False


def _cli(root: Path, *args: str, **env: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "agentsnap_core", *args], cwd=root, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**{k: v for k, v in os.environ.items() if k != "AGENTSNAP_LOCK_WAIT"}, **env})


def test_cli_snapshot_waits_for_the_other_process_then_snapshots(holder) -> None:
    root, release = holder
    proc = _cli(root, "snapshot", "-m", "second", AGENTSNAP_LOCK_WAIT="300")
    lock = str(root / ".agentsnap" / "wt" / "_" / "tree.lock")
    while proc.poll() is None and not _has_open(proc.pid, lock):  # it reached the lock (however slow its start)
        time.sleep(0.02)
    time.sleep(0.2)
    assert proc.poll() is None, proc.communicate()  # still waiting while the other process holds the lock
    release.touch()
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    with Repo.open(root) as repo:
        assert repo.get(out.strip()).manifest["message"] == "second"


def test_no_wait_fails_at_once_with_one_line(holder) -> None:
    root, _ = holder
    out, err = _cli(root, "snapshot", AGENTSNAP_LOCK_WAIT="0").communicate(timeout=300)
    assert err.startswith("agentsnap: error: another agentsnap process (snapshot, pid") and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_still_busy_after_the_wait_says_how_long_it_waited(holder) -> None:
    root, _ = holder
    proc = _cli(root, "snapshot", AGENTSNAP_LOCK_WAIT="0.3")
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 2 and "still after waiting 0.3 s" in err and "Traceback" not in err


def test_a_bad_lock_wait_is_one_clear_line(tmp_path: Path) -> None:
    Repo.init(tmp_path).close()
    proc = _cli(tmp_path, "status", AGENTSNAP_LOCK_WAIT="soon")
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 2 and "AGENTSNAP_LOCK_WAIT must be a number of seconds" in err and "Traceback" not in err
