"""A restore changes what a read-only directory holds, as the user it runs as can (not only as root).

Met as a user (not root): ``chmod -R a-w vendor/`` (a vendored dependency, generated code kept read-only), an agent
then changes files there, and ``agentsnap restore HEAD`` stopped: "restore failed midway ([Errno 13] Permission
denied: 'vendor/b.txt'); the tree was rolled back" - no snapshot that touched the folder could be restored, although
its owner may make it writable. The restore now opens each read-only directory it changes for its owner while it
works, and leaves it with the snapshot's mode (or its own, where the snapshot has it so). A directory the user may
not chmod (another user's) is refused before anything is changed.

The CI machine runs as root, which writes through any mode: there the CLI runs with the capabilities that let root
ignore modes dropped (``setpriv``), so it meets the permissions a user meets.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from trust_kit import new_work

DROP = "-dac_override,-dac_read_search,-fowner"


def as_a_user(root: Path, *args: str) -> tuple[int, str, str]:
    """The real CLI in ``root``, as a process that file modes bind (root without its override capabilities)."""
    cmd = [sys.executable, "-m", "agentsnap_core", *args]
    if os.geteuid() == 0:
        if not shutil.which("setpriv"):
            pytest.fail("setpriv (util-linux) is needed to run the CLI under file modes as root")
        cmd = ["setpriv", f"--inh-caps={DROP}", f"--bounding-set={DROP}", "--", *cmd]
    proc = subprocess.run(cmd, cwd=root, capture_output=True, text=True, timeout=300)
    return proc.returncode, proc.stdout, proc.stderr


def _mode(p: Path) -> int:
    return stat.S_IMODE(os.lstat(p).st_mode)


def _tree(root: Path) -> dict[str, tuple[int, bytes | None]]:
    return {p.relative_to(root).as_posix(): (_mode(p), p.read_bytes() if p.is_file() else None)
            for p in sorted(root.rglob("*")) if ".agentsnap" not in p.parts}


def test_a_restore_changes_what_read_only_directories_hold_and_leaves_their_modes(tmp_path: Path) -> None:
    root = new_work(tmp_path, {"vendor/a.txt": "v1\n", "vendor/deep/d.txt": "d\n", "frozen/f.txt": "f1\n", "main.txt": "x\n"})
    (root / "frozen").chmod(0o555)  # read-only in the snapshot too
    code, out, err = as_a_user(root, "snapshot", "-m", "one")
    assert code == 0, err
    snap = out.strip()
    before = _tree(root)
    # the agent's changes, then the folders made read-only (the snapshot has vendor/ writable)
    (root / "vendor" / "a.txt").write_text("v2\n")
    (root / "vendor" / "b.txt").write_text("new\n")
    shutil.rmtree(root / "vendor" / "deep")
    (root / "vendor").chmod(0o555)
    (root / "frozen").chmod(0o755)
    (root / "frozen" / "f.txt").write_text("f2\n")
    (root / "frozen" / "g.txt").write_text("g\n")
    (root / "frozen").chmod(0o555)
    damaged = _tree(root)

    code, out, err = as_a_user(root, "restore", snap)
    assert code == 0, err  # before: "restore failed midway ([Errno 13] Permission denied ...)", exit 2
    assert _tree(root) == before  # contents and modes: vendor/ 0755 as snapshotted, frozen/ still 0555
    undo = out.split("undo with: agentsnap restore ", 1)[1].split()[0]
    code, _, err = as_a_user(root, "restore", undo)
    assert code == 0, err
    assert _tree(root) == damaged  # the undo puts the read-only folders back as they were, contents included


@pytest.mark.skipif(os.geteuid() != 0, reason="needs a directory owned by another user (made as root)")
def test_a_read_only_directory_of_another_user_is_refused_before_anything_changes(tmp_path: Path) -> None:
    root = new_work(tmp_path, {"theirs/a.txt": "v1\n", "main.txt": "x\n"})
    code, out, err = as_a_user(root, "snapshot", "-m", "one")
    assert code == 0, err
    (root / "theirs" / "a.txt").write_text("v2\n")
    (root / "main.txt").write_text("y\n")
    os.chown(root / "theirs", 65534, 65534)
    (root / "theirs").chmod(0o555)
    try:
        code, out, err = as_a_user(root, "restore", out.strip())
        assert code == 2
        assert "cannot restore into 'theirs': the directory is read-only and not this user's to make writable" in err
        assert (root / "main.txt").read_text() == "y\n"  # nothing changed
    finally:
        os.chown(root / "theirs", 0, 0)
        (root / "theirs").chmod(0o755)
