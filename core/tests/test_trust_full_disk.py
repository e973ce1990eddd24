"""A full disk (an agent's runaway log, a model download) must not lock the user out of their history.

Reported, on a 2 MiB tmpfs filled by a file in the tree:
- every verb failed, the reading ones too: ``log``, ``status``, ``show``, ``diff``, ``verify``, ``branch`` all said "the
  disk holding the store is full or failing (disk I/O error)" - SQLite cannot size the index's ``-shm`` file - so the
  user could not even look up which snapshot to restore (``git log`` works on a full disk);
- a verb that writes only the index (``branch NAME``, ``tag``, ``config``) then said "the store is read-only ...; run it
  as a user who can write the store";
- each try left a temp file behind: an empty ``valid-trees.tmpPID`` per reading command, and a partly written
  ``objects/xx/.tmp-...`` per failed snapshot or restore, holding on to the very space the user was freeing.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from agentsnap_core.testing.servers import need
from trust_kit import cli


@pytest.fixture
def full_disk(tmp_path: Path):
    mnt = tmp_path / "small"
    mnt.mkdir()
    ok = os.geteuid() == 0 and subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)],
                                              capture_output=True).returncode == 0
    need(ok, "mounting a 2 MiB tmpfs (root, mount allowed) to fill a disk for real")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def _temp_files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if "tmp" in p.name)


def test_reading_verbs_work_and_writing_verbs_say_full_disk_and_leave_nothing_behind(full_disk: Path) -> None:
    root = full_disk / "w"
    root.mkdir()
    (root / "a.txt").write_text("one\n")
    assert cli(root, "init")[0] == 0
    code, out, err = cli(root, "snapshot", "-m", "one")
    assert code == 0, err
    head = out.strip()
    (root / "a.txt").write_text("one\ntwo\n")
    with open(root / "filler", "wb") as f:  # the agent's runaway file: fills the disk
        try:
            while True:
                f.write(b"x" * 65536)
        except OSError:
            pass
    for verb in (["log"], ["status"], ["show", "HEAD"], ["diff"], ["verify"], ["branch"]):
        code, out, err = cli(root, *verb)
        assert code == 0, (verb, out, err)
    assert head[:12] in cli(root, "log")[1]
    assert "M a.txt" in cli(root, "status")[1]
    for verb in (["branch", "newb"], ["tag", "t1"], ["config", "world.include_git", "true"]):
        code, out, err = cli(root, *verb)
        assert code == 2, (verb, out, err)
        assert "disk holding the store is full" in err and "read-only" not in err, (verb, err)
    for verb in (["snapshot", "-m", "two"], ["restore", "HEAD"]):
        code, out, err = cli(root, *verb)
        assert code == 2 and "no space left" in err and "Traceback" not in err, (verb, err)
    assert _temp_files(root) == []
    assert (root / "a.txt").read_text() == "one\ntwo\n"  # the failed restore changed nothing
    from agentsnap_core.stores.local import LocalStore

    # (a process keeping stores open - the Claude Code helper - must not keep one read as it was on a full disk)
    store = LocalStore(root / ".agentsnap")
    assert store.refs.full_disk, "opened read-only on a full disk: flagged"
    store.close()
    (root / "filler").unlink()
    store = LocalStore(root / ".agentsnap")
    assert not store.refs.full_disk, "opened for writing again once there is room"
    store.close()
    code, out, err = cli(root, "snapshot", "-m", "two")
    assert code == 0, err
    code, out, err = cli(root, "verify")
    assert code == 0, (out, err)
    assert "newb" not in cli(root, "branch")[1]
