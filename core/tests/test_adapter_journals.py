"""Checkpoints a process that ended left in an adapter's write-behind journal are never left out in silence.

An adapter that returns from a checkpoint call before the commit (CrewAI's, by default) journals the checkpoint in
``<store>/<adapter>/journal/*.journal`` under an ``flock`` its live process holds, and replays a dead process's
journal when the store is next opened through it. Core alone never replays: after a crash, ``agentsnap log``,
``status`` and ``push`` showed and sent the store without those checkpoints and said nothing. They now say so. The
journals here are files of that convention (core never reads their entries); a real killed CrewAI run is in
adapters/crewai/tests/test_checkpoint_write_behind.py.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from agentsnap_core import Repo

WARNING = "write-behind journal(s) of a process that ended hold checkpoints that are not in the store yet"


def _cli(repo: Repo, *args: str) -> subprocess.CompletedProcess[str]:
    cli = Path(sys.executable).with_name("agentsnap")
    return subprocess.run([str(cli), "-C", str(repo.root), *args], capture_output=True, text=True, timeout=120)


@pytest.fixture
def repo(tmp_path: Path) -> Repo:
    r = Repo.init(tmp_path / "work")
    (r.root / "a.txt").write_text("a\n")
    r.snapshot("base")
    return r


def _journal(repo: Repo, data: bytes = b"ASCJ an entry core never reads") -> Path:
    d = repo.store_dir / "crewai" / "journal"
    d.mkdir(parents=True, exist_ok=True)
    path = d / "4242-0.journal"
    path.write_bytes(data)
    return path


def test_log_status_and_push_say_a_dead_processs_journal_is_not_in_the_store(repo: Repo, tmp_path: Path) -> None:
    path = _journal(repo)
    log = _cli(repo, "log")
    assert log.returncode == 0 and WARNING in log.stderr and str(path) in log.stderr and "agentsnap-crewai" in log.stderr
    status = _cli(repo, "status")  # the fast path
    assert status.returncode == 0 and WARNING in status.stderr
    as_json = json.loads(_cli(repo, "status", "--json").stdout)
    assert as_json["unreplayed_journals"] == [{"adapter": "crewai", "path": str(path)}]
    remote = tmp_path / "team"
    assert _cli(repo, "remote", "add", "team", f"file://{remote}").returncode == 0
    push = _cli(repo, "push", "team")
    assert push.returncode == 0, push.stderr
    assert WARNING in push.stderr and "they are not pushed" in push.stderr


def test_a_live_or_empty_journal_is_not_warned_about(repo: Repo) -> None:
    path = _journal(repo)
    fd = os.open(path, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)  # its process lives: the adapter commits it itself
    try:
        assert WARNING not in _cli(repo, "log").stderr
        assert "unreplayed_journals" not in json.loads(_cli(repo, "status", "--json").stdout)
    finally:
        os.close(fd)
    path.write_bytes(b"")  # everything in it committed: the adapter truncated it
    assert WARNING not in _cli(repo, "log").stderr and WARNING not in _cli(repo, "status").stderr


PENDING = "hold writes that are in no snapshot yet"


def test_an_adapters_writes_kept_between_snapshots_are_said_to_be_in_no_snapshot(repo: Repo, tmp_path: Path) -> None:
    """The second kind (docs/PLUGINS.md): ``<worktree dir>/<adapter>/*.journal`` holds an adapter's writes since its
    last snapshot (CrewAI's memory; a real one in adapters/crewai/tests/test_memory_push_pending.py), live process or
    not. Before, ``status`` said "nothing changed" and ``push`` sent the branch without them in silence."""
    path = repo.wt_dir / "crewai" / "memory-crewai_memory.journal"
    path.parent.mkdir(parents=True)
    path.write_bytes(b"an entry core never reads")
    fd = os.open(path, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)  # a live writer changes nothing: the writes are in no snapshot all the same
    try:
        for args in (["status"], ["log"]):
            proc = _cli(repo, *args)
            assert proc.returncode == 0 and PENDING in proc.stderr and str(path) in proc.stderr, (args, proc.stderr)
        assert json.loads(_cli(repo, "status", "--json").stdout)["unsnapshotted_journals"] == [
            {"adapter": "crewai", "path": str(path)}]
        push = _cli(repo, "push", f"file://{tmp_path / 'team'}")
        assert push.returncode == 0 and PENDING in push.stderr, push.stderr
    finally:
        os.close(fd)
    path.write_bytes(b"")  # snapshotted: the adapter emptied it
    assert PENDING not in _cli(repo, "status").stderr and PENDING not in _cli(repo, "log").stderr
    assert "unsnapshotted_journals" not in json.loads(_cli(repo, "status", "--json").stdout)
