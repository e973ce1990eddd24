"""A directory moved elsewhere and linked back (``mv data /mnt/shared/data && ln -s /mnt/shared/data data``, what an
agent does to "free space" or share a cache) restores, and status does not call its files "still here".

The link's target holds the same names as the snapshot's directory. Before, the checks followed the link: status
said ``D data/f (still here, now ignored: the next snapshot leaves it out)`` - nothing ignores it, and it is not
in the tree - and ``agentsnap restore HEAD`` refused: "cannot restore 'data/f': something ignored here is in the way
... nothing was changed", so the snapshot could not be restored at all (nor ``restore HEAD -- data``). Both fail on
the code before this change. Nothing is ever written through the link.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from trust_kit import cli, new_work


@pytest.fixture
def moved(tmp_path: Path) -> tuple[Path, Path]:
    root = new_work(tmp_path, {"data/f": "inside\n", "data/g.csv": "1,2\n", "keep.txt": "k\n"})
    assert cli(root, "snapshot", "-m", "one")[0] == 0
    shared = tmp_path / "shared" / "data"
    shared.parent.mkdir()
    shutil.move(str(root / "data"), str(shared))
    (shared / "f").write_text("changed where it lives now\n")
    (root / "data").symlink_to(shared)
    return root, shared


def test_status_lists_the_link_and_the_files_gone_from_the_tree_not_still_here(moved) -> None:
    root, _shared = moved
    code, out, err = cli(root, "status")
    assert code == 0, err
    assert "still here" not in out + err, out + err
    assert {"A data", "D data/f", "D data/g.csv"} <= {line.strip() for line in out.splitlines()}, out


@pytest.mark.parametrize("paths", [[], ["--", "data"], ["--", "data/f"]])
def test_restore_puts_the_directory_back_in_place_of_the_link_and_leaves_the_target_alone(moved, paths) -> None:
    root, shared = moved
    code, out, err = cli(root, "restore", "HEAD", *paths)
    assert code == 0, (out, err)
    assert not (root / "data").is_symlink() and (root / "data" / "f").read_text() == "inside\n"
    assert (shared / "f").read_text() == "changed where it lives now\n"  # nothing written through the link
    assert sorted(p.name for p in shared.iterdir()) == ["f", "g.csv"]
    undo = out.split("undo with: agentsnap restore ", 1)[1].split()[0] if "undo with" in out else None
    if not paths:  # and the undo puts the link back
        assert undo and cli(root, "restore", undo)[0] == 0
        assert (root / "data").is_symlink() and (root / "data").resolve() == shared.resolve()
