"""A branch a worktree has checked out is not deleted, moved or checked out a second time from another worktree.

Reported: after ``agentsnap fork -n 2 --worktrees ../wt`` and a snapshot in ``../wt/attempt-1``, ``agentsnap branch -d
attempt-1`` in the main checkout exited 0; the worktree then said "On branch attempt-1 at -", listed every file as
added, and its next snapshot started a new history with no parent (its earlier work reachable only through the
reflog). git refuses this ("cannot delete branch checked out at ..."), and so does moving such a branch with
``branch -f`` or switching a second worktree onto it. A worktree whose directory was deleted is forgotten instead
(as ``git worktree prune``), and that is said.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from trust_kit import cli, new_work


@pytest.fixture
def forked(tmp_path: Path) -> tuple[Path, Path]:
    root = new_work(tmp_path, {"a.txt": "one\n"})
    assert cli(root, "snapshot", "-m", "one")[0] == 0
    code, _, err = cli(root, "fork", "-n", "2", "--worktrees", str(tmp_path / "wt"))
    assert code == 0, err
    wt = tmp_path / "wt" / "attempt-1"
    (wt / "a.txt").write_text("one\nwork in the worktree\n")
    code, _, err = cli(wt, "snapshot", "-m", "in the worktree")
    assert code == 0, err
    return root, tmp_path / "wt"


def _branches(root: Path) -> dict[str, str]:
    return {b["name"]: b["id"] for b in json.loads(cli(root, "branch", "--json")[1])}


def test_deleting_a_branch_a_worktree_has_checked_out_is_refused_and_names_it(forked: tuple[Path, Path]) -> None:
    root, wts = forked
    before = _branches(root)
    code, out, err = cli(root, "branch", "-d", "attempt-1")
    assert code == 2, (out, err)
    assert "checked out at" in err and str(wts / "attempt-1") in err and "Traceback" not in err, err
    assert _branches(root) == before
    code, out, err = cli(wts / "attempt-1", "status")
    assert "On branch attempt-1 at " in out and "nothing changed" in out, out


def test_deleting_the_main_checkouts_branch_from_a_worktree_is_refused(forked: tuple[Path, Path]) -> None:
    root, wts = forked
    code, out, err = cli(wts / "attempt-1", "branch", "-d", "main")
    assert code == 2 and f"checked out at {root}" in err, err


def test_moving_a_branch_a_worktree_has_checked_out_is_refused(forked: tuple[Path, Path]) -> None:
    root, _wts = forked
    before = _branches(root)
    code, out, err = cli(root, "branch", "-f", "attempt-1", "main")
    assert code == 2 and "cannot move branch 'attempt-1'" in err, err
    assert _branches(root) == before
    code, out, err = cli(root, "branch", "-f", "fresh", "main")
    assert code == 0, err


def test_switching_onto_a_branch_another_worktree_has_checked_out_is_refused(forked: tuple[Path, Path]) -> None:
    root, wts = forked
    code, out, err = cli(root, "switch", "attempt-1")
    assert code == 2 and "checked out at" in err and str(wts / "attempt-1") in err, err
    assert json.loads(cli(root, "status", "--json")[1])["branch"] == "main"


def test_a_worktree_whose_directory_is_gone_is_forgotten_and_its_branch_can_go(forked: tuple[Path, Path]) -> None:
    root, wts = forked
    shutil.rmtree(wts / "attempt-2")
    code, out, err = cli(root, "branch", "-d", "attempt-2")
    assert code == 0, err
    assert "forgot the worktree 'attempt-2'" in err and "is gone" in err, err
    assert "attempt-2" not in _branches(root)


def _heads(root: Path) -> set[str]:
    from agentsnap_core import Repo

    return set(Repo.open(root).refs.list_heads())


def test_moving_the_branch_of_a_worktree_whose_directory_is_gone_says_it_forgot_that_worktree(
        forked: tuple[Path, Path]) -> None:
    """``branch -f attempt-2 main`` after ``rm -rf wt/attempt-2`` deleted that worktree's HEAD and said nothing (only
    ``branch -d`` reported it): a worktree moved away and back found itself on no branch."""
    root, wts = forked
    (root / "a.txt").write_text("moved on\n")
    assert cli(root, "snapshot", "-m", "two")[0] == 0
    shutil.rmtree(wts / "attempt-2")
    code, out, err = cli(root, "branch", "-f", "attempt-2", "main")
    assert code == 0, err
    assert "warning: forgot the worktree 'attempt-2'" in err and "is gone" in err, err
    assert "attempt-2" not in _heads(root)


def test_switching_onto_the_branch_of_a_worktree_whose_directory_is_gone_says_it_forgot_that_worktree(
        forked: tuple[Path, Path]) -> None:
    root, wts = forked
    shutil.rmtree(wts / "attempt-2")
    code, out, err = cli(root, "switch", "attempt-2")
    assert code == 0, err
    assert "warning: forgot the worktree 'attempt-2'" in err, err
    assert "attempt-2" not in _heads(root)
    code, out, err = cli(root, "switch", "main")
    assert code == 0 and "forgot" not in err, err


def test_the_python_api_never_forgets_a_worktree_without_saying_so(forked: tuple[Path, Path]) -> None:
    """``Repo.create_branch(force=True)`` without a ``notes`` list to say it in leaves the worktree's HEAD alone."""
    from agentsnap_core import Repo

    root, wts = forked
    (root / "a.txt").write_text("moved on\n")
    assert cli(root, "snapshot", "-m", "two")[0] == 0
    shutil.rmtree(wts / "attempt-2")
    repo = Repo.open(root)
    repo.create_branch("attempt-2", "main", force=True)
    assert "attempt-2" in _heads(root)
    notes: list[str] = []
    repo.create_branch("attempt-2", "main~1", force=True, notes=notes)
    assert notes and "forgot the worktree 'attempt-2'" in notes[0]
    assert "attempt-2" not in _heads(root)


def test_deleting_the_only_name_of_unmerged_work_says_how_to_get_it_back(tmp_path: Path) -> None:
    """``branch -d feat`` of a branch whose snapshots no other branch has printed "deleted branch feat" and nothing
    else: the work was left only in the reflog, which no verb shows, and the id was not printed anywhere. Now the
    line gives the id (as git's "Deleted branch feat (was 1a2b3c4)") and a note says how to bring it back; deleting
    a branch whose tip another branch has says no more than the id."""
    root = new_work(tmp_path, {"a.txt": "a\n"})
    assert cli(root, "snapshot", "-m", "one")[0] == 0
    assert cli(root, "branch", "merged")[0] == 0
    assert cli(root, "switch", "-c", "feat")[0] == 0
    (root / "f.txt").write_text("feature work\n")
    tip = cli(root, "snapshot", "-m", "feature work")[1].strip()
    assert cli(root, "switch", "main")[0] == 0
    code, out, err = cli(root, "branch", "-d", "feat")
    assert code == 0 and out.strip() == f"deleted branch feat (was {tip[:12]})", out
    assert f"'agentsnap branch feat {tip[:12]}' brings it back" in err, err
    code, out, err = cli(root, "branch", "feat", tip[:12])
    assert code == 0, err
    code, out, err = cli(root, "branch", "-d", "merged")
    assert code == 0 and out.startswith("deleted branch merged (was ") and err == "", (out, err)
