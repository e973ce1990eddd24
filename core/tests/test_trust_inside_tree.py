"""A directory inside the working tree is refused for worktrees (``fork --worktrees``) and for a store (``push``),
unless the tree's ignore rules leave it out.

On the code before this change ``agentsnap fork -n 2 --worktrees attempts`` (or ``.``), run in the project, made the
worktrees inside it: the project's status listed every attempt's files as its own additions, its next snapshot
captured them, and ``agentsnap restore HEAD`` there - making the tree its snapshot's - deleted the attempts' files
while their agents worked in them (the attempt's status then said its files were deleted), with nothing said.
``agentsnap push ./team`` likewise made the team's store in the tree: captured (its index mid-write) by the next
snapshot, and deleted by the next restore. The refusal tests fail there; the others (outside the tree, or in a
directory its ignore rules leave out, which neither its snapshots capture nor its restore touches) pass before and
after.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from trust_kit import cli, new_work


@pytest.mark.parametrize("where", ["attempts", ".", "sub/deeper"])
def test_worktrees_inside_the_tree_are_refused_and_nothing_is_made(tmp_path: Path, where: str) -> None:
    root = new_work(tmp_path, {"a.txt": "base\n", "sub/s.txt": "s\n"})
    assert cli(root, "snapshot", "-m", "base")[0] == 0
    code, out, err = cli(root, "fork", "-n", "2", "--worktrees", where)
    assert code == 2 and "Traceback" not in err, out + err
    assert "this working tree" in err and "choose a directory outside it" in err, err
    assert str(tmp_path / "work-attempts") in err
    if where != ".":
        assert f"a line '{where}/' in .agentsnapignore" in err, err
    assert "attempt" not in cli(root, "branch")[1]  # (no branch made)
    assert not (root / "attempts").exists() and not (root / "attempt-1").exists() and not (root / "sub/deeper").exists()
    code, out, _ = cli(root, "status")
    assert "nothing changed" in out, out


def test_worktrees_outside_the_tree_keep_their_work_through_a_restore_of_the_project(tmp_path: Path) -> None:
    root = new_work(tmp_path, {"a.txt": "base\n"})
    assert cli(root, "snapshot", "-m", "base")[0] == 0
    code, _, err = cli(root, "fork", "-n", "1", "--worktrees", "../work-attempts")
    assert code == 0, err
    attempt = tmp_path / "work-attempts" / "attempt-1"
    (attempt / "work.txt").write_text("the attempt's work\n")
    assert cli(root, "restore", "HEAD")[0] == 0
    assert (attempt / "work.txt").read_text() == "the attempt's work\n"


def test_an_ignored_directory_inside_the_tree_may_hold_worktrees(tmp_path: Path) -> None:
    root = new_work(tmp_path, {"a.txt": "base\n", ".agentsnapignore": "attempts/\n"})
    assert cli(root, "snapshot", "-m", "base")[0] == 0
    code, _, err = cli(root, "fork", "-n", "1", "--worktrees", "attempts")
    assert code == 0, err
    (root / "attempts" / "attempt-1" / "work.txt").write_text("the attempt's work\n")
    assert "nothing changed" in cli(root, "status")[1]
    assert cli(root, "restore", "HEAD")[0] == 0
    assert (root / "attempts" / "attempt-1" / "work.txt").read_text() == "the attempt's work\n"


@pytest.mark.parametrize("how", ["path", "named remote", "file url"])
def test_a_push_to_a_store_inside_the_tree_is_refused_and_nothing_is_made(tmp_path: Path, how: str) -> None:
    root = new_work(tmp_path, {"a.txt": "base\n"})
    assert cli(root, "snapshot", "-m", "base")[0] == 0
    target = {"path": "./team", "named remote": "t", "file url": (root / "sub" / "team").as_uri()}[how]
    if how == "named remote":
        assert cli(root, "remote", "add", "t", "./team")[0] == 0
    code, out, err = cli(root, "push", target)
    assert code == 2 and "Traceback" not in err, out + err
    assert "inside this working tree" in err and "choose a directory outside it" in err, err
    assert not (root / "team").exists() and not (root / "sub").exists()
    assert "nothing changed" in cli(root, "status")[1]


def test_a_store_pushed_into_an_ignored_directory_survives_a_restore(tmp_path: Path) -> None:
    root = new_work(tmp_path, {"a.txt": "base\n", ".agentsnapignore": "team/\n"})
    assert cli(root, "snapshot", "-m", "base")[0] == 0
    code, _, err = cli(root, "push", "./team")
    assert code == 0, err
    assert "nothing changed" in cli(root, "status")[1]
    assert cli(root, "restore", "HEAD")[0] == 0
    code, out, err = cli(tmp_path, "clone", (root / "team").as_uri(), "copy")
    assert code == 0, err
    assert (tmp_path / "copy" / "a.txt").read_text() == "base\n"


@pytest.mark.parametrize("where", ["old", "sub/old"])
def test_a_restore_to_a_directory_inside_the_tree_is_refused_and_nothing_is_made(tmp_path: Path, where: str) -> None:
    """``agentsnap restore HEAD~1 --to old`` in the project (to compare with an older version) made ``old/`` in it:
    the next snapshot captured the copy as the project's files and ``restore HEAD`` deleted it, as for worktrees."""
    root = new_work(tmp_path, {"a.txt": "base\n", "sub/s.txt": "s\n"})
    assert cli(root, "snapshot", "-m", "base")[0] == 0
    code, out, err = cli(root, "restore", "HEAD", "--to", where)
    assert code == 2 and "Traceback" not in err, out + err  # before: exit 0, the copy made inside the tree
    assert "restore --to" in err and "this working tree" in err and f"a line '{where}/' in .agentsnapignore" in err, err
    assert not (root / where).exists()
    assert "nothing changed" in cli(root, "status")[1]


def test_a_restore_to_an_ignored_directory_or_outside_the_tree_is_made(tmp_path: Path) -> None:
    root = new_work(tmp_path, {"a.txt": "base\n", ".agentsnapignore": "compare/\n"})
    assert cli(root, "snapshot", "-m", "base")[0] == 0
    for where in ("compare/v1", str(tmp_path / "elsewhere")):
        code, out, err = cli(root, "restore", "HEAD", "--to", where)
        assert code == 0, err
        assert (Path(root / where) / "a.txt").read_text() == "base\n"
