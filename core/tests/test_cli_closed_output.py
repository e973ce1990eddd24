"""``agentsnap log | head``: the reader of the command's output goes away before the command is done writing.

Reported: ``agentsnap log | head -3`` printed "error: lost the connection to the remote store ([Errno 32] Broken
pipe)" on a store with no remote at all (a BrokenPipeError is a ConnectionError, which the CLI took for a dropped
PostgreSQL or S3 connection). A closed output is not an error of the store: the command ends quietly with 141
(128 + SIGPIPE, what a shell shows for ``git log | head``), as git does, whichever way it ran: the click
application (``log``), the fast path (``status``), or a child of the resident process.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from agentsnap_core.repository.repo import Repo

SCRIPT = "import sys\nfrom agentsnap_core.cli import run\nrun(sys.argv[1:])\n"


@pytest.fixture
def repo_dir(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    root.mkdir()
    repo = Repo.init(root)
    for i in range(40):  # a log long enough that it is written after the reader left
        (root / "f.txt").write_text(str(i))
        repo.snapshot(f"step {i}")
    for i in range(40):
        (root / f"new{i}.txt").write_text("x")  # and a status with lines to print
    repo.close()
    return root


def _with_closed_reader(cwd: Path, env: dict[str, str], *args: str) -> tuple[int, str]:
    """Run the CLI with stdout a pipe whose read end is already closed; (exit status, stderr)."""
    r, w = os.pipe()
    os.close(r)
    try:
        proc = subprocess.run([sys.executable, "-c", SCRIPT, *args], cwd=cwd, env=env, stdout=w,
                              stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(w)
    return proc.returncode, proc.stderr


@pytest.mark.parametrize("args", [["log"], ["log", "--json"], ["status"], ["status", "--json"]],
                         ids=["log", "log-json", "status-fast", "status-json"])
def test_a_reader_that_went_away_ends_the_command_quietly_not_as_a_lost_remote_store(repo_dir, args):
    env = dict(os.environ, AGENTSNAP_RESIDENT="0")
    code, err = _with_closed_reader(repo_dir, env, *args)
    assert "remote store" not in err, err
    assert err == "", err  # no traceback, no "Exception ignored" at exit
    assert code == 128 + signal.SIGPIPE


@pytest.mark.skipif(not hasattr(os, "fork"), reason="the resident process forks (POSIX only)")
def test_a_reader_that_went_away_ends_a_resident_command_quietly(repo_dir, tmp_path):
    env = dict(os.environ, AGENTSNAP_RESIDENT_DIR=str(tmp_path / "run"), AGENTSNAP_RESIDENT_IDLE="120")
    env.pop("AGENTSNAP_RESIDENT", None)
    start = subprocess.run([sys.executable, "-m", "agentsnap_core", "resident", "start"], env=env,
                           capture_output=True, text=True, timeout=120)
    assert start.returncode == 0, start.stdout + start.stderr
    try:
        for args in (["log"], ["status"]):
            code, err = _with_closed_reader(repo_dir, dict(env, AGENTSNAP_RESIDENT="1"), *args)
            assert err == "", err
            assert code == 128 + signal.SIGPIPE
    finally:
        subprocess.run([sys.executable, "-m", "agentsnap_core", "resident", "stop"], env=env, capture_output=True,
                       timeout=60)
