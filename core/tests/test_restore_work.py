"""A restore does the work of what differs (issue 19): one walk of the working tree, one validation of the target
tree, and only the entries that differ are written; what is already as the target has it is left untouched."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from agentsnap_core import Repo
from agentsnap_core.layers import world
from conftest import tree_fingerprint


@pytest.fixture
def two_snapshots(tmp_path: Path) -> tuple[Repo, str, str]:
    """60 files in 3 directories; the second snapshot changes 5 files, adds 3 and deletes 2."""
    root = tmp_path / "work"
    for d in ("a", "b/c", "e"):
        (root / d).mkdir(parents=True)
    for i in range(60):
        (root / ("a", "b/c", "e")[i % 3] / f"f{i:02}.txt").write_text(f"file {i}\n" * 50)
    repo = Repo.init(root)
    first = repo.snapshot("first").id
    for i in range(5):
        (root / ("a", "b/c", "e")[i % 3] / f"f{i:02}.txt").write_text(f"changed {i}\n")
    for i in range(3):
        (root / "b" / f"new{i}.txt").write_text(f"new {i}\n")
    (root / "e" / "f59.txt").unlink()
    (root / "a" / "f57.txt").unlink()
    second = repo.snapshot("second").id
    return repo, first, second


def _file_stamps(root: Path) -> dict[str, tuple[int, int]]:
    out = {}
    for dp, dn, fn in os.walk(root):
        dn[:] = [d for d in dn if d != ".agentsnap"]
        for name in fn:  # (a directory's mtime moves when a file in it is added or removed)
            st = os.lstat(os.path.join(dp, name))
            out[os.path.relpath(os.path.join(dp, name), root)] = (st.st_ino, st.st_mtime_ns)
    return out


def test_restore_walks_the_tree_once_and_validates_the_target_once(
    two_snapshots: tuple[Repo, str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    repo, first, _second = two_snapshots
    scans: list[Path] = []
    validations: list[int] = []
    real_scan, real_validate = world.scan, world.validate_entries
    monkeypatch.setattr(world, "scan", lambda root, ignore: scans.append(root) or real_scan(root, ignore))
    monkeypatch.setattr(world, "validate_entries", lambda entries: validations.append(len(entries)) or real_validate(entries))
    repo._trees.clear()  # the target tree is read from the store, as by a fresh process
    repo.restore(first)
    assert len(scans) == 1, f"the working tree was walked {len(scans)} times"
    assert len(validations) == 1, f"the target tree was validated {len(validations)} times"


def test_restore_touches_only_what_differs(two_snapshots: tuple[Repo, str, str], tmp_path: Path) -> None:
    repo, first, second = two_snapshots
    root = repo.root
    before = _file_stamps(root)
    result = repo.restore(first)
    after = _file_stamps(root)
    ch = result["changes"]
    differing = set(ch["added"]) | set(ch["modified"]) | set(ch["mode"])
    assert len(differing) == 7 and len(ch["deleted"]) == 3, ch
    for path, stamp in after.items():
        if path not in differing:
            assert before.get(path) == stamp, f"{path} was rewritten though it did not differ"
    # and the tree is exactly the first snapshot (a fresh restore elsewhere is the reference)
    repo.restore(first, to=tmp_path / "ref")
    assert tree_fingerprint(root) == tree_fingerprint(tmp_path / "ref")
    repo.restore(second)
    repo.restore(second, to=tmp_path / "ref2")
    assert tree_fingerprint(root) == tree_fingerprint(tmp_path / "ref2")


def test_restore_still_fixes_a_directory_mode_and_keeps_the_undo(two_snapshots: tuple[Repo, str, str]) -> None:
    repo, first, _second = two_snapshots
    os.chmod(repo.root / "e", 0o700)
    repo.restore(first)
    recorded = {e[0]: e[2] for e in repo.world_entries(first)}
    assert os.lstat(repo.root / "e").st_mode & 0o777 == recorded["e"] != 0o700
    undo = repo.get("refs/undo/restore")
    assert {e[0]: e[2] for e in repo.world_entries(undo)}["e"] == 0o700  # the undo saw the tree as it was
    assert undo.manifest["meta"]["undo_of"] == first
