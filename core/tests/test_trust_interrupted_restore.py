"""A restore cut short says so, and says how to finish it or go back.

On the code before this change, Ctrl-C in the middle of ``agentsnap restore A`` (or SIGTERM from a process manager,
SIGKILL from the OOM killer) left the working tree part A and part as it was, HEAD on the old snapshot, and said
"interrupted; the store is unchanged past the last completed step"; ``agentsnap status`` then listed A's files as
added by the user, with nothing saying a restore had stopped halfway. Each test below fails there (the last one,
that a restore that rolls itself back leaves no such note, for want of the note).

The interrupt is real: the CLI runs in its own process, and a ``sitecustomize`` sends the signal to that process
after the restore has put a set number of files in place (so the moment is the same on a slow machine).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from agentsnap_core import Repo

FILES = 60
AFTER = 20  # files put in place before the signal

SITE = """
import os, signal
_real, _count = os.replace, [0]
def _replace(src, dst, *a, **k):
    _real(src, dst, *a, **k)
    if ".agentsnap-tmp-" in os.fspath(src):
        _count[0] += 1
        if _count[0] == {after}:
            os.kill(os.getpid(), signal.{sig})
os.replace = _replace
"""


def _cli(root: Path, *args: str, site: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "AGENTSNAP_RESIDENT": "0"}
    if site is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(site), env.get("PYTHONPATH", "")])
    return subprocess.run([sys.executable, "-m", "agentsnap_core", *args], cwd=root, env=env, capture_output=True,
                          text=True, timeout=300)


def _files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and ".agentsnap" not in p.parts}


@pytest.fixture
def tree(tmp_path: Path) -> tuple[Path, str, str, dict[str, bytes]]:
    """A tree with snapshot A (FILES files) and snapshot B (other files), at B with an uncommitted edit."""
    root = tmp_path / "proj"
    (root / "d").mkdir(parents=True)
    for i in range(FILES):
        (root / "d" / f"f{i:03}.txt").write_text(f"A's file {i}\n" * 50)
    with Repo.init(root) as repo:
        a = repo.snapshot("A").id
        for p in (root / "d").iterdir():
            p.unlink()
        (root / "d" / "b.txt").write_text("B's only file\n")
        b = repo.snapshot("B").id
    (root / "d" / "b.txt").write_text("B's file, edited and never snapshotted\n")
    return root, a, b, _files(root)


def _site(tmp_path: Path, sig: str) -> Path:
    site = tmp_path / f"site-{sig}"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SITE.format(after=AFTER, sig=sig))
    return site


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM", "SIGKILL"])
def test_a_restore_cut_short_is_said_by_status_and_can_be_finished(tree, tmp_path: Path, sig: str) -> None:
    root, a, b, before = tree
    proc = _cli(root, "restore", a[:12], site=_site(tmp_path, sig))
    assert proc.returncode != 0, proc.stdout + proc.stderr
    if sig != "SIGKILL":  # the command itself says what it left, and both ways out (SIGTERM as Ctrl-C: exit 143)
        assert proc.returncode == (130 if sig == "SIGINT" else 143), proc.stderr
        assert f"interrupted in the middle of a restore of {a[:12]}" in proc.stderr, proc.stderr
        assert f"finish it with 'agentsnap restore {a[:12]}'" in proc.stderr
        assert not [p for p in root.rglob("*") if ".agentsnap-tmp-" in p.name]  # no half-written temp file left
    half = _files(root)
    assert 0 < sum(1 for p in half if p.startswith("d/f")) < FILES  # really cut short: part A, part as before

    st = _cli(root, "status")
    assert st.returncode == 0, st.stderr
    assert f"a restore of {a[:12]} was interrupted: the working tree is part {a[:12]}, part as before" in st.stdout
    undo = st.stdout.split("go back with 'agentsnap restore ", 1)[1].split("'", 1)[0]
    js = json.loads(_cli(root, "status", "--json").stdout)
    assert js["restore_interrupted"]["target"] == a and js["clean"] is False
    assert js["restore_interrupted"]["undo"].startswith(undo)
    with Repo.open(root) as repo:  # the Python API sees it too
        assert repo.status()["restore_interrupted"]["target"] == a
        assert repo.head()[1] == b  # the branch did not move

    done = _cli(root, "restore", a[:12])  # the way forward
    assert done.returncode == 0, done.stderr
    st = _cli(root, "status")
    assert "interrupted" not in st.stdout and "nothing changed" in st.stdout, st.stdout
    assert sorted(p for p in _files(root) if p.startswith("d/")) == [f"d/f{i:03}.txt" for i in range(FILES)]

    back = _cli(root, "restore", undo)  # and the way back: the tree before the first restore, the edit included
    assert back.returncode == 0, back.stderr
    assert _files(root) == before


def test_going_back_from_a_restore_cut_short_brings_back_the_uncommitted_work(tree, tmp_path: Path) -> None:
    root, a, b, before = tree
    assert _cli(root, "restore", a[:12], site=_site(tmp_path, "SIGKILL")).returncode == -signal.SIGKILL
    st = _cli(root, "status").stdout
    undo = st.split("go back with 'agentsnap restore ", 1)[1].split("'", 1)[0]
    assert _cli(root, "restore", undo).returncode == 0
    assert _files(root) == before
    assert "interrupted" not in _cli(root, "status").stdout


def test_a_snapshot_of_a_tree_left_half_restored_says_so(tree, tmp_path: Path) -> None:
    root, a, _b, _ = tree
    _cli(root, "restore", a[:12], site=_site(tmp_path, "SIGKILL"))
    snap = _cli(root, "snapshot", "-m", "as it is")
    assert snap.returncode == 0, snap.stderr  # (taken: a hook's protecting snapshot must never fail over this)
    assert f"note: this snapshot holds the tree as it is now; a restore of {a[:12]} was interrupted" in snap.stderr


def test_a_restore_that_fails_and_rolls_back_leaves_no_note(tree, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A failure the restore recovers from itself (a full disk: it rolls the tree back) is not an interrupted one."""
    root, a, _b, before = tree
    from agentsnap_core.errors import AgentSnapError
    from agentsnap_core.layers import world

    real = world.materialize
    calls = []

    def full_disk_once(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise OSError(28, "No space left on device")
        return real(*args, **kwargs)

    monkeypatch.setattr(world, "materialize", full_disk_once)
    with Repo.open(root) as repo:
        with pytest.raises(AgentSnapError, match="rolled back"):
            repo.restore(a)
        assert repo.restore_interrupted() is None and "restore_interrupted" not in repo.status()
    assert _files(root) == before


@pytest.mark.parametrize("fast_forward", [True, False])
def test_a_merge_cut_short_while_it_writes_the_tree_says_so_and_the_way_back_works(tmp_path: Path, fast_forward: bool) -> None:
    """``agentsnap merge`` writes the merged tree into a clean working tree, then moves the branch; cut short there,
    the tree was part merged with nothing said. Now status says so and names the snapshot the tree was."""
    root = tmp_path / "proj"
    (root / "d").mkdir(parents=True)
    (root / "main.txt").write_text("main\n")
    with Repo.init(root) as repo:
        base = repo.snapshot("base").id
        repo.fork(base, n=1)
        repo.switch("attempt-1")
        for i in range(FILES):
            (root / "d" / f"f{i:03}.txt").write_text(f"their file {i}\n" * 50)
        repo.snapshot("theirs")
        repo.switch("main")
        if not fast_forward:
            (root / "main.txt").write_text("main, changed on main\n")
            repo.snapshot("ours")
        ours = repo.head()[1]
    before = _files(root)
    proc = _cli(root, "merge", "attempt-1", site=_site(tmp_path, "SIGKILL"))
    assert proc.returncode == -signal.SIGKILL, proc.stdout + proc.stderr
    st = _cli(root, "status").stdout
    assert "merge of attempt-1" in st and "was interrupted" in st, st
    assert f"go back with 'agentsnap restore {ours[:12]}'" in st
    assert _cli(root, "restore", ours[:12]).returncode == 0
    assert _files(root) == before and "interrupted" not in _cli(root, "status").stdout
    again = _cli(root, "merge", "attempt-1")  # and the merge, run again, goes through
    assert again.returncode == 0, again.stderr
    assert len([p for p in _files(root) if p.startswith("d/")]) == FILES


def test_a_clone_cut_short_in_its_checkout_says_how_to_finish_it(tree, tmp_path: Path) -> None:
    """A clone writes the snapshot's tree into the new directory, then sets the branch; cut short there, the clone
    said 'no snapshot yet on this branch; run agentsnap snapshot first' - which would record the half tree as the
    first snapshot. Now status names the checkout and the restore that finishes it."""
    root, a, _b, _ = tree
    with Repo.open(root) as repo:
        repo.restore(a)
    want = _files(root)
    assert _cli(root, "push", (tmp_path / "team").as_uri()).returncode == 0
    proc = _cli(tmp_path, "clone", (tmp_path / "team").as_uri(), "copy", site=_site(tmp_path, "SIGKILL"))
    assert proc.returncode == -signal.SIGKILL, proc.stdout + proc.stderr
    copy = tmp_path / "copy"
    st = _cli(copy, "status").stdout
    assert f"the checkout of {a[:12]} was interrupted" in st and f"finish it with 'agentsnap restore {a[:12]}'" in st, st
    assert _cli(copy, "restore", a[:12]).returncode == 0
    assert _files(copy) == want and "interrupted" not in _cli(copy, "status").stdout


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
def test_a_fork_with_worktrees_cut_short_takes_itself_back(tree, tmp_path: Path, sig: str) -> None:
    """``fork -n 3 --worktrees DIR`` makes the branches, then fills one directory per fork. Stopped while it filled
    them, it left three branches, a half-written directory without its link to the store (``agentsnap -C`` there:
    'not an agentsnap tree') and two missing, and the same command run again made attempt-4..6. Now it takes itself
    back: no branch, no directory, and the command run again gives attempt-1..3."""
    root, a, _b, _ = tree
    tries = tmp_path / "tries"
    proc = _cli(root, "fork", a[:12], "-n", "3", "--worktrees", str(tries), site=_site(tmp_path, sig))
    assert proc.returncode == (130 if sig == "SIGINT" else 143), proc.stdout + proc.stderr
    assert "interrupted" in proc.stderr
    out = _cli(root, "branch").stdout
    assert "attempt" not in out, out
    assert not tries.exists()
    again = _cli(root, "fork", a[:12], "-n", "3", "--worktrees", str(tries))
    assert again.returncode == 0, again.stderr
    assert sorted(p.name for p in tries.iterdir()) == ["attempt-1", "attempt-2", "attempt-3"]
    for d in tries.iterdir():
        assert len(list((d / "d").iterdir())) == FILES and _cli(d, "status").returncode == 0


def test_a_fork_with_worktrees_that_fails_midway_takes_itself_back(tree, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same for a failure (a full disk while the second directory is filled): said, and nothing left behind."""
    root, a, _b, _ = tree
    from agentsnap_core.repository import repo as repo_mod

    def full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(repo_mod, "_clone_tree", full)
    (tmp_path / "tries").mkdir()  # there before (empty): stays, empty
    with Repo.open(root) as repo:
        with pytest.raises(OSError, match="No space"):
            repo.fork(a, n=2, worktrees=str(tmp_path / "tries"))
        assert not [b for b in repo.branches() if b.startswith("attempt")]
    assert list((tmp_path / "tries").iterdir()) == []


SITE_MID_FILE = """
import os, signal
_real, _count = os.replace, [0]
def _replace(src, dst, *a, **k):
    if ".agentsnap-tmp-" in os.fspath(src):
        _count[0] += 1
        if _count[0] == {after}:
            os.kill(os.getpid(), signal.SIGKILL)  # the 20th file written to its temp file, not yet in place
    _real(src, dst, *a, **k)
os.replace = _replace
"""


def test_the_temp_file_a_killed_restore_left_goes_when_a_restore_finishes_the_tree(tree, tmp_path: Path) -> None:
    """SIGKILL while a file is written leaves its temp file (``.agentsnap-tmp-PID-NAME``) in the tree: never
    captured by agentsnap, but git and the user see it. The restore that finishes the tree removes it."""
    root, a, _b, _ = tree
    site = tmp_path / "site-mid"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SITE_MID_FILE.format(after=AFTER))
    assert _cli(root, "restore", a[:12], site=site).returncode == -signal.SIGKILL
    left = [p for p in root.rglob("*") if p.name.startswith(".agentsnap-tmp-")]
    assert len(left) == 1  # (what the kill left)
    done = _cli(root, "restore", a[:12])
    assert done.returncode == 0, done.stderr
    assert "removed the temp file(s) an interrupted restore had left" in done.stderr  # (said, never silent)
    assert not [p for p in root.rglob("*") if p.name.startswith(".agentsnap-tmp-")]
    assert sorted(p for p in _files(root) if p.startswith("d/")) == [f"d/f{i:03}.txt" for i in range(FILES)]
