"""An id whose snapshot was pruned and then reclaimed by gc says so, whatever command names it.

Reported: ``restore`` prints "undo with: agentsnap restore d6608ce7398c"; after ``agentsnap prune --keep-last 1`` (which
listed d6608ce7398c as pruned) and ``agentsnap gc --prune now``, ``agentsnap restore d6608ce7398c`` said "object
d6608ce7398c... is missing from the store; run 'agentsnap verify'" - as if the store were damaged; verify finds
nothing, since gc removed it on purpose. The full id said "unknown snapshot", as if it had never existed.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from trust_kit import cli, new_work, snapshots


def test_an_undo_id_pruned_then_reclaimed_is_said_to_be_pruned_not_missing(tmp_path: Path) -> None:
    root = new_work(tmp_path, {"a.txt": "one\n"})
    assert cli(root, "snapshot", "-m", "one")[0] == 0
    undos = []
    for i in range(2):
        (root / "a.txt").write_text(f"work {i}\n")
        code, out, err = cli(root, "restore", "HEAD")
        assert code == 0, err
        undos.append(re.search(r"undo with: agentsnap restore ([0-9a-f]+)", out).group(1))  # type: ignore[union-attr]
    code, out, err = cli(root, "prune", "--keep-last", "1")
    assert code == 0 and f"pruned {undos[0]}" in out, (out, err)
    assert cli(root, "gc", "--prune", "now")[0] == 0
    for verb in ("restore", "show", "diff"):
        code, out, err = cli(root, verb, undos[0])
        assert code == 2, (verb, out, err)
        assert f"snapshot {undos[0]} was pruned" in err, (verb, err)
        assert "verify" not in err and "missing" not in err and "Traceback" not in err, (verb, err)
    from agentsnap_core import Repo

    with Repo.open(root) as repo:
        full = repo.refs.snapshots_with_prefix(undos[0], limit=2)[0]
    code, out, err = cli(root, "restore", full)
    assert code == 2 and f"snapshot {undos[0]} was pruned" in err, err
    code, out, err = cli(root, "restore", undos[1])  # the newest undo was kept by the policy: it still works
    assert code == 0 and (root / "a.txt").read_text() == "work 1\n", err
    code, out, err = cli(root, "verify")
    assert code == 0, (out, err)


def test_log_marks_expired_and_pruned_snapshots_that_restore_would_refuse(tmp_path: Path) -> None:
    """``agentsnap expire X`` (or a prune that keeps X as a tombstone because a live snapshot descends from it):
    ``log`` listed X like any other, and ``restore X`` then refused it - nothing in the log said it was dead."""
    root = new_work(tmp_path, {"a.txt": "one\n"})
    ids = snapshots(root, ["one", "two", "three"])
    assert cli(root, "expire", ids[1])[0] == 0
    code, out, err = cli(root, "log")
    assert code == 0, err
    lines = out.splitlines()
    assert "[expired]" in lines[1] and ids[1][:12] in lines[1], out
    assert "[expired]" not in lines[0] and "[expired]" not in lines[2], out
    assert cli(root, "prune", "--keep-last", "1")[0] == 0  # 'one' stays as a tombstone: 'two' descends from it
    rows = json.loads(cli(root, "log", "--json")[1])
    assert [r.get("dead", "").split(" ")[0] for r in rows] == ["", "expired", "pruned"], rows
    code, out, err = cli(root, "restore", ids[0])
    assert code == 2 and "was pruned" in err, err


def test_fork_or_branch_from_an_expired_snapshot_is_refused_before_anything_is_made(tmp_path: Path) -> None:
    """``agentsnap fork X -n 2`` and ``branch b X`` of an expired snapshot made branches (exit 0) that could not be
    switched to or restored ("was expired ... cannot be restored"). A tag may still label it."""
    root = new_work(tmp_path, {"a.txt": "one\n"})
    code, one, err = cli(root, "snapshot", "-m", "one")
    assert code == 0, err
    (root / "a.txt").write_text("two\n")
    assert cli(root, "snapshot", "-m", "two")[0] == 0
    assert cli(root, "expire", one.strip())[0] == 0
    before = json.loads(cli(root, "branch", "--json")[1])
    for args in (["fork", one.strip()[:12], "-n", "2"], ["fork", one.strip()[:12], "-n", "1", "--worktrees",
                                                          str(tmp_path / "wt")], ["branch", "b", one.strip()[:12]]):
        code, out, err = cli(root, *args)
        assert code == 2 and "was expired" in err and "Traceback" not in err, (args, err)
    assert json.loads(cli(root, "branch", "--json")[1]) == before and not (tmp_path / "wt").exists()
    assert cli(root, "tag", "old", one.strip()[:12])[0] == 0
    code, out, err = cli(root, "fork", "-n", "1")  # a live HEAD forks as before
    assert code == 0, err
