"""An empty name given where a snapshot, branch or tag is named is a mistake (a script's unset variable:
``agentsnap restore "$SNAP"``), never a silent HEAD or a silent listing.

Reported: ``agentsnap restore ""`` reset the working tree to HEAD, throwing away its changes (only the undo snapshot
kept them); ``show ""``, ``diff ""``, ``fork ""`` and ``restore "" --to DIR`` acted on HEAD; ``tag ""``, ``tag "" AT``,
``branch ""`` and ``branch -d`` without a name listed instead of refusing. git refuses them too. Each now exits 2 with
one line that says what was wrong, and the tree, refs and store are left as they were.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from agentsnap_core import Repo
from trust_kit import cli, new_work


@pytest.fixture
def work(tmp_path: Path) -> Path:
    root = new_work(tmp_path, {"a.txt": "one\n"})
    code, _, err = cli(root, "snapshot", "-m", "one")
    assert code == 0, err
    (root / "a.txt").write_text("one\nuncommitted work\n")
    return root


def _state(root: Path) -> tuple[str, str, str, str]:
    tags = cli(root, "tag")[1]
    branches = cli(root, "branch")[1]
    log = cli(root, "log", "--all")[1]
    return (root / "a.txt").read_text(), tags, branches, log


@pytest.mark.parametrize("args", [
    ["restore", ""], ["restore", "--dry-run", ""], ["show", ""], ["diff", ""], ["diff", "HEAD", ""],
    ["fork", "-n", "1", ""], ["log", ""], ["tag", "x", ""], ["branch", "b", ""],
], ids=lambda a: " ".join(repr(x) if x == "" else x for x in a))
def test_an_empty_snapshot_name_is_refused_and_nothing_changes(work: Path, args: list[str]) -> None:
    before = _state(work)
    code, out, err = cli(work, *args)
    assert code == 2, (code, out, err)
    assert "empty" in err and "Traceback" not in err, err
    assert _state(work) == before


def test_an_empty_name_restore_into_a_directory_writes_nothing(work: Path, tmp_path: Path) -> None:
    code, _, err = cli(work, "restore", "", "--to", str(tmp_path / "out"))
    assert code == 2 and "empty" in err, err
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


@pytest.mark.parametrize("args", [["tag", ""], ["tag", "", "HEAD"], ["branch", ""], ["branch", "", "HEAD"],
                                  ["branch", "-d"], ["branch", "-d", ""]],
                         ids=lambda a: " ".join(repr(x) if x == "" else x for x in a))
def test_an_empty_or_missing_tag_or_branch_name_is_refused_not_a_listing(work: Path, args: list[str]) -> None:
    before = _state(work)
    code, out, err = cli(work, *args)
    assert code == 2, (code, out, err)
    assert out == "" and "Traceback" not in err and err.startswith("agentsnap: error:"), err
    assert _state(work) == before


@pytest.mark.parametrize("args", [["remote", "add", "origin", ""], ["push", ""], ["pull", ""], ["clone", "", "out"],
                                  ["push", "   "]],
                         ids=lambda a: " ".join(repr(x) if x.strip() == "" else x for x in a))
def test_an_empty_remote_or_url_is_refused_not_this_directory_or_origin(work: Path, args: list[str]) -> None:
    """``remote add origin ""`` stored this very directory as the remote; ``push ""`` pushed to origin."""
    code, out, err = cli(work, *args)
    assert code == 2, (code, out, err)
    assert "empty" in err and "Traceback" not in err, err
    assert cli(work, "remote", "list")[1].strip() == ""


@pytest.mark.parametrize("to", [False, True], ids=["in-place", "to-dir"])
def test_a_restore_path_that_names_nothing_is_refused_and_nothing_is_touched(work: Path, tmp_path: Path,
                                                                           to: bool) -> None:
    """``restore HEAD -- nonexistent.txt`` said "restored" and did nothing (git: "pathspec did not match")."""
    before = _state(work)
    extra = ["--to", str(tmp_path / "out")] if to else []
    code, out, err = cli(work, "restore", "HEAD", "no-such-file.txt", *extra)
    assert code == 2, (code, out, err)
    assert "no-such-file.txt" in err and "matches nothing" in err, err
    assert _state(work) == before
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())
    with Repo.open(work) as repo:
        assert repo.refs.get_ref("refs/undo/restore") is None  # refused before the undo snapshot


def test_a_restore_path_only_in_the_working_tree_is_removed_as_before(work: Path) -> None:
    (work / "made-later.txt").write_text("not in the snapshot\n")
    code, _, err = cli(work, "restore", "HEAD", "made-later.txt")
    assert code == 0, err
    assert not (work / "made-later.txt").exists()
    code, _, err = cli(work, "restore", "HEAD", "a.txt")  # and a path in the snapshot, as before
    assert code == 0, err
    assert (work / "a.txt").read_text() == "one\n"


def test_a_name_beyond_the_start_of_history_says_the_history_is_shorter(work: Path) -> None:
    """``restore HEAD~5`` on a one-snapshot branch said "unknown snapshot, branch or tag: 'HEAD~5'", as for a typo;
    the name is right and the history shorter, and that is what it now says (still exit 2, nothing changed)."""
    before = _state(work)
    for spec, said in (("HEAD~1", "HEAD has no earlier snapshots"), ("main~3", "main has no earlier snapshots")):
        code, out, err = cli(work, "restore", spec)
        assert code == 2 and said in err and "unknown" not in err, err
    assert _state(work) == before
    code, out, err = cli(work, "restore", "nosuch~1")
    assert code == 2 and "unknown snapshot" in err, err


def test_a_tag_can_be_deleted_and_says_what_it_named(work: Path) -> None:
    """A tag put on the wrong snapshot could not be removed (no ``tag -d``; a tag is never moved, and ``push``
    refuses to overwrite one), so the mistake stayed forever. ``tag -d NAME`` deletes it and prints the id it named."""
    assert cli(work, "tag", "v1")[0] == 0
    head = cli(work, "log")[1].split()[0]
    code, out, err = cli(work, "tag", "-d", "v1")
    assert code == 0 and out.strip() == f"deleted tag v1 (was {head})", (out, err)
    assert cli(work, "tag")[1] == ""
    code, out, err = cli(work, "tag", "-d", "v1")
    assert code == 2 and "unknown" in err, err
