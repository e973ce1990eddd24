"""Batched, packed commit (issue 22 files O(1) per flush and durable-mode cost, issue 19 store size).

A snapshot (a batch of one) or ``repo.batch()`` writes its new small objects as ONE pack, makes them durable
with one barrier, and commits every index row and ref move in one SQLite transaction after it. The store is
marked format 2 before its first pack so an older agentsnap refuses it by name; the index WAL stays bounded.
"""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

import pytest
from agentsnap_core import Repo
from agentsnap_core.errors import RefConflict, UnsupportedFormat
from agentsnap_core.format.objects import Kind
from agentsnap_core.stores import local as localmod
from agentsnap_core.stores import pack as packmod
from agentsnap_core.stores.base import SnapshotRow
from agentsnap_core.stores.local import LocalStore


def _files(root: Path) -> int:
    return sum(len(names) for _d, _s, names in os.walk(root))


def _packs(repo: Repo) -> list[str]:
    d = repo.store_dir / "objects" / "pack"
    return sorted(n for n in os.listdir(d) if packmod.is_pack_name(n)) if d.is_dir() else []


def _write(root: Path, n: int, tag: str) -> None:
    for i in range(n):
        (root / f"f{i}.txt").write_text(f"{tag} {i}\n" * (1 + i % 4))


def test_a_snapshot_adds_o1_files_not_one_per_object(repo: Repo) -> None:
    _write(repo.root, 60, "a")
    repo.snapshot("first")
    before = _files(repo.store_dir / "objects")
    _write(repo.root, 60, "b")  # 60 new blobs, a new tree, trace, manifest
    repo.snapshot("second")
    assert _files(repo.store_dir / "objects") - before <= 1  # one pack
    assert repo.verify()["ok"]


def test_a_batch_writes_one_pack_with_one_barrier_and_chains_its_snapshots(repo: Repo) -> None:
    first = repo.snapshot("base")
    packs, barriers = len(_packs(repo)), repo.objects.stats["barriers"]
    with repo.batch():
        snaps = []
        for i in range(4):
            (repo.root / "f.txt").write_text(f"step {i}\n")
            snaps.append(repo.snapshot(f"s{i}", layers={"state": {"i": i}}))
            assert repo.objects.get(snaps[-1].id)  # readable before the barrier
        assert repo.refs.get_ref("refs/heads/main") == first.id  # nothing committed inside the block
    assert repo.objects.stats["barriers"] == barriers + 1
    assert len(_packs(repo)) == packs + 1
    assert repo.refs.get_ref("refs/heads/main") == snaps[-1].id
    assert [s.manifest["parents"] for s in snaps] == [[first.id]] + [[s.id] for s in snaps[:-1]]
    assert [e.new for e in repo.refs.reflog("refs/heads/main", limit=4)] == [s.id for s in reversed(snaps)]
    assert {r.id for r in repo.refs.list_snapshots()} >= {s.id for s in snaps}
    with Repo.open(repo.root) as other:  # another handle (process) sees the packed objects
        assert other.verify()["ok"]
        assert other.get(snaps[2].id).manifest["parents"] == [snaps[1].id]


def test_a_ref_moved_under_a_batch_applies_none_of_its_moves_and_keeps_its_snapshots(repo: Repo) -> None:
    base = repo.snapshot("base")
    with pytest.raises(RefConflict):
        with repo.batch():
            a = repo.snapshot("a", layers={"state": 1})
            b = repo.snapshot("b", layers={"state": 2})
            with Repo.open(repo.root) as other:  # a concurrent writer moves main first
                c = other.snapshot("other", layers={"state": 3})
    assert repo.refs.get_ref("refs/heads/main") == c.id
    assert base.id in c.manifest["parents"]
    ids = {r.id for r in repo.refs.list_snapshots()}
    assert {a.id, b.id} <= ids and repo.objects.has(b.id)  # durable and indexed, as after one snapshot's conflict
    assert repo.verify()["ok"]


def test_snapshots_finished_before_a_batch_raises_are_committed(repo: Repo) -> None:
    with pytest.raises(ZeroDivisionError):
        with repo.batch():
            done = repo.snapshot("done", layers={"state": 1})
            _ = 1 / 0
    assert repo.refs.get_ref("refs/heads/main") == done.id
    with Repo.open(repo.root) as other:
        assert other.verify()["ok"]


def test_detached_head_moves_inside_a_batch(repo: Repo) -> None:
    base = repo.snapshot("base")
    repo.refs.set_head(repo.worktree, None, base.id)
    with repo.batch():
        a = repo.snapshot("a", layers={"state": 1})
        b = repo.snapshot("b", layers={"state": 2})
    assert b.manifest["parents"] == [a.id] and a.manifest["parents"] == [base.id]
    assert repo.head() == (None, b.id)


def test_many_batches_keep_few_packs(repo: Repo) -> None:
    for i in range(packmod.AUTO_PACKS + 6):
        repo.snapshot(f"s{i}", layers={"state": {"i": i}}, capture_world=False)
    assert len(_packs(repo)) <= packmod.AUTO_PACKS
    assert repo.verify()["ok"]
    repo.gc(grace_seconds=0)
    assert len(_packs(repo)) == 1
    assert repo.verify()["ok"]


def test_gc_recompresses_objects_a_batch_packed_fast(repo: Repo) -> None:
    text = "".join(f"line {i} of a fairly repetitive file, with words repeated {i % 7}\n" for i in range(700))
    for i in range(10):
        (repo.root / f"f{i}.txt").write_text(text + str(i))
    snap = repo.snapshot("s")
    batch_bytes = sum(os.path.getsize(repo.store_dir / "objects" / "pack" / p) for p in _packs(repo))
    repo.gc(grace_seconds=0)
    gc_bytes = sum(os.path.getsize(repo.store_dir / "objects" / "pack" / p) for p in _packs(repo))
    assert gc_bytes < batch_bytes
    assert repo.get(snap.id) and repo.verify()["ok"]


def test_packs_mark_the_store_format_so_an_older_agentsnap_refuses_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = Repo.init(tmp_path / "w")
    fmt = repo.store_dir / "format.json"
    fmt.write_text('{"format": "agentsnap-store", "version": 1}\n')  # a store made before packs
    repo.close()
    with Repo.open(tmp_path / "w") as old:
        old.objects.put(Kind.BLOB, b"loose only")  # no pack yet: still readable by an older agentsnap
        assert json.loads(fmt.read_text())["version"] == 1
        (old.root / "a.txt").write_text("a\n")
        old.snapshot("packs its objects")
    assert json.loads(fmt.read_text())["version"] == localmod.STORE_FORMAT == 3
    monkeypatch.setattr(localmod, "STORE_FORMATS", (1,))  # the agentsnap before packs
    monkeypatch.setattr(localmod, "STORE_FORMAT", 1)
    with pytest.raises(UnsupportedFormat, match=r"has format version 3, this agentsnap understands 1; upgrade"):
        LocalStore(tmp_path / "w" / ".agentsnap")


def test_a_v1_store_packed_by_gc_is_marked_too(tmp_path: Path) -> None:
    repo = Repo.init(tmp_path / "w")
    (repo.store_dir / "format.json").write_text('{"format": "agentsnap-store", "version": 1}\n')
    repo.close()
    with Repo.open(tmp_path / "w") as old:
        oid = old.objects.put(Kind.BLOB, b"x" * 100)
        old.objects.pack_live({oid}, None)
    assert json.loads((tmp_path / "w" / ".agentsnap" / "format.json").read_text())["version"] == localmod.STORE_FORMAT


def _wal(repo: Repo) -> int:
    try:
        return os.path.getsize(f"{repo.store_dir / 'index.sqlite'}-wal")
    except FileNotFoundError:
        return 0


def test_index_wal_stays_bounded_and_is_truncated_at_close(repo: Repo) -> None:
    reader = sqlite3.connect(repo.store_dir / "index.sqlite")  # an idle second connection (another thread)
    reader.execute("SELECT count(*) FROM refs").fetchone()
    biggest = 0
    for i in range(1500):
        repo.refs.index_snapshot(SnapshotRow(f"{i:064x}", (), float(i), "m" * 300, "a"))
        biggest = max(biggest, _wal(repo))
    assert biggest <= 2 * localmod.WAL_CHECKPOINT_BYTES + (1 << 20)
    repo.close()
    assert _wal(repo) == 0
    reader.close()


def test_gc_prints_the_packs_report_in_text_and_json(repo: Repo) -> None:
    from agentsnap_core.cli import main
    from click.testing import CliRunner

    for i in range(3):
        _write(repo.root, 20, f"v{i}")
        repo.snapshot(f"s{i}")
    repo.objects.put(Kind.BLOB, b"loose, outside any batch" * 3)
    res = CliRunner().invoke(main, ["-C", str(repo.root), "gc", "--prune", "now", "--json"])
    assert res.exit_code == 0, res.output
    packs = json.loads(res.output)["packs"]
    assert packs["written"] == 1 and packs["merged"] == 3 and packs["packs"] == 1
    assert packs["objects_in_packs"] > 60 and packs["bytes_after"] < packs["bytes_before"]
    assert packs["files_after"] < packs["files_before"]
    _write(repo.root, 5, "w")
    repo.snapshot("more")
    res = CliRunner().invoke(main, ["-C", str(repo.root), "gc"])
    assert res.exit_code == 0, res.output
    assert "packs: 1 written (1 merged" in res.output and "files after" in res.output
