"""``agentsnap diff [A [B]] [-- PATH...]``: paths keep only the files at or below them, as ``git diff -- PATH`` does.

Reported: ``agentsnap diff -- src/app.py`` (what a git user types to see one file's change) said "unknown snapshot,
branch or tag: 'src/app.py'": diff took no paths, so a one-file question got either an error or the whole tree's diff.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from trust_kit import cli, new_work


def _work(tmp_path: Path) -> tuple[Path, str]:
    root = new_work(tmp_path, {"src/app.py": "a = 1\n", "src/util.py": "u = 1\n", "README": "hi\n"})
    code, out, err = cli(root, "snapshot", "-m", "one")
    assert code == 0, err
    for rel, text in (("src/app.py", "a = 2\n"), ("src/util.py", "u = 2\n"), ("README", "hello\n")):
        (root / rel).write_text(text)
    return root, out.strip()


def test_diff_with_paths_shows_only_those_files(tmp_path: Path) -> None:
    root, one = _work(tmp_path)
    code, out, err = cli(root, "diff", "--", "src/app.py")
    assert code == 0, err
    assert "+a = 2" in out and "util" not in out and "README" not in out, out
    code, out, err = cli(root, "diff", "HEAD", "src", "--stat")
    assert code == 0 and out.splitlines() == ["M src/app.py", "M src/util.py"], (out, err)
    code, out, err = cli(root / "src", "diff", "util.py", "--json")  # relative to where it runs, as in git
    assert code == 0, err
    assert json.loads(out)["layers"]["world"]["modified"] == ["src/util.py"]
    assert cli(root, "snapshot", "-m", "two")[0] == 0
    code, out, err = cli(root, "diff", one[:12], "HEAD", "README")
    assert code == 0 and "+hello" in out and "app" not in out, out


def test_a_path_in_neither_side_is_refused_and_a_bad_range_still_says_so(tmp_path: Path) -> None:
    root, _one = _work(tmp_path)
    code, out, err = cli(root, "diff", "--", "src/ap.py")
    assert code == 2 and "'src/ap.py' is neither a snapshot" in err and out == "", (out, err)
    code, out, err = cli(root, "diff", "HEAD~5", "--", "src")  # a known name with a range too long: said as such
    assert code == 2 and "no earlier snapshots" in err and "neither" not in err, err
    code, out, err = cli(root, "diff", "--layer", "trace", "--", "src")
    assert code == 2 and "paths name files" in err, err
    code, out, err = cli(root, "diff")  # no paths: the whole tree, as before
    assert code == 0 and all(name in out for name in ("app.py", "util.py", "README")), out


def test_a_path_through_a_link_in_the_tree_names_the_trees_path_not_where_the_link_points(tmp_path: Path) -> None:
    """An agent replaced the directory ``data/`` with a link to a directory elsewhere; the user asks what changed
    there and takes the snapshot's file back, as ``git diff -- data`` / ``git checkout HEAD -- data/f`` would.

    Before, the paths were read with every link followed: ``diff -- data`` and ``restore HEAD -- data/f`` both
    said "path ... is outside the working tree" (exit 2), so the one file could only come back by restoring the
    whole tree. Now ``data`` is the tree's path: the diff shows the link and the file gone, the restore puts the
    directory back in place of the link and writes nothing where the link pointed.
    """
    root = new_work(tmp_path, {"data/f": "inside\n", "keep.txt": "k\n"})
    assert cli(root, "snapshot", "-m", "one")[0] == 0
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (root / "data" / "f").unlink()
    (root / "data").rmdir()
    (root / "data").symlink_to(elsewhere)
    (root / "keep.txt").write_text("changed\n")
    code, out, err = cli(root, "diff", "--stat", "--", "data")
    assert code == 0, err
    assert out.splitlines() == ["A data", "D data/f"], out
    code, out, err = cli(root, "restore", "HEAD", "--", "data/f")
    assert code == 0, err
    assert not (root / "data").is_symlink() and (root / "data" / "f").read_text() == "inside\n"
    assert list(elsewhere.iterdir()) == []  # nothing written through the link
    assert (root / "keep.txt").read_text() == "changed\n"  # only the path asked for
    code, out, err = cli(root, "restore", "HEAD", "--", os.fspath(tmp_path / "elsewhere" / "x"))
    assert code == 2 and "outside the working tree" in err, (out, err)


def test_dot_names_the_whole_tree_as_in_git(tmp_path: Path) -> None:
    """``agentsnap diff -- .`` and ``agentsnap restore REV -- .`` (git's ``checkout REV -- .``: every file back as REV
    has it, the branch left where it is). Before, both said "give paths inside the tree, or omit them to restore
    everything" (exit 2), a diff too. Now ``.`` (or ``..`` from a subdirectory, at the top) is every path."""
    root = new_work(tmp_path, {"f": "one\n", "d/x": "x\n"})
    assert cli(root, "snapshot", "-m", "one")[0] == 0
    (root / "f").write_text("two\n")
    (root / "d" / "x").unlink()
    (root / "n").write_text("new\n")
    assert cli(root, "snapshot", "-m", "two")[0] == 0
    (root / "f").write_text("three\n")
    code, out, err = cli(root, "diff", "--stat", "--", ".")
    assert code == 0 and out.splitlines() == ["M f"], (out, err)
    code, out, err = cli(root / "d", "diff", "--stat", "HEAD~1", "--", "..")
    assert code == 0 and sorted(out.splitlines()) == ["A n", "D d/x", "M f"], (out, err)
    head = cli(root, "log")[1].splitlines()[0].split()[0]
    code, out, err = cli(root, "restore", "HEAD~1", "--", ".")
    assert code == 0, err
    assert (root / "f").read_text() == "one\n" and (root / "d" / "x").read_text() == "x\n" and not (root / "n").exists()
    assert cli(root, "log")[1].splitlines()[0].split()[0] == head  # the branch did not move
    (root / "f").write_text("unsaved\n")
    code, out, err = cli(root, "restore", "HEAD", "--", "")  # a script's unset "$FILE": never the whole tree
    assert code == 2 and "an empty path names nothing" in err, (out, err)
    assert (root / "f").read_text() == "unsaved\n"
