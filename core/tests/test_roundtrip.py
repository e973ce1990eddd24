"""World round trips on a real tree (a copy of site-packages)."""

from __future__ import annotations

import os
import time
from pathlib import Path

from agentsnap_core import Repo
from conftest import tree_fingerprint


def mutate(root: Path) -> None:
    files = sorted(p for p in root.rglob("*.py") if p.is_file() and not p.is_symlink())
    assert len(files) > 1000, "the real tree should have thousands of files"
    files[0].write_text(files[0].read_text() + "\n# edited by the test\n")  # edit
    files[1].unlink()  # delete
    (root / "added_dir").mkdir()
    (root / "added_dir" / "new.txt").write_text("added after the snapshot\n")  # add
    os.chmod(files[2], 0o755)  # chmod
    os.symlink("added_dir/new.txt", root / "a_new_link")  # symlink
    (root / "empty_new_dir").mkdir()


def test_site_packages_roundtrip_in_place(real_tree: Path) -> None:
    repo = Repo.init(real_tree)
    (real_tree / "empty_dir_in_snapshot").mkdir()
    os.symlink("does/not/exist", real_tree / "dangling_link")
    before = tree_fingerprint(real_tree)
    snap = repo.snapshot("base")
    assert snap.layers["world"]["files"] > 1000
    mutate(real_tree)
    assert tree_fingerprint(real_tree) != before
    repo.restore(snap.id)
    after = tree_fingerprint(real_tree)
    assert after == before
    assert not (real_tree / "added_dir").exists() and not (real_tree / "a_new_link").is_symlink()
    assert repo.verify()["ok"]


def test_site_packages_restore_to_new_dir(real_tree: Path, tmp_path: Path) -> None:
    repo = Repo.init(real_tree)
    before = tree_fingerprint(real_tree)
    snap = repo.snapshot("base")
    mutate(real_tree)
    target = tmp_path / "elsewhere"
    repo.restore(snap.id[:10], to=target)
    assert tree_fingerprint(target) == before
    assert tree_fingerprint(real_tree) != before  # --to leaves the working tree alone


def test_restore_then_undo_is_byte_identical(real_tree: Path) -> None:
    repo = Repo.init(real_tree)
    snap = repo.snapshot("base")
    mutate(real_tree)
    before_restore = tree_fingerprint(real_tree)
    result = repo.restore(snap.id)
    assert tree_fingerprint(real_tree) != before_restore
    repo.restore(result["undo"])
    assert tree_fingerprint(real_tree) == before_restore


def test_incremental_snapshot_rehashes_only_changed_files(real_tree: Path) -> None:
    repo = Repo.init(real_tree)
    time.sleep(0.3)  # let the copy's files age past the racy window (git's racy-clean rule)
    repo.snapshot("first")
    again = repo.snapshot("unchanged")
    # files just written by the copy are "racily clean" and may be re-read once; after that none
    third = repo.snapshot("unchanged again")
    assert third.layers["world"]["hashed"] == 0
    for p in sorted(real_tree.rglob("*.py"))[:10]:
        p.write_text(p.read_text() + "\n# touched\n")
    fourth = repo.snapshot("ten changed")
    assert fourth.layers["world"]["hashed"] == 10
    assert again.layers["world"]["tree"] == third.layers["world"]["tree"]


def test_symlink_is_stored_as_link_never_followed(repo: Repo, tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("secret outside the root")
    os.symlink(outside, repo.root / "out_link")
    snap = repo.snapshot("with link")
    entries = {e[0]: e for e in repo.world_entries(snap)}
    assert entries["out_link"][1] == "l" and entries["out_link"][4] == str(outside)
    # your own history restores its links pointing outside (a foreign tree needs an explicit opt-in:
    # test_trust_trees.py::test_foreign_snapshot_with_links_outside_is_refused_everywhere)
    target = tmp_path / "copy"
    repo.restore(snap.id, to=target)
    assert os.readlink(target / "out_link") == str(outside)


def test_ignored_paths_are_not_captured_nor_touched(repo: Repo) -> None:
    root = repo.root
    (root / ".agentsnapignore").write_text("*.log\nbuild/\n")
    (root / "keep.txt").write_text("keep")
    (root / "run.log").write_text("log v1")
    (root / "build").mkdir()
    (root / "build" / "out.bin").write_bytes(b"\x00\x01")
    (root / ".git").mkdir()
    (root / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    snap = repo.snapshot("s")
    paths = {e[0] for e in repo.world_entries(snap)}
    assert paths == {".agentsnapignore", "keep.txt"}
    (root / "run.log").write_text("log v2")
    (root / "keep.txt").unlink()
    repo.restore(snap.id)
    assert (root / "keep.txt").read_text() == "keep"
    assert (root / "run.log").read_text() == "log v2"
    assert (root / "build" / "out.bin").exists() and (root / ".git" / "HEAD").exists()


def test_trace_roundtrip_and_restore(repo: Repo) -> None:
    repo.append_message("user", "hello", id="u1")
    repo.append_message("assistant", "calling a tool", tool_calls=[{"id": "t1", "name": "search", "args": {"q": "x"}}])
    snap = repo.snapshot("with trace")
    repo.append_message("user", "later message")
    assert len(repo.messages()) == 3
    repo.restore(snap.id)
    msgs = repo.messages()
    assert [m["role"] for m in msgs] == ["user", "assistant"]
    assert msgs[1]["tool_calls"][0]["name"] == "search" and msgs[0]["id"] == "u1"
    assert repo.read_layer(snap, "trace") == msgs


def test_partial_restore_only_touches_given_paths(repo: Repo) -> None:
    (repo.root / "a.txt").write_text("a1")
    (repo.root / "b.txt").write_text("b1")
    snap = repo.snapshot("s")
    (repo.root / "a.txt").write_text("a2")
    (repo.root / "b.txt").write_text("b2")
    os.chdir(repo.root)
    repo.restore(snap.id, paths=["a.txt"])
    assert (repo.root / "a.txt").read_text() == "a1"
    assert (repo.root / "b.txt").read_text() == "b2"
