"""The local store passes the store contract; its on-disk format is versioned."""

from __future__ import annotations

import json
import multiprocessing
from pathlib import Path

import pytest
from agentsnap_core import RefConflict, Repo, UnsupportedFormat
from agentsnap_core.errors import TreeBusy
from agentsnap_core.format.objects import Kind, encode
from agentsnap_core.stores.local import LocalStore
from agentsnap_core.testing.store_contract import StoreContract


class TestLocalStore(StoreContract):
    @pytest.fixture
    def store(self, tmp_path: Path) -> LocalStore:
        s = LocalStore(tmp_path / "store", create=True)
        yield s
        s.close()


def test_newer_store_format_is_refused_by_name(tmp_path: Path) -> None:
    LocalStore(tmp_path / "s", create=True).close()
    (tmp_path / "s" / "format.json").write_text(json.dumps({"format": "agentsnap-store", "version": 99}))
    with pytest.raises(UnsupportedFormat, match="version 99"):
        LocalStore(tmp_path / "s")


def test_newer_object_format_is_refused_by_name(tmp_path: Path) -> None:
    from agentsnap_core.format import objects

    oid, stored = encode(Kind.BLOB, b"x" * 100)
    future = stored[:3] + bytes([9]) + stored[4:]
    with pytest.raises(UnsupportedFormat, match="version 9"):
        objects.decode(oid, future)


def test_decompression_is_bounded(tmp_path: Path) -> None:
    import zstandard
    from agentsnap_core import ObjectCorrupt
    from agentsnap_core.format import objects

    bomb = zstandard.ZstdCompressor().compress(b"\0" * (8 * 1024 * 1024))
    header = objects.HEADER.pack(objects.MAGIC, objects.OBJECT_FORMAT, Kind.BLOB, 1, 100)  # lies about its size
    with pytest.raises(ObjectCorrupt):
        objects.decode(objects.digest(Kind.BLOB, b"\0" * 100), header + bomb)
    header = objects.HEADER.pack(objects.MAGIC, objects.OBJECT_FORMAT, Kind.BLOB, 1, 1 << 40)
    with pytest.raises(ObjectCorrupt, match="over the limit"):
        objects.decode("0" * 64, header + bomb)


def _race(root: str, barrier: object, i: int, out: object) -> None:
    repo = Repo.open(root)
    (Path(root) / f"file{i}.txt").write_text(str(i))
    barrier.wait()  # type: ignore[attr-defined]
    try:
        repo.snapshot(f"writer {i}")
        out.put(("ok", i))  # type: ignore[attr-defined]
    except (RefConflict, TreeBusy) as exc:  # TreeBusy: the other process holds this working tree's lock
        out.put(("conflict", str(exc)))  # type: ignore[attr-defined]


def test_two_processes_snapshotting_one_branch_one_wins_nothing_lost(repo: Repo) -> None:
    base = repo.snapshot("base")
    ctx = multiprocessing.get_context("spawn")
    results = []
    for _round in range(5):
        barrier = ctx.Barrier(2)
        out = ctx.Queue()
        procs = [ctx.Process(target=_race, args=(str(repo.root), barrier, i, out)) for i in range(2)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(60)
        results += [out.get(timeout=5) for _ in procs]
    oks = [r for r in results if r[0] == "ok"]
    conflicts = [r for r in results if r[0] == "conflict"]
    assert oks, "at least one writer per round wins"
    for _, msg in conflicts:
        assert ("moved while you worked" in msg or "another agentsnap process" in msg) and "re-run" in msg
    # every successful update is in the reflog and the branch history is linear
    log = repo.refs.reflog("refs/heads/main")
    assert len([e for e in log if e.message.startswith("snapshot: writer")]) == len(oks)
    chain = repo.log()
    assert len(chain) == len(oks) + 1 and chain[-1].id == base.id
    assert repo.verify()["ok"]
