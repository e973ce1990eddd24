"""A store inside a git project survives ``git clean -fdx`` and stays out of ``git add -A``.

Reported: ``agentsnap init`` in a git project made ``.agentsnap/`` an untracked directory like any other. An agent's
``git clean -fdx`` (a clean build) then deleted every snapshot - the one command the user most needs them after - and
``git add -A`` committed the whole store (packs, index) into the project's history. git leaves alone what its exclude
file lists (add, status) and untracked nested repositories (clean, unless told ``-f`` twice); the store now gets both.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from agentsnap_core.testing.servers import need
from trust_kit import cli


def git(cwd: Path, *args: str) -> str:
    proc = subprocess.run(["git", "-c", "user.email=t@example.com", "-c", "user.name=t", *args], cwd=cwd,
                          capture_output=True, text=True)
    assert proc.returncode == 0, (args, proc.stderr)
    return proc.stdout


@pytest.fixture(autouse=True)
def _git() -> None:
    need(shutil.which("git") is not None, "git on PATH")


def _project(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    root.mkdir()
    git(root, "init", "-q")
    (root / "src.py").write_text("print('hi')\n")
    git(root, "add", "src.py")
    git(root, "commit", "-qm", "first")
    (root / "build").mkdir()
    (root / "build" / "out.o").write_text("object\n")
    return root


def test_git_clean_fdx_leaves_the_store_and_git_add_does_not_take_it(tmp_path: Path) -> None:
    root = _project(tmp_path)
    code, out, err = cli(root, "init")
    assert code == 0 and "kept out of git" in err and "git clean -ffdx" in err, err
    code, snap, err = cli(root, "snapshot", "-m", "before the clean")
    assert code == 0, err
    assert ".agentsnap" not in git(root, "status", "--porcelain", "--untracked-files=all")
    git(root, "add", "-A")
    assert not [p for p in git(root, "diff", "--cached", "--name-only").splitlines() if ".agentsnap" in p]
    git(root, "reset", "-q")
    git(root, "clean", "-fdx")
    assert not (root / "build").exists()  # what git clean is for still happens
    assert (root / ".agentsnap" / "format.json").exists()
    code, out, err = cli(root, "restore", snap.strip())
    assert code == 0 and (root / "build" / "out.o").read_text() == "object\n", err
    git(root, "clean", "-ffdx")  # git's own word for "nested repositories too": said in init's note
    assert not (root / ".agentsnap").exists()


def test_a_store_in_a_subdirectory_or_a_linked_git_worktree_is_listed_in_the_common_exclude(tmp_path: Path) -> None:
    root = _project(tmp_path)
    (root / "agent").mkdir()
    code, out, err = cli(root / "agent", "init", "--json")
    assert code == 0, err
    shield = json.loads(out)["git_shield"]
    assert shield["exclude"] == str(root / ".git" / "info" / "exclude"), shield
    assert "/agent/.agentsnap/" in (root / ".git" / "info" / "exclude").read_text().splitlines()
    git(root, "worktree", "add", "-q", str(tmp_path / "wt"))
    code, out, err = cli(tmp_path / "wt", "init")
    assert code == 0, err
    git(tmp_path / "wt", "clean", "-fdx")
    assert (tmp_path / "wt" / ".agentsnap" / "format.json").exists()
    assert ".agentsnap" not in git(tmp_path / "wt", "status", "--porcelain")
    code, out, err = cli(root / "agent", "init")  # again: nothing added twice, nothing said twice
    assert code == 0 and "kept out of git" not in err, err
    assert (root / ".git" / "info" / "exclude").read_text().count("/agent/.agentsnap/") == 1


def test_a_store_made_before_git_init_survives_a_later_clean_and_reinit_protects_an_old_store(tmp_path: Path) -> None:
    root = tmp_path / "plain"
    root.mkdir()
    (root / "a.txt").write_text("a\n")
    code, out, err = cli(root, "init")
    assert code == 0 and "kept out of git" not in err, err  # no git here: nothing to say
    git(root, "init", "-q")
    git(root, "clean", "-fdx")
    assert (root / ".agentsnap" / "format.json").exists()
    shutil.rmtree(root / ".agentsnap" / ".git")  # a store made before this protection
    code, out, err = cli(root, "init")
    assert code == 0 and "kept out of git" in err, err
    git(root, "clean", "-fdx")
    assert (root / ".agentsnap" / "format.json").exists()
    code, out, err = cli(root, "verify")
    assert code == 0, (out, err)


def test_git_init_above_an_existing_store_then_git_add_works_after_any_command(tmp_path: Path) -> None:
    """Before: a store made before ``git init`` had the nested-repository marker but no exclude line, and git refuses
    to add a nested repository without a commit: ``git add -A`` failed outright ("error: '.agentsnap/' does not have a
    commit checked out / fatal: adding files failed") - the user's own files could not be committed. Now the next
    agentsnap command lists the store in the exclude file (said once); an old store without the marker gets both."""
    root = tmp_path / "plain"
    root.mkdir()
    (root / "a.txt").write_text("a\n")
    assert cli(root, "init")[0] == 0
    assert cli(root, "snapshot", "-m", "before git init")[0] == 0
    git(root, "init", "-q")
    code, out, err = cli(root, "log")  # any command (the fast path answers log)
    assert code == 0 and "kept out of git" in err, err
    git(root, "add", "-A")
    assert git(root, "diff", "--cached", "--name-only").split() == ["a.txt"]
    code, out, err = cli(root, "snapshot", "-m", "after git init")
    assert code == 0 and "kept out of git" not in err, err  # said once
    # an old store (no marker, no exclude line) in a git project: the next command protects it
    shutil.rmtree(root / ".agentsnap" / ".git")
    (root / ".git" / "info" / "exclude").write_text("")
    code, out, err = cli(root, "status")
    assert code == 0 and "kept out of git" in err, err
    git(root, "clean", "-fdx")
    assert (root / ".agentsnap" / "format.json").exists()
    git(root, "add", "-A")
    assert cli(root, "verify")[0] == 0
