"""A restore's undo is the last snapshot itself when nothing changed since it (issue 19: restore's cost).

Every in-place restore first snapshots the state it is about to replace (``refs/undo/restore``). When that state is
exactly the last snapshot's - the same tree, trace and every other layer - a copy of it adds nothing but a manifest,
an index row and a flush: ``refs/undo/restore`` then names the last snapshot, and ``agentsnap restore <undo>`` gives
the same state back. Whenever anything differs (a file, the trace, a secret file the vault keeps per snapshot), the
undo snapshot is made as before.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from agentsnap_core import Repo
from conftest import tree_fingerprint
from trust_kit import cli


def _cli_env(root: Path, env: dict[str, str], *args: str) -> tuple[int, str, str]:
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "agentsnap_core", *args], cwd=root, capture_output=True, text=True,
                          timeout=300, env=env)
    return proc.returncode, proc.stdout, proc.stderr


def _make(root: Path) -> tuple[Path, str, str]:
    """Two snapshots, 3 files apart, taken through the CLI while the test runs (not in a fixture: pytest's
    PYTEST_CURRENT_TEST differs between a fixture's setup and the test's call, so the environment layer would
    differ, and rightly no undo would then be the last snapshot)."""
    root.mkdir()
    for i in range(6):
        (root / f"f{i}.txt").write_text(f"first {i}\n")
    assert cli(root, "init")[0] == 0
    first = json.loads(cli(root, "snapshot", "-m", "first", "--json")[1])["id"]
    for i in range(3):
        (root / f"f{i}.txt").write_text(f"second {i}\n")
    second = json.loads(cli(root, "snapshot", "-m", "second", "--json")[1])["id"]
    return root, first, second


def _count(root: Path) -> int:
    """Snapshots in the store's index (undo snapshots included)."""
    with Repo.open(root) as repo:
        return len(repo.refs.list_snapshots())


def test_restore_from_the_unchanged_last_snapshot_makes_no_copy_of_it(tmp_path: Path) -> None:
    root, first, second = _make(tmp_path / "work")
    before_tree, before_count = tree_fingerprint(root), _count(root)
    code, out, err = cli(root, "restore", first, "--json")
    assert code == 0, err
    res = json.loads(out)
    assert res["undo"] == second  # the state replaced is exactly the snapshot the branch was at
    with Repo.open(root) as repo:
        assert repo.refs.get_ref("refs/undo/restore") == second
    assert _count(root) == before_count, "an undo snapshot equal to the last one was stored"
    code, _, err = cli(root, "restore", res["undo"])  # and undoing gives the replaced state back
    assert code == 0, err
    assert tree_fingerprint(root) == before_tree


@pytest.mark.parametrize("change", ["file", "new file", "mode", "trace"])
def test_any_change_since_the_last_snapshot_gets_its_own_undo_snapshot(tmp_path: Path, change: str) -> None:
    root, first, second = _make(tmp_path / "work")
    if change == "file":
        (root / "f5.txt").write_text("edited, never snapshotted\n")
    elif change == "new file":
        (root / "new.txt").write_text("made, never snapshotted\n")
    elif change == "mode":
        os.chmod(root / "f5.txt", 0o600)
    else:
        with Repo.open(root) as repo:
            repo.append_message("user", "said after the snapshot")
    before_tree = tree_fingerprint(root)
    code, out, err = cli(root, "restore", first, "--json")
    assert code == 0, err
    undo = json.loads(out)["undo"]
    assert undo not in (first, second)
    with Repo.open(root) as repo:
        assert repo.manifest(undo)["parents"] == [second]
        assert repo.manifest(undo)["meta"]["undo_of"] == first
        messages = repo.read_layer(undo, "trace")
    assert ([m.get("content") for m in messages or []] == ["said after the snapshot"]) == (change == "trace")
    assert cli(root, "restore", undo)[0] == 0
    assert tree_fingerprint(root) == before_tree


def test_an_unchanged_secret_file_the_vault_keeps_lets_the_last_snapshot_be_the_undo(tmp_path: Path) -> None:
    """The vault of the last snapshot holds the left-out secret file exactly as it is (same inode, size and times):
    restoring that snapshot brings back the same file, so it is the undo (trees with a key file, e.g. the stdlib's
    test certificates, are the common case)."""
    root, first, _second = _make(tmp_path / "work")
    (root / ".env").write_text("TOKEN=one\n")
    os.utime(root / ".env", (1_600_000_000, 1_600_000_000))  # (sealed well after it was written: not racily clean)
    import time

    time.sleep(0.25)  # (its ctime too: past the racy window before the seal)
    at_env = json.loads(cli(root, "snapshot", "-m", "with .env", "--json")[1])["id"]
    code, out, err = cli(root, "restore", first, "--json")
    assert code == 0, err
    assert json.loads(out)["undo"] == at_env
    assert cli(root, "restore", at_env)[0] == 0
    assert (root / ".env").read_text() == "TOKEN=one\n"


def test_a_secret_file_changed_since_gets_its_own_undo_snapshot(tmp_path: Path) -> None:
    """The vault keeps a left-out secret file's content per snapshot: the last snapshot's copy may be older."""
    root, first, _second = _make(tmp_path / "work")
    (root / ".env").write_text("TOKEN=one\n")
    at_env = json.loads(cli(root, "snapshot", "-m", "with .env", "--json")[1])["id"]
    (root / ".env").write_text("TOKEN=two\n")  # changed since: only the vault would know
    code, out, err = cli(root, "restore", first, "--json")
    assert code == 0, err
    undo = json.loads(out)["undo"]
    assert undo != at_env
    assert cli(root, "restore", undo)[0] == 0
    assert (root / ".env").read_text() == "TOKEN=two\n"


def test_switch_from_an_unchanged_branch_leaves_that_branch_where_it_was(tmp_path: Path) -> None:
    root, first, second = _make(tmp_path / "work")
    assert cli(root, "branch", "old", first)[0] == 0
    code, _, err = cli(root, "switch", "old")
    assert code == 0, err
    with Repo.open(root) as repo:
        assert repo.refs.get_ref("refs/heads/main") == second
        assert repo.current_branch() == "old"
        assert repo.refs.get_ref("refs/undo/restore") == second


def test_a_restore_run_from_another_environment_still_names_the_unchanged_last_snapshot(tmp_path: Path) -> None:
    """The environment a snapshot records is that of the process that took it (diff shows it; no restore sets it):
    a restore from another shell (its PWD, OLDPWD, _ differ) replaces the same state, so the last snapshot is its
    undo. The files and trace are what is compared."""
    root, first, second = _make(tmp_path / "work")
    code, out, err = _cli_env(root, dict(os.environ, SOME_SHELL_VARIABLE="another shell"), "restore", first, "--json")
    assert code == 0, err
    assert json.loads(out)["undo"] == second


def test_switch_over_changes_not_snapshotted_names_the_undo_that_keeps_them(tmp_path: Path) -> None:
    """`switch` replaced the tree's unsnapshotted edits and said only "switched to other": the undo snapshot that
    keeps them was never named. It is now, as restore names it."""
    root, first, _second = _make(tmp_path / "work")
    assert cli(root, "branch", "other", first)[0] == 0
    (root / "f5.txt").write_text("edited, never snapshotted\n")
    edited = tree_fingerprint(root)
    code, out, err = cli(root, "switch", "other")
    assert code == 0, err
    assert "undo with: agentsnap switch main && agentsnap restore " in out, out
    undo = out.rsplit("agentsnap restore ", 1)[1].split()[0]
    assert cli(root, "switch", "main")[0] == 0
    assert cli(root, "restore", undo, "--", ".")[0] == 0
    assert tree_fingerprint(root) == edited
