"""``agentsnap push REMOTE --delete NAME...``: branches and tags deleted on a remote, all or none.

Before, nothing could delete a branch on a remote: a team pushing each fork's attempts to a shared store kept every
``attempt-N`` there for good (no verb, and ``branch -d`` deletes only the local branch), and a tag pushed by mistake
stayed on the remote (``tag -d`` said so). Each test runs the real CLI in a subprocess, as a user does.
"""

from __future__ import annotations

import json
from pathlib import Path

from agentsnap_core import Repo
from agentsnap_core.stores import open_store
from trust_kit import cli, new_work, snapshots


def _team(tmp_path: Path) -> tuple[Path, str]:
    """A checkout with main, attempt-1, attempt-2 and tag v1 pushed to remote ``team``."""
    root = new_work(tmp_path, {"a.txt": "a\n"})
    snapshots(root, ["one"])
    url = (tmp_path / "team").as_uri()
    for args in (["fork", "-n", "2"], ["tag", "v1"], ["remote", "add", "team", url],
                 ["push", "team", "main", "attempt-1", "attempt-2", "v1"]):
        code, out, err = cli(root, *args)
        assert code == 0, (args, out, err)
    return root, url


def _remote_refs(url: str) -> dict[str, str]:
    store = open_store(url)
    try:
        return store.refs.list_refs("refs/")
    finally:
        store.close()


def test_push_delete_removes_the_remote_branches_and_their_tracking_refs_and_the_remote_reflog_keeps_them(
        tmp_path: Path) -> None:
    root, url = _team(tmp_path)
    before = _remote_refs(url)
    code, out, err = cli(root, "push", "team", "--delete", "attempt-1", "attempt-2")
    assert code == 0, (out, err)
    assert "2 ref(s) deleted" in out and "refs/heads/attempt-1: " in out, out
    after = _remote_refs(url)
    assert set(after) == {"refs/heads/main", "refs/tags/v1"}, after
    with Repo.open(root) as repo:  # this side's team/attempt-* went with them
        assert set(repo.refs.list_refs("refs/remotes/team/")) == {"refs/remotes/team/main"}
    store = open_store(url)
    try:  # the remote's reflog names what was deleted: its snapshots are not lost
        entry = store.refs.reflog("refs/heads/attempt-1")[0]
        assert entry.old == before["refs/heads/attempt-1"] and entry.new is None and "push --delete" in entry.message
    finally:
        store.close()
    code, out, err = cli(root, "fetch", "team")
    assert code == 0 and "attempt-1" not in out, (out, err)
    code, out, err = cli(root, "branch")
    assert "attempt-1" in out, out  # the local branches stay
    code, out, err = cli(tmp_path, "clone", url, str(tmp_path / "copy"))
    assert code == 0, err
    code, out, _ = cli(tmp_path / "copy", "branch")
    assert "attempt" not in out and "main" in out, out
    code, out, err = cli(root, "push", "team", "--delete", "v1", "--json")  # a tag, the same way
    assert code == 0 and json.loads(out)["updated"] == {"refs/tags/v1": [before["refs/tags/v1"], None]}, out
    assert json.loads(out)["delete"] is True
    assert set(_remote_refs(url)) == {"refs/heads/main"}


def test_a_name_the_remote_lacks_deletes_nothing(tmp_path: Path) -> None:
    root, url = _team(tmp_path)
    before = _remote_refs(url)
    code, out, err = cli(root, "push", "team", "--delete", "attempt-1", "atempt-2")
    assert code == 2 and "has no branch or tag named 'atempt-2'" in err and "nothing was deleted" in err, (out, err)
    assert err.count("\n") == 1 and "Traceback" not in err
    assert _remote_refs(url) == before


def test_delete_with_a_stale_lease_is_refused_and_deletes_nothing(tmp_path: Path) -> None:
    """A teammate pushed to attempt-1 since this side last fetched: with --force-with-lease the delete is refused
    (their work is not dropped from the remote's branches); without it the branch goes, as git's push --delete."""
    root, url = _team(tmp_path)
    mate = tmp_path / "mate"
    assert cli(tmp_path, "clone", url, str(mate))[0] == 0
    assert cli(mate, "switch", "attempt-1")[0] == 0
    theirs = snapshots(mate, ["their work"])[0]
    assert cli(mate, "push", "origin", "attempt-1")[0] == 0
    code, out, err = cli(root, "push", "team", "--delete", "--force-with-lease", "attempt-1", "attempt-2")
    assert code == 2 and "stale lease" in err and "nothing was deleted" in err, (out, err)
    assert _remote_refs(url)["refs/heads/attempt-1"] == theirs and "refs/heads/attempt-2" in _remote_refs(url)
    assert cli(root, "fetch", "team")[0] == 0
    code, out, err = cli(root, "push", "team", "--delete", "--force-with-lease", "attempt-1")
    assert code == 0, (out, err)
    assert "refs/heads/attempt-1" not in _remote_refs(url)


def test_delete_needs_a_remote_and_names(tmp_path: Path) -> None:
    root, url = _team(tmp_path)
    before = _remote_refs(url)
    for args in (["push", "--delete", "attempt-1"], ["push", "team", "--delete"]):
        code, out, err = cli(root, *args)
        assert code == 2 and "agentsnap push REMOTE --delete" in err and "Traceback" not in err, (args, out, err)
    assert _remote_refs(url) == before
