"""In-place restore is all or nothing: objects are checked before the first file is touched, and a failure
midway rolls the tree back to the automatic undo snapshot, which the message names."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest
from agentsnap_core import Repo
from agentsnap_core.cli import main
from click.testing import CliRunner
from conftest import tree_fingerprint
from trust_kit import cli


@pytest.fixture
def work(tmp_path: Path) -> tuple[Path, str]:
    """A snapshot of 20 files, then every file changed in the working tree."""
    root = tmp_path / "work"
    root.mkdir()
    for i in range(20):
        (root / f"f{i:02}.txt").write_text(f"old {i}\n" * 100)
    assert cli(root, "init")[0] == 0
    code, out, _ = cli(root, "snapshot", "-m", "old", "--json")
    old = json.loads(out)["id"]
    for i in range(20):
        (root / f"f{i:02}.txt").write_text(f"new {i}\n")
    (root / "added.txt").write_text("made after the snapshot\n")
    return root, old


def _object_of(root: Path, spec: str, path: str) -> Path:
    with Repo.open(root) as repo:
        ref = {e[0]: e[4] for e in repo.world_entries(spec)}[path]
        return Path(repo.objects.loose_copy(ref))  # packed: its loose copy, which reads take first


def test_one_bad_object_leaves_the_tree_untouched(work: tuple[Path, str]) -> None:
    root, old = work
    obj = _object_of(root, old, "f15.txt")
    os.chmod(obj, 0o644)
    obj.write_bytes(obj.read_bytes()[:-3] + b"BAD")
    before = tree_fingerprint(root)
    code, _, err = cli(root, "restore", old)
    assert tree_fingerprint(root) == before, "a refused restore changed the working tree"
    assert code == 2 and err.count("\n") == 1 and "f15.txt" in err, err


def test_missing_object_leaves_the_tree_untouched(work: tuple[Path, str]) -> None:
    root, old = work
    with Repo.open(root) as repo:  # loose or packed
        repo.objects.delete({e[0]: e[4] for e in repo.world_entries(old)}["f15.txt"])
    before = tree_fingerprint(root)
    code, _, err = cli(root, "restore", old)
    assert tree_fingerprint(root) == before
    assert code == 2 and "f15.txt" in err, err


def test_failure_midway_rolls_back_to_the_undo_snapshot(work: tuple[Path, str], monkeypatch) -> None:
    root, old = work
    before = tree_fingerprint(root)
    real_replace, calls = os.replace, []

    def disk_full_on_the_fifth_file(src, dst, *a, **kw):
        if ".agentsnap-tmp-" in os.fspath(src) and str(root) in os.fspath(dst):
            calls.append(dst)
            if len(calls) == 5:
                raise OSError(errno.ENOSPC, "No space left on device", os.fspath(dst))
        return real_replace(src, dst, *a, **kw)

    monkeypatch.setattr(os, "replace", disk_full_on_the_fifth_file)
    monkeypatch.chdir(root)
    result = CliRunner().invoke(main, ["restore", old])
    monkeypatch.undo()
    assert result.exit_code == 2, result.output
    with Repo.open(root) as repo:
        undo = repo.refs.get_ref("refs/undo/restore")
    assert undo and undo[:12] in result.output and "rolled back" in result.output, result.output
    assert tree_fingerprint(root) == before, "the tree was left half old, half new"
