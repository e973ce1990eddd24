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


def test_a_tree_found_valid_is_not_checked_again_by_the_next_process(
    two_snapshots: tuple[Repo, str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tree's id is the hash of its bytes and a read re-hashes them: once found valid (under the same rules) it is
    valid whenever read again, so the next process's restore or status skips the per-entry checks."""
    repo, first, second = two_snapshots
    validations: list[int] = []
    real_validate = world.validate_entries
    monkeypatch.setattr(world, "validate_entries", lambda entries: validations.append(len(entries)) or real_validate(entries))
    repo.restore(first)
    repo.close()
    checked = len(validations)
    assert checked >= 1
    with Repo.open(repo.root) as again:  # a new process: nothing in memory
        again.restore(second)
        again.restore(first)
        assert len(validations) == checked + 1  # only `second`, never read before
    store_dir = repo.store_dir
    (store_dir / "valid-trees").write_text("rules 0\n" + (store_dir / "valid-trees").read_text().split("\n", 1)[1])
    with Repo.open(repo.root) as other_rules:  # found valid under other rules: checked again
        other_rules.restore(second)
        assert len(validations) == checked + 2


def test_a_hostile_tree_is_refused_every_time_it_is_read(tmp_path: Path) -> None:
    from agentsnap_core.errors import UnsafeSnapshot
    from agentsnap_core.format import content

    root = tmp_path / "work"
    root.mkdir()
    repo = Repo.init(root)
    bad = content.put_value(repo.objects, {"entries": [["../escape", "f", 0o644, 0, "0" * 64]], "v": world.TREE_FORMAT})
    for _ in range(2):
        repo._trees.clear()
        with pytest.raises(UnsafeSnapshot):
            repo.load_tree(bad)
    repo.close()
    with Repo.open(root) as again, pytest.raises(UnsafeSnapshot):
        again.load_tree(bad)


def test_restore_reads_each_file_content_it_writes_once(
    two_snapshots: tuple[Repo, str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The content a restore checks before touching anything is the content it writes: read (and decompressed and
    verified) once, not a second time when the file is written (a small file's block was decompressed twice)."""
    from agentsnap_core.format import content

    repo, first, _second = two_snapshots
    reads: list[str] = []
    real = content.iter_chunks
    monkeypatch.setattr(content, "iter_chunks", lambda store, ref: reads.append(ref) or real(store, ref))
    before = tree_fingerprint(repo.root)
    repo.restore(first)
    files = {e[4] for e in repo.world_entries(repo.get(first)) if e[1] == "f"}
    assert tree_fingerprint(repo.root) != before
    of_files = [ref for ref in reads if ref in files]
    assert of_files, "no file content was read"
    assert len(of_files) == len(set(of_files)), f"{len(of_files) - len(set(of_files))} file content(s) read twice"


def test_restore_beyond_the_keep_budget_reads_again_and_writes_the_same_files(
    two_snapshots: tuple[Repo, str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past RESTORE_KEEP_BYTES the content is read again when written: the tree is the same either way."""
    repo, first, second = two_snapshots
    repo.restore(first)
    expected = tree_fingerprint(repo.root)
    repo.restore(second)
    monkeypatch.setattr(world, "RESTORE_KEEP_BYTES", 0)
    repo.restore(first)
    assert tree_fingerprint(repo.root) == expected
