"""Trees that real projects have: nested store names, -C, sparse files, in-tree virtualenvs."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from agentsnap_core import Repo
from agentsnap_core.format import content
from agentsnap_core.format.encoding import pack
from agentsnap_core.format.objects import Kind
from agentsnap_core.stores.base import RefUpdate
from trust_kit import cli, commit_tree, new_work


@pytest.fixture
def work(tmp_path: Path) -> Path:
    return new_work(tmp_path, {"a.txt": "one\n"})


def _commit_entries(root: Path, extra: list[list]) -> str:
    """A snapshot whose tree has ``extra`` entries added (what a crafted or foreign snapshot may hold)."""
    with Repo.open(root) as repo:
        entries = [list(e) for e in repo.world_entries("HEAD")]
    return commit_tree(root, entries + extra)


def test_agentsnap_as_any_path_component_is_refused(work: Path, tmp_path: Path) -> None:
    assert cli(work, "snapshot", "-m", "one")[0] == 0
    with Repo.open(work) as repo:
        blob = content.put_bytes(repo.objects, b'{"store": "/tmp/elsewhere", "worktree": "x"}\n')
    _commit_entries(work, [["sub", "d", 0o755, 0, ""], ["sub/.agentsnap", "f", 0o644, 45, blob]])
    code, _, err = cli(work, "restore", "HEAD", "--to", str(tmp_path / "copy"))
    assert code == 2 and "sub/.agentsnap" in err and "store" in err, err
    assert not (tmp_path / "copy" / "sub" / ".agentsnap").exists()


def test_a_nested_store_marker_in_the_tree_is_not_captured(work: Path, tmp_path: Path) -> None:
    (work / "sub").mkdir()
    (work / "sub" / ".agentsnap").write_text('{"store": "/tmp/elsewhere", "worktree": "x"}\n')
    (work / "sub" / "b.txt").write_text("b\n")
    code, _, err = cli(work, "snapshot", "-m", "nested")
    assert code == 0, err
    code, _, err = cli(work, "restore", "HEAD", "--to", str(tmp_path / "copy"))
    assert code == 0, err
    assert (tmp_path / "copy" / "sub" / "b.txt").exists() and not (tmp_path / "copy" / "sub" / ".agentsnap").exists()


def test_dash_C_init_creates_the_store_in_DIR(tmp_path: Path) -> None:
    target = tmp_path / "project"
    target.mkdir()
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    code, _, err = cli(elsewhere, "-C", str(target), "init")
    assert code == 0, err
    assert (target / ".agentsnap").is_dir() and not (elsewhere / ".agentsnap").exists()


def test_dash_C_restore_paths_resolve_against_DIR(work: Path, tmp_path: Path) -> None:
    (work / "docs").mkdir()
    (work / "docs" / "x.txt").write_text("old\n")
    assert cli(work, "snapshot", "-m", "one")[0] == 0
    (work / "docs" / "x.txt").write_text("new\n")
    (work / "a.txt").write_text("changed\n")
    code, _, err = cli(tmp_path, "-C", str(work), "restore", "HEAD", "--", "docs/x.txt")
    assert code == 0, err
    assert (work / "docs" / "x.txt").read_text() == "old\n"
    assert (work / "a.txt").read_text() == "changed\n"  # only the path asked for


def _allocated(p: Path) -> int:
    return os.stat(p).st_blocks * 512


def test_sparse_files_keep_their_holes(work: Path, tmp_path: Path) -> None:
    big = work / "disk.img"
    with open(big, "wb") as f:
        f.write(b"head")
        f.seek(64 * 1024 * 1024)
        f.write(b"tail")
    if _allocated(big) > 8 * 1024 * 1024:
        pytest.skip("this filesystem does not keep holes")
    assert cli(work, "snapshot", "-m", "sparse")[0] == 0
    code, _, err = cli(work, "restore", "HEAD", "--to", str(tmp_path / "copy"))
    assert code == 0, err
    copy = tmp_path / "copy" / "disk.img"
    assert copy.stat().st_size == big.stat().st_size
    with open(copy, "rb") as f:
        assert f.read(4) == b"head"
        f.seek(64 * 1024 * 1024)
        assert f.read() == b"tail"
    assert _allocated(copy) < 8 * 1024 * 1024, f"restored fully allocated: {_allocated(copy)} bytes"


def test_own_venv_with_links_outside_the_tree_restores(work: Path, tmp_path: Path) -> None:
    """The README's undo flow on a project with an in-tree .venv (bin/python -> /usr/bin/python3)."""
    (work / ".venv" / "bin").mkdir(parents=True)
    os.symlink(sys.executable, work / ".venv" / "bin" / "python")
    (work / ".venv" / "pyvenv.cfg").write_text("home = /usr/bin\n")
    assert cli(work, "snapshot", "-m", "before")[0] == 0
    (work / "a.txt").write_text("broken by the agent\n")
    code, _, err = cli(work, "restore", "HEAD")
    assert code == 0, err
    assert (work / "a.txt").read_text() == "one\n"
    assert os.readlink(work / ".venv" / "bin" / "python") == sys.executable
    code, _, err = cli(work, "restore", "HEAD", "--to", str(tmp_path / "copy"))
    assert code == 0, err
    code, out, err = cli(work, "fork", "-n", "1", "--worktrees", str(tmp_path / "wts"), "--json")
    assert code == 0, err
    assert os.readlink(tmp_path / "wts" / "attempt-1" / ".venv" / "bin" / "python") == sys.executable


def test_foreign_snapshot_with_links_outside_is_refused_everywhere(work: Path, tmp_path: Path) -> None:
    """A snapshot that was not taken of this tree (pulled, crafted) may not plant links outside it."""
    assert cli(work, "snapshot", "-m", "one")[0] == 0
    oid = _commit_entries(work, [["evil", "l", 0o777, 0, "/etc/passwd"]])
    with Repo.open(work) as repo:  # as if it came from another machine
        manifest = repo.manifest(oid)
        manifest["layers"]["world"]["process"] = {"cwd": "/home/someone/else", "host": "elsewhere", "pid": 1}
        foreign = repo.objects.put(Kind.MANIFEST, pack(manifest))
        repo.update_refs([RefUpdate("refs/heads/main", foreign, oid)], "pulled")
    code, _, err = cli(work, "restore", "HEAD")
    assert code == 2 and "outside" in err, err
    code, _, err = cli(work, "fork", "-n", "1", "--worktrees", str(tmp_path / "wts"))
    assert code == 2 and "outside" in err, err
    assert not os.path.lexists(tmp_path / "wts" / "attempt-1" / "evil")
    assert "attempt-1" not in cli(work, "branch")[1]  # refused before any branch was made
    code, _, err = cli(work, "restore", "HEAD", "--allow-external-symlinks")
    assert code == 0, err


def test_non_utf8_file_names_round_trip(work: Path, tmp_path: Path) -> None:
    """git handles such names (an archive unpacked from another system); so must snapshot and restore."""
    raw = os.fsencode(work)
    os.mkdir(raw + b"/d\xff")
    with open(raw + b"/d\xff/caf\xe9.txt", "wb") as f:
        f.write(b"latin-1 name\n")
    os.symlink(b"caf\xe9.txt", raw + b"/d\xff/link\xfe")
    code, _, err = cli(work, "snapshot", "-m", "names")
    assert code == 0, err
    code, out, err = cli(work, "status", "--json")
    assert code == 0 and '"clean": true' in out, out + err
    code, _, err = cli(work, "restore", "HEAD", "--to", str(tmp_path / "copy"))
    assert code == 0, err
    copy = os.fsencode(tmp_path / "copy")
    assert sorted(os.listdir(copy + b"/d\xff")) == [b"caf\xe9.txt", b"link\xfe"]
    with open(copy + b"/d\xff/caf\xe9.txt", "rb") as f:
        assert f.read() == b"latin-1 name\n"
    assert os.readlink(copy + b"/d\xff/link\xfe") == b"caf\xe9.txt"
