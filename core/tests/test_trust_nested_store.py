"""The store of a nested agentsnap tree, which a snapshot of the outer tree never holds, is said to be left out.

Reported: a project whose sub-directory ``sub`` is an agentsnap tree of its own (``sub/.agentsnap``). A snapshot of
the outer tree took ``sub``'s files and silently left out its store - rightly, as git leaves a nested repository's
``.git`` out, but git's case is said (``not captured: the .git of a nested git repository ...``) and this one was
not. After ``rm -rf sub`` and ``agentsnap restore HEAD`` the files came back, the nested tree's whole history did
not, and nothing said so.
"""

from __future__ import annotations

import json
from pathlib import Path

from trust_kit import cli, new_work


def test_a_nested_store_is_named_by_snapshot_and_status_and_a_restore_says_it_did_not_bring_it_back(
        tmp_path: Path) -> None:
    root = new_work(tmp_path, {"a.txt": "a\n", "sub/s.txt": "s\n"})
    assert cli(root / "sub", "init")[0] == 0
    assert cli(root / "sub", "snapshot", "-m", "inner")[0] == 0
    code, out, err = cli(root, "snapshot", "-m", "outer")
    assert code == 0, err
    assert "not captured: the store of a nested agentsnap tree (sub/.agentsnap)" in err, err
    code, out, err = cli(root, "status")
    assert "nothing changed" in out and "sub/.agentsnap" in err, (out, err)
    st = json.loads(cli(root, "status", "--json")[1])
    assert st["stores_not_captured"] == ["sub/.agentsnap"] and st["git_not_captured"] == [], st
    code, out, err = cli(root, "snapshot", "-m", "again", "--json")
    world = json.loads(out)["world"]
    assert world["stores_not_captured"] == ["sub/.agentsnap"] and world["git_not_captured"] == [], world
    import shutil

    shutil.rmtree(root / "sub")
    code, out, err = cli(root, "restore", "HEAD")
    assert code == 0, err
    assert (root / "sub" / "s.txt").read_text() == "s\n"
    assert "not brought back: sub/.agentsnap" in err, err


def test_a_fork_worktree_link_or_the_trees_own_store_is_not_called_nested(tmp_path: Path) -> None:
    root = new_work(tmp_path, {"a.txt": "a\n"})
    assert cli(root, "snapshot", "-m", "one")[0] == 0
    # a link file, wt/attempt-1/.agentsnap, inside the tree: fork refuses to make it there (test_trust_inside_tree.py),
    # an older version did not, and a user may move one in
    code, out, err = cli(root, "fork", "-n", "1", "--worktrees", str(tmp_path / "wt"))
    assert code == 0, err
    import shutil

    shutil.move(tmp_path / "wt", root / "wt")
    code, out, err = cli(root, "snapshot", "-m", "with the worktree inside")
    assert code == 0 and "nested agentsnap" not in err, err
