"""A push to a place that holds no store creates one (docs/STORES.md) - and says so, so that a mistyped URL or path
is noticed before a teammate looks for the snapshots in the right one.

Reported: ``agentsnap push /srv/team-stor`` (a typo) printed the same lines as a push to the team's store and exited 0;
and a push of a branch with no snapshot yet created a store at the URL before refusing.
"""

from __future__ import annotations

from pathlib import Path

from trust_kit import cli, new_work


def test_a_push_that_creates_the_store_says_so_and_a_second_push_does_not(tmp_path: Path) -> None:
    root = new_work(tmp_path, {"a.txt": "one\n"})
    assert cli(root, "snapshot", "-m", "one")[0] == 0
    target = tmp_path / "team-stor"
    code, out, err = cli(root, "push", str(target))
    assert code == 0, err
    assert "held no store" in err and "created a new store" in err, err
    assert (target / "format.json").exists()
    code, out, err = cli(root, "push", str(target))
    assert code == 0 and "held no store" not in err, err


def test_a_push_with_nothing_to_send_creates_no_store(tmp_path: Path) -> None:
    root = new_work(tmp_path, {"a.txt": "one\n"})
    target = tmp_path / "team"
    code, out, err = cli(root, "push", str(target))
    assert code == 2 and "nothing to push" in err, err
    assert not target.exists()


def test_cloning_a_project_directory_names_the_store_inside_it(tmp_path: Path) -> None:
    """Reported with the above: ``agentsnap clone /path/to/project copy`` said "no agentsnap store found at or above
    '/path/to/project'; run 'agentsnap init' first" of a project that has one (in ``.agentsnap``), and only the
    exact path is ever looked at. Now the error names the store to use; a path with nothing says just that."""
    root = new_work(tmp_path, {"a.txt": "one\n"})
    assert cli(root, "snapshot", "-m", "one")[0] == 0
    code, out, err = cli(tmp_path, "clone", str(root), str(tmp_path / "copy"))
    assert code == 2 and f"its store is {root / '.agentsnap'}" in err and "at or above" not in err, err
    assert not (tmp_path / "copy").exists()
    code, out, err = cli(tmp_path, "clone", str(root / ".agentsnap"), str(tmp_path / "copy"))
    assert code == 0 and (tmp_path / "copy" / "a.txt").read_text() == "one\n", err
    code, out, err = cli(tmp_path, "clone", str(tmp_path / "nothing"), str(tmp_path / "copy2"))
    assert code == 2 and "no agentsnap store there" in err and "agentsnap init" not in err, err


def test_restore_to_or_worktrees_inside_the_store_are_refused(tmp_path: Path) -> None:
    """Reported with the above: ``agentsnap restore HEAD --to .agentsnap/x`` wrote the snapshot's files into the store
    directory, among its objects and worktree state."""
    root = new_work(tmp_path, {"a.txt": "one\n"})
    assert cli(root, "snapshot", "-m", "one")[0] == 0
    for args in (["restore", "HEAD", "--to", ".agentsnap/x"], ["fork", "-n", "1", "--worktrees", ".agentsnap/wt2"]):
        code, out, err = cli(root, *args)
        assert code == 2 and "inside the store" in err and "Traceback" not in err, (args, err)
    assert not (root / ".agentsnap" / "x").exists() and not (root / ".agentsnap" / "wt2").exists()
    assert cli(root, "branch")[1].split() == ["*", "main", cli(root, "log")[1].split()[0]]


def test_a_fetch_by_url_names_what_it_fetched_and_remote_branches_resolve_as_name_slash_branch(tmp_path: Path) -> None:
    """Reported with the above: ``agentsnap fetch /path/to/store`` (a URL, no remote name) said "1 snapshot(s)
    transferred" and made no ref: the snapshots fetched could not be named (and gc would reclaim them). It now lists
    the branches it fetched with their ids. And ``merge o/main`` after ``fetch o`` said "unknown snapshot" (only
    ``refs/remotes/o/main`` worked); ``o/main`` now resolves, as in git."""
    (tmp_path / "x").mkdir()
    other = new_work(tmp_path / "x", {"b.txt": "b\n"})
    assert cli(other, "snapshot", "-m", "theirs")[0] == 0
    assert cli(other, "push", str(tmp_path / "store"))[0] == 0
    theirs = cli(other, "log")[1].split()[0]
    root = new_work(tmp_path, {"a.txt": "one\n"})
    assert cli(root, "snapshot", "-m", "ours")[0] == 0
    code, out, err = cli(root, "fetch", str(tmp_path / "store"))
    assert code == 0 and f"main {theirs}" in err and "no remote-tracking refs" in err, err
    assert cli(root, "remote", "add", "o", str(tmp_path / "store"))[0] == 0
    assert cli(root, "fetch", "o")[0] == 0
    code, out, err = cli(root, "show", "o/main")
    assert code == 0 and theirs in out.splitlines()[0], (out, err)
