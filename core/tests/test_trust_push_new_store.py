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
