"""Format versioning: a store written by an earlier release opens with this code; newer versions are refused.

``fixtures/store-v1`` was written by agentsnap 0.1 (``fixtures/make_store_v1.py``); every snapshot in it
must still log, verify and restore byte for byte. A store, index, object, manifest or tree with a newer
format version is refused by name (:class:`UnsupportedFormat` says which thing and which version).
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
from pathlib import Path

import pytest
from agentsnap_core import Repo
from agentsnap_core.errors import UnsupportedFormat
from agentsnap_core.format import objects
from fixtures.make_store_v1 import tree  # the generator's own view of a tree: one definition

FIXTURE = Path(__file__).parent / "fixtures" / "store-v1"
EXPECTED = json.loads((Path(__file__).parent / "fixtures" / "store-v1.json").read_text())




@pytest.fixture
def old_repo(tmp_path: Path) -> Repo:
    work = tmp_path / "work"
    work.mkdir()
    shutil.copytree(FIXTURE, work / ".agentsnap")  # never open the checked-in copy itself
    repo = Repo.open(work)
    yield repo
    repo.close()


def test_old_store_opens_logs_and_verifies(old_repo: Repo) -> None:
    assert old_repo.resolve("main") == EXPECTED["main"]
    assert old_repo.resolve("v1") == EXPECTED["tag"] and old_repo.resolve("side") == EXPECTED["side"]
    assert [s.message for s in old_repo.log("main")] == ["second", "first"]
    report = old_repo.verify()
    assert report["ok"], report["problems"]


@pytest.mark.parametrize("which", ["first", "second"])
def test_every_old_snapshot_restores_byte_identically(old_repo: Repo, tmp_path: Path, which: str) -> None:
    oid = {s.message: s.id for s in old_repo.log("main")}[which]
    want = EXPECTED["snapshots"][oid]
    old_repo.restore(oid, to=tmp_path / which)
    assert tree(tmp_path / which) == want["tree"]
    assert old_repo.read_layer(oid, "state")["step"] == want["state"]["step"]
    assert len(old_repo.read_layer(oid, "trace")) == want["trace"]


def test_new_code_writes_into_an_old_store(old_repo: Repo) -> None:
    (old_repo.root / "new.txt").write_text("written by the new code\n")
    snap = old_repo.snapshot("third")
    assert snap.parents == [EXPECTED["main"]]
    assert old_repo.verify()["ok"]


def _bump_store(path: Path) -> str:
    (path / "format.json").write_text('{"format": "agentsnap-store", "version": 4}\n')  # 2 = packs, 3 = solid packs (read)
    return "store"


def _bump_index(path: Path) -> str:
    db = sqlite3.connect(path / "index.sqlite")
    db.execute("UPDATE meta SET value='2' WHERE key='schema'")
    db.commit()
    db.close()
    return "index"


@pytest.mark.parametrize("bump", [_bump_store, _bump_index], ids=["store", "index"])
def test_newer_store_or_index_version_is_refused_by_name(tmp_path: Path, bump: object) -> None:
    work = tmp_path / "work"
    work.mkdir()
    shutil.copytree(FIXTURE, work / ".agentsnap")
    what = bump(work / ".agentsnap")  # type: ignore[operator]
    newer, known = (4, 3) if what == "store" else (2, 1)
    with pytest.raises(UnsupportedFormat, match=rf"^{what} .* has format version {newer}, this agentsnap understands {known}"):
        Repo.open(work)


def test_newer_object_version_is_refused_by_name(old_repo: Repo) -> None:
    oid = EXPECTED["main"]
    path = old_repo.store_dir / "objects" / oid[:2] / oid[2:]
    stored = bytearray(path.read_bytes())
    stored[3] = objects.OBJECT_FORMAT + 1
    os.chmod(path, 0o644)
    path.write_bytes(bytes(stored))
    with pytest.raises(UnsupportedFormat, match=f"object {oid[:12]} has format version 2"):
        old_repo.get("main")
