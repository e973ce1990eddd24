"""The commonest command lines (`[-C DIR] status|snapshot|restore|fork` in their plain forms) are answered without
click (agentsnap_core.cli.fast, issue 19): the same bytes on stdout and stderr and the same exit status as the click
application gives for the same tree and store, whatever the tree holds; anything else goes to click."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import tree_fingerprint

FAST = "from agentsnap_core.cli import run\nimport sys\nrun(sys.argv[1:])\n"
CLICK = "from agentsnap_core.cli.app import main\nimport sys\nmain(sys.argv[1:])\n"
LOADED = ("from agentsnap_core.cli import run\nimport sys, json\ntry:\n    run(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
          "print(json.dumps(sorted(sys.modules)))\n")


def both(cwd: Path, *args: str, twin: Path | None = None) -> tuple[tuple[int, str, str], tuple[int, str, str]]:
    """The fast path's (code, stdout, stderr) in ``cwd`` and click's in ``twin`` (default: the same directory)."""
    out = []
    for code, where in ((FAST, cwd), (CLICK, twin or cwd)):
        proc = subprocess.run([sys.executable, "-c", code, *args], cwd=where, capture_output=True, text=True, timeout=120,
                              env={**os.environ, "PYTHONIOENCODING": "utf-8"})
        out.append((proc.returncode, proc.stdout, proc.stderr))
    return out[0], out[1]


def masked(result: tuple[int, str, str]) -> tuple[int, str, str]:
    """Snapshot ids and times differ between two runs of a writing verb, and how many files the copied tree had to
    re-hash: compare the rest."""
    code, out, err = result
    out = re.sub(r"[0-9a-f]{64}|[0-9a-f]{12}", "<id>", out)
    out = re.sub(r'"time": [0-9.]+', '"time": <t>', out)
    out = re.sub(r'"hashed": [0-9]+', '"hashed": <n>', out)  # the copy's files have other inodes: re-hashed there
    return code, out, err


def agentsnap(cwd: Path, *args: str) -> None:
    subprocess.run([sys.executable, "-m", "agentsnap_core", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "work"
    (root / "sub").mkdir(parents=True)
    for i in range(6):
        (root / f"f{i}.txt").write_text(f"file {i}\n")
    (root / "sub" / "g.txt").write_text("g\n")
    agentsnap(root, "init")
    agentsnap(root, "snapshot", "-m", "first")
    return root


def changed(root: Path) -> None:
    (root / "f0.txt").write_text("changed\n")
    (root / "f1.txt").unlink()
    (root / "new.txt").write_text("new\n")
    os.chmod(root / "f2.txt", 0o600)
    (root / ".env").write_text("TOKEN=x\n")  # left out by the secrets policy: named on stderr
    (root / "caf\u00e9 \x1b[31mred\x1b[0m.txt").write_text("escape in a name\n")  # click strips ANSI off a terminal


@pytest.mark.parametrize("args", [["status"], ["status", "--json"]])
def test_fast_status_prints_what_click_prints(tree: Path, args: list[str]) -> None:
    fast, slow = both(tree, *args)
    assert fast == slow and fast[0] == 0
    changed(tree)
    fast, slow = both(tree, *args)
    assert fast == slow, (fast, slow)
    assert "new.txt" in fast[1] and ".env" in fast[1] + fast[2]
    if args[1:]:
        assert json.loads(fast[1])["world"]["deleted"] == ["f1.txt"]


def test_fast_status_with_dash_c_and_its_errors_match_click(tree: Path, tmp_path: Path) -> None:
    changed(tree)
    assert both(tmp_path, "-C", str(tree), "status") == both(tree, "status")
    assert both(tmp_path, "-C", "work", "status", "--json")[0] == both(tmp_path, "-C", "work", "status", "--json")[1]
    fast, slow = both(tmp_path, "status")  # no store here: one line, exit status 2
    assert fast == slow and fast[0] == 2 and fast[2].count("\n") == 1 and "agentsnap init" in fast[2]
    (tmp_path / "afile").write_text("x")
    fast, slow = both(tmp_path, "-C", "afile", "status")  # click's own usage error: the fast path leaves it to click
    assert fast == slow and fast[0] == 2
    fast, slow = both(tmp_path, "-C", str(tmp_path / "nowhere"), "status")
    assert fast == slow and fast[0] == 2


def test_fast_status_loads_no_click_and_other_forms_go_to_click(tree: Path) -> None:
    for args, click_expected in ((["status"], False), (["status", "--json"], False), (["-C", ".", "status"], False),
                                 (["status", "--help"], True), (["log"], True), (["status", "--jsn"], True)):
        proc = subprocess.run([sys.executable, "-c", LOADED, *args], cwd=tree, capture_output=True, text=True, timeout=120)
        loaded = set(json.loads(proc.stdout.splitlines()[-1]))
        assert ("click" in loaded) == click_expected, args


@pytest.mark.parametrize("as_json", [[], ["--json"]])
def test_fast_writing_verbs_print_what_click_prints(tree: Path, tmp_path: Path, as_json: list[str]) -> None:
    """snapshot, restore and fork on two copies of one store and tree: the fast path in one, click in the other."""
    changed(tree)
    twin = tmp_path / "twin"
    shutil.copytree(tree, twin, symlinks=True)
    for args in (["snapshot", "-m", "second"], ["snapshot"], ["snapshot", "--message", "third"],
                 ["restore", "HEAD~2"], ["fork", "-n", "3", "--prefix", "try"], ["fork", "main", "-n", "2"],
                 ["fork"], ["restore", "nosuch"], ["fork", "-n", "0"], ["fork", "--prefix", "a..b"]):
        fast, slow = both(tree, *args, *as_json, twin=twin)
        assert masked(fast) == masked(slow), (args, fast, slow)
        refused = args[-1] in ("nosuch", "0", "a..b")
        assert fast[0] == (2 if refused else 0) and (fast[2].count("\n") == 1 if refused else True), (args, fast)
    assert tree_fingerprint(tree) == tree_fingerprint(twin)
    fast, slow = both(tmp_path, "snapshot", "-m", "x", *as_json)  # no store: one line, exit status 2
    assert fast == slow and fast[0] == 2


def test_fast_path_leaves_other_forms_to_click(tree: Path) -> None:
    for args in (["snapshot", "--agent", "a"], ["snapshot", "-m", "a", "-m", "b"], ["snapshot", "-mx"],
                 ["restore", "HEAD", "--dry-run"], ["restore", "HEAD", "f0.txt"], ["fork", "-n", "x"],
                 ["fork", "--worktrees", "w"], ["snapshot", "--json", "-m", "x"], ["restore", "--", "HEAD"]):
        proc = subprocess.run([sys.executable, "-c", LOADED, *args], cwd=tree, capture_output=True, text=True, timeout=120)
        loaded = set(json.loads(proc.stdout.splitlines()[-1]))
        assert "click" in loaded and "agentsnap_core.cli.app" in loaded, args


def test_a_tree_snapshot_loads_neither_click_nor_the_object_state_codec(tree: Path) -> None:
    """The world hooks do not pull in agentsnap_core.format.snapshottable (pickle, uuid, decimal): only object
    captures use it."""
    for args in (["snapshot", "-m", "x"], ["restore", "HEAD~1"]):
        proc = subprocess.run([sys.executable, "-c", LOADED, *args], cwd=tree, capture_output=True, text=True, timeout=120)
        loaded = set(json.loads(proc.stdout.splitlines()[-1]))
        assert not loaded & {"click", "pickle", "agentsnap_core.format.snapshottable"}, (args, loaded & {"click", "pickle"})
