"""A merge or a pull over a tree an interrupted restore left says that, and how to finish it.

A restore killed half-way leaves the tree part the target's, part as it was, and a note ``agentsnap status`` reads.
On the code before this change ``agentsnap merge`` and ``agentsnap pull`` refused such a tree with "the working tree
has changes since the last snapshot (0 trace message(s)); run 'agentsnap snapshot'": no change named, the cause
never said, and the advice (snapshot the half tree) the wrong way out. Now they name the restore cut short and the
restore that finishes it, which then says the temp file it removed, and the merge or pull goes through.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from agentsnap_core import Repo
from trust_kit import cli, new_work


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def _cut_short_restore(root: Path) -> tuple[str, Path]:
    """The state a restore of HEAD killed while it wrote ``a.txt`` leaves: its note, and its temp file."""
    with Repo.open(root) as repo:
        head = repo.head()[1]
        assert head is not None
        with pytest.raises(KeyboardInterrupt), repo.noting_restore(head, head, None):
            raise KeyboardInterrupt  # (the note stays, as after a kill)
    temp = root / f".agentsnap-tmp-{_dead_pid()}-a.txt"
    temp.write_text("half of a.txt")
    return head, temp


def _refused_then_finished(root: Path, verb: list[str], doing: str) -> None:
    head, temp = _cut_short_restore(root)
    code, out, err = cli(root, *verb)
    assert code != 0 and "Traceback" not in err, out + err
    assert f"a restore of {head[:12]} was interrupted" in err, err
    assert f"finish it with 'agentsnap restore {head[:12]}'" in err and f"before {doing}" in err, err
    assert "0 trace message(s)" not in err and "run 'agentsnap snapshot'" not in err, err
    code, _, err = cli(root, "restore", head[:12])
    assert code == 0 and "removed the temp file(s) an interrupted restore had left" in err, err
    assert not temp.exists()
    code, out, err = cli(root, *verb)
    assert code == 0, out + err


def test_a_pull_over_an_interrupted_restore_says_it_and_how_to_finish_it(tmp_path: Path) -> None:
    root = new_work(tmp_path, {"a.txt": "a\n"})
    team = (tmp_path / "team").as_uri()
    assert cli(root, "remote", "add", "origin", team)[0] == 0
    assert cli(root, "snapshot", "-m", "base")[0] == 0 and cli(root, "push")[0] == 0
    code, _, err = cli(tmp_path, "clone", team, "mate")
    assert code == 0, err
    (tmp_path / "mate" / "b.txt").write_text("the mate's file\n")
    assert cli(tmp_path / "mate", "snapshot", "-m", "mate")[0] == 0 and cli(tmp_path / "mate", "push")[0] == 0
    _refused_then_finished(root, ["pull"], "pulling")
    assert (root / "b.txt").read_text() == "the mate's file\n"


@pytest.mark.parametrize("fast_forward", [True, False])
def test_a_merge_over_an_interrupted_restore_says_it_and_how_to_finish_it(tmp_path: Path, fast_forward: bool) -> None:
    root = new_work(tmp_path, {"a.txt": "a\n"})
    assert cli(root, "snapshot", "-m", "base")[0] == 0
    assert cli(root, "branch", "side")[0] == 0 and cli(root, "switch", "side")[0] == 0
    (root / "b.txt").write_text("side's file\n")
    assert cli(root, "snapshot", "-m", "side")[0] == 0 and cli(root, "switch", "main")[0] == 0
    if not fast_forward:
        (root / "c.txt").write_text("main's file\n")
        assert cli(root, "snapshot", "-m", "main")[0] == 0
    _refused_then_finished(root, ["merge", "side"], "merging")
    assert (root / "b.txt").read_text() == "side's file\n"


def test_a_pull_into_a_checkout_cut_short_says_so_not_snapshot_the_files(tmp_path: Path) -> None:
    """A clone killed while it wrote its checkout leaves files and no snapshot on the branch; a pull there said
    'the working tree has files; snapshot them first': the half checkout recorded as the user's own work."""
    root = new_work(tmp_path, {"a.txt": "a\n", "b.txt": "b\n"})
    team = (tmp_path / "team").as_uri()
    assert cli(root, "snapshot", "-m", "base")[0] == 0 and cli(root, "push", team)[0] == 0
    copy = tmp_path / "copy"
    copy.mkdir()
    assert cli(copy, "init")[0] == 0 and cli(copy, "remote", "add", "origin", team)[0] == 0
    assert cli(copy, "fetch")[0] == 0
    with Repo.open(copy) as repo:
        theirs = repo.resolve("origin/main")
        with pytest.raises(KeyboardInterrupt), repo.noting_restore(theirs, None, None):
            (copy / "a.txt").write_text("a\n")  # (one file of two written, as a checkout killed half-way)
            raise KeyboardInterrupt
    code, out, err = cli(copy, "pull")
    assert code != 0 and "Traceback" not in err, out + err
    assert f"the checkout of {theirs[:12]} was interrupted" in err and "snapshot them first" not in err, err
    assert cli(copy, "restore", theirs[:12])[0] == 0
    assert (copy / "b.txt").read_text() == "b\n"
