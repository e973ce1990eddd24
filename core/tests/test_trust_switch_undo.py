"""``switch`` as a git user runs it: the undo it prints gives back the branch and the work it left, and
``switch -c`` keeps the work in progress.

Reported (tried as a user): on ``main`` with edits not yet snapshotted, ``agentsnap switch other`` said "undo with:
agentsnap restore U". Running that while on ``other`` moved ``other`` (as ``git reset --hard``) onto the snapshot of
main's edits: the user stayed on ``other``, and ``other``'s own snapshots dropped out of its history (only the
reflog still had them). From a clean tree it printed "undo with: agentsnap restore <other's tip>" on ``main``, which
moved ``main`` onto ``other``'s work. And ``switch -c feat`` - what git users run to take their edits onto a new
branch - threw the edits out of the tree (into an undo snapshot), and ``switch main`` while on ``main`` did too.
"""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path

from agentsnap_core import Repo
from conftest import tree_fingerprint
from trust_kit import cli, new_work


def _run_undo(root: Path, out: str) -> None:
    """Run the command a switch printed after 'undo with: ' (its ``agentsnap`` steps, joined by ``&&``)."""
    assert "undo with: " in out, out
    for step in out.split("undo with: ", 1)[1].strip().split(" && "):
        args = shlex.split(step)
        assert args[0] == "agentsnap", step
        code, _, err = cli(root, *args[1:])
        assert code == 0, (step, err)


def _two_branches(tmp_path: Path) -> tuple[Path, str, str]:
    """``main`` at ``base``; ``other`` one snapshot further (``o1``, a file of its own)."""
    root = new_work(tmp_path, {"f.txt": "base\n", "keep.txt": "keep\n", "d/x.txt": "x\n"})
    base = cli(root, "snapshot", "-m", "base")[1].strip()
    assert cli(root, "branch", "other")[0] == 0
    assert cli(root, "switch", "other")[0] == 0
    (root / "o.txt").write_text("o1\n")
    o1 = cli(root, "snapshot", "-m", "o1")[1].strip()
    code, _, err = cli(root, "switch", "main")
    assert code == 0, err
    return root, base, o1


def _branches(root: Path) -> tuple[str | None, dict[str, str]]:
    with Repo.open(root) as repo:
        return repo.current_branch(), repo.branches()


def test_the_undo_a_switch_prints_brings_back_the_branch_and_the_work_it_replaced(tmp_path: Path) -> None:
    root, base, o1 = _two_branches(tmp_path)
    (root / "f.txt").write_text("work in progress\n")
    (root / "keep.txt").unlink()
    (root / "d" / "x.txt").unlink()
    (root / "d").rmdir()
    (root / "new.txt").write_text("new\n")
    os.chmod(root / "f.txt", 0o755)
    edited = tree_fingerprint(root)
    code, out, err = cli(root, "switch", "other")
    assert code == 0, err
    assert (root / "o.txt").read_text() == "o1\n" and not (root / "new.txt").exists()
    _run_undo(root, out)
    assert tree_fingerprint(root) == edited
    assert _branches(root) == ("main", {"main": base, "other": o1})  # (no branch moved: other keeps o1)
    st = json.loads(cli(root, "status", "--json")[1])
    assert st["world"]["modified"] == ["f.txt"] and st["world"]["added"] == ["new.txt"], st


def test_the_undo_of_a_switch_from_a_clean_tree_moves_no_branch(tmp_path: Path) -> None:
    root, base, o1 = _two_branches(tmp_path)
    code, out, err = cli(root, "switch", "other")
    assert code == 0, err
    assert out.strip().endswith("undo with: agentsnap switch main"), out
    _run_undo(root, out)
    assert _branches(root) == ("main", {"main": base, "other": o1})
    assert not (root / "o.txt").exists()


def test_switch_c_takes_the_work_in_progress_onto_the_new_branch(tmp_path: Path) -> None:
    root, base, o1 = _two_branches(tmp_path)
    (root / "f.txt").write_text("an experiment\n")
    (root / "try.txt").write_text("new\n")
    edited = tree_fingerprint(root)
    code, out, err = cli(root, "switch", "-c", "feat")
    assert code == 0, err
    assert "new branch feat" in out and "undo" not in out, out
    assert tree_fingerprint(root) == edited
    assert _branches(root) == ("feat", {"main": base, "other": o1, "feat": base})
    made = cli(root, "snapshot", "-m", "experiment")[1].strip()  # the work is now feat's
    with Repo.open(root) as repo:
        assert repo.branches()["feat"] == made and repo.manifest(made)["parents"] == [base]
        assert repo.branches()["main"] == base


def test_switch_to_the_branch_checked_out_keeps_the_work(tmp_path: Path) -> None:
    root, base, o1 = _two_branches(tmp_path)
    (root / "f.txt").write_text("work in progress\n")
    edited = tree_fingerprint(root)
    code, out, err = cli(root, "switch", "main")
    assert code == 0, err
    assert out.startswith("already on main"), out
    assert tree_fingerprint(root) == edited
    assert _branches(root) == ("main", {"main": base, "other": o1})
