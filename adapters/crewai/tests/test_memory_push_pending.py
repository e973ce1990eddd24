"""Memory written since the last ``AgentsnapStorage.snapshot()`` lives in the storage's journal, not in the branch:
``agentsnap push`` sent the branch without it and a teammate's clone had fewer memories, with nothing said."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from agentsnap_core import Repo
from agentsnap_crewai import AgentsnapStorage
from crewai.memory.types import MemoryRecord


def cli(where: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "agentsnap_core", *args], cwd=where, capture_output=True, text=True,
                          timeout=300)


def record(text: str, scope: str) -> MemoryRecord:
    return MemoryRecord(content=text, embedding=[float(len(text)), 1.0, 2.0], scope=scope)


def test_push_status_and_log_say_memory_written_since_the_last_snapshot_is_not_carried(tmp_path: Path) -> None:
    """Before: 2 memories saved, 1 snapshotted; ``push`` exited 0 saying nothing, ``status`` said "nothing changed",
    and the teammate's clone held 1 memory. Now ``status``, ``log`` and ``push`` name the journal that holds writes in
    no snapshot; after ``snapshot()`` the journal is empty, nothing is said, and the clone holds both."""
    mine, bare, theirs = tmp_path / "mine", tmp_path / "team.store", tmp_path / "theirs"
    repo = Repo.init(mine)
    storage = AgentsnapStorage(repo)
    storage.save([record("The capital of Atlantis is Poseidonia", "/facts")])
    storage.snapshot()
    storage.save([record("The user prefers metric units", "/prefs")])
    warning = "hold writes that are in no snapshot yet"
    for args in (["status"], ["log", "crewai/memory"], ["push", str(bare), "crewai/memory"]):
        proc = cli(mine, *args)
        assert proc.returncode == 0 and warning in proc.stderr and "memory-crewai_memory.journal" in proc.stderr, \
            (args, proc.stdout, proc.stderr)
        assert "agentsnap-crewai" in proc.stderr, proc.stderr
    status = json.loads(cli(mine, "status", "--json").stdout)
    assert [j["adapter"] for j in status["unsnapshotted_journals"]] == ["crewai"]

    storage.snapshot()
    for args in (["status"], ["push", str(bare), "crewai/memory"]):
        proc = cli(mine, *args)
        assert proc.returncode == 0 and warning not in proc.stderr, (args, proc.stderr)
    assert cli(tmp_path, "clone", str(bare), str(theirs)).returncode == 0
    assert AgentsnapStorage(Repo.open(theirs)).count() == 2
