"""``agentsnap init --store-dir DIR``: a store outside the tree it keeps, so nothing done in the tree deletes it.

Before, a store lived only in ``<tree>/.agentsnap``: ``rm -rf`` of the project, ``find . -delete`` or
``git clean -ffdx`` - an agent's shell commands - deleted every snapshot with the files they were to bring back (the
Claude Code plugin kept its own store outside; no other user could). The CLI runs in a subprocess, as a user's does.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from trust_kit import cli


@pytest.fixture(autouse=True)
def _data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))  # (the registry of links: never the user's own)


def _tree(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    (root / "src").mkdir(parents=True)
    (root / "src" / "app.py").write_text("print('hi')\n")
    (root / ".gitignore").write_text("build/\n")
    (root / "build").mkdir()
    (root / "build" / "out.bin").write_bytes(b"\0" * 100)
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    return root


def test_a_store_outside_the_tree_survives_what_deletes_the_tree(tmp_path: Path) -> None:
    root, store = _tree(tmp_path), tmp_path / "keep" / "proj.store"
    code, out, err = cli(root, "init", "--store-dir", str(store))
    assert code == 0 and "outside the tree" in out, (out, err)
    assert (store / "format.json").is_file() and (root / ".agentsnap").is_file()
    code, out, _ = cli(root, "status", "--json")
    assert ".agentsnap" not in json.loads(out)["world"]["added"], out  # the link is not the tree's content
    assert subprocess.run(["git", "status", "--porcelain"], cwd=root, capture_output=True, text=True).stdout.find(
        ".agentsnap") < 0  # nor git's
    snap = cli(root, "snapshot", "-m", "before")[1].strip()

    subprocess.run(["git", "clean", "-ffdx", "-q"], cwd=root, check=True)  # untracked and ignored files, the link too
    shutil.rmtree(root / "src", ignore_errors=True)  # (git clean took it already: untracked in a repo with no commit)
    assert not (root / ".agentsnap").exists()
    code, out, err = cli(root, "status")
    assert code == 0 and "D src/app.py" in out, (out, err)
    assert "was gone" in err and "made again" in err, err  # the link, found through the registry and said
    assert cli(root, "restore", "HEAD")[0] == 0
    assert (root / "src" / "app.py").read_text() == "print('hi')\n" and (root / "build" / "out.bin").stat().st_size == 100

    shutil.rmtree(root)  # the whole project, as 'rm -rf proj' does, then made again by the user
    root.mkdir()
    code, out, err = cli(root, "restore", snap)
    assert code == 0, (out, err)
    assert (root / "src" / "app.py").is_file() and (root / ".gitignore").is_file()
    code, out, _ = cli(root, "log", "--json")
    assert [s["message"] for s in json.loads(out)][-1] == "before"


def test_init_again_links_the_same_store_and_a_moved_project_can_take_it_over(tmp_path: Path) -> None:
    root, store = _tree(tmp_path), tmp_path / "keep"
    assert cli(root, "init", "--store-dir", str(store))[0] == 0
    one = cli(root, "snapshot", "-m", "one")[1].strip()
    assert cli(root, "init", "--store-dir", str(store))[0] == 0  # again: nothing changes
    code, out, _ = cli(root, "log", "--json")
    assert [s["id"] for s in json.loads(out)] == [one]
    moved = tmp_path / "moved"
    root.rename(moved)  # the project moved: its link goes with it, its old place is gone
    code, out, err = cli(moved, "log", "--json")
    assert code == 0 and [s["id"] for s in json.loads(out)] == [one], (out, err)
    other = tmp_path / "other"
    other.mkdir()
    code, out, err = cli(other, "init", "--store-dir", str(store))  # a second tree while the first still links it
    assert code == 2 and "is the store of" in err and str(moved) in err, (out, err)
    root.mkdir()  # a new directory where the project was: not linked to the store that moved away
    code, out, err = cli(root, "status")
    assert code == 2 and "no agentsnap store found" in err, (out, err)
    shutil.copytree(moved, tmp_path / "copy", symlinks=True)  # a copy of the tree, link file included
    code, out, err = cli(tmp_path / "copy", "status")
    assert code == 2 and "a copy of that tree?" in err, (out, err)


@pytest.mark.parametrize("case", ["inside", "above", "own-store", "not-a-store"])
def test_a_store_dir_that_would_lose_or_mix_snapshots_is_refused(tmp_path: Path, case: str) -> None:
    root = _tree(tmp_path)
    store = {"inside": root / "snapshots", "above": tmp_path, "own-store": tmp_path / "s",
             "not-a-store": tmp_path / "photos"}[case]
    if case == "own-store":
        assert cli(root, "init")[0] == 0
    if case == "not-a-store":
        store.mkdir()
        (store / "holiday.jpg").write_bytes(b"jpg")
    before = sorted(p.name for p in root.iterdir())
    code, out, err = cli(root, "init", "--store-dir", str(store))
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, (case, out, err)
    assert sorted(p.name for p in root.iterdir()) == before  # no link made
    if case in ("inside", "not-a-store"):
        assert not (store / "format.json").exists()


def test_a_clone_can_keep_its_store_outside_too_and_a_failed_one_leaves_none(tmp_path: Path) -> None:
    root, team = _tree(tmp_path), tmp_path / "team.store"
    assert cli(root, "init")[0] == 0
    snap = cli(root, "snapshot", "-m", "shared")[1].strip()
    assert cli(root, "push", str(team), "main")[0] == 0
    copy, store = tmp_path / "copy", tmp_path / "stores" / "copy"
    code, out, err = cli(tmp_path, "clone", str(team), str(copy), "--store-dir", str(store))
    assert code == 0, (out, err)
    assert (copy / ".agentsnap").is_file() and (store / "format.json").is_file()
    assert (copy / "src" / "app.py").read_text() == "print('hi')\n"
    shutil.rmtree(copy)
    copy.mkdir()
    code, out, err = cli(copy, "restore", snap)
    assert code == 0 and (copy / "src" / "app.py").is_file(), (out, err)

    other = tmp_path / "stores" / "other"
    code, out, err = cli(tmp_path, "clone", str(team), str(tmp_path / "copy2"), "-b", "nope", "--store-dir",
                         str(other))
    assert code == 2 and not other.exists() and not (tmp_path / "copy2").exists(), (out, err)


def test_open_at_is_the_trees_own_store_never_one_further_up(tmp_path: Path) -> None:
    """``Repo.open_at(path)``, what adapters use before making a store at a path: the tree's own store, its link, or
    its store outside found through the registry once the link was deleted; None for a directory inside another
    tree (``Repo.open`` would return that tree's store)."""
    from agentsnap_core import Repo

    root = _tree(tmp_path)
    Repo.init(root, store_dir=tmp_path / "keep").close()
    assert Repo.open_at(root / "src") is None
    (root / ".agentsnap").unlink()
    repo = Repo.open_at(root)
    assert repo is not None and repo.store_dir == (tmp_path / "keep").resolve() and repo.relinked
    repo.close()
    assert Repo.open_at(tmp_path / "nowhere") is None
