"""A file whose name is long in UTF-8 comes back (restore in place, ``--to``, ``fork --worktrees``).

Linux allows 255 bytes per name; 85 CJK characters are 255 bytes. A restore writes each file through a temp file
beside it, named by a prefix and the file's name cut to 255 *characters*: for such a name that is over 255 bytes, so
every restore of a snapshot holding one failed ("File name too long") and rolled back - a snapshot that could be
taken and never restored. Fails on the code before this change.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from agentsnap_core import Repo

NAMES = ["議事録" * 28 + "一",  # 85 characters, 255 bytes (28 * 9 + 3)
         "é" * 120,  # 240 bytes
         "a" * 255]


@pytest.fixture
def repo_with_long_names(tmp_path: Path):
    root = tmp_path / "proj"
    (root / "notes").mkdir(parents=True)
    for i, name in enumerate(NAMES):
        assert len(name.encode()) <= 255
        (root / "notes" / name).write_text(f"file {i}\n")
    repo = Repo.init(root)
    snap = repo.snapshot("long names")
    yield repo, root, snap.id
    repo.close()


def _names(d: Path) -> list[str]:
    return sorted(p.name for p in (d / "notes").iterdir())


def test_restore_in_place_brings_back_files_with_255_byte_names(repo_with_long_names) -> None:
    repo, root, sid = repo_with_long_names
    for p in (root / "notes").iterdir():
        p.unlink()
    repo.restore(sid)
    assert _names(root) == sorted(NAMES)
    assert [(root / "notes" / n).read_text() for n in NAMES] == [f"file {i}\n" for i in range(len(NAMES))]
    assert repo.status()["clean"]


def test_restore_to_and_fork_worktrees_bring_them_back_too(repo_with_long_names, tmp_path: Path) -> None:
    repo, _root, sid = repo_with_long_names
    repo.restore(sid, to=tmp_path / "copy")
    assert _names(tmp_path / "copy") == sorted(NAMES)
    forks = repo.fork(sid, n=2, worktrees=str(tmp_path / "tries"))
    for f in forks:
        assert _names(Path(f["path"])) == sorted(NAMES)
