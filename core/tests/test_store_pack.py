"""gc packs small objects into pack files (issue 19 store size, issue 22 files on disk O(1) per flush).

After gc the embedded store holds its small objects in O(1) files; reads, has/missing/iter_oids/age/delete keep
their contracts on packed objects; a writer re-using a packed object writes no loose copy; unreachable packed
objects are dropped only when no writer runs and their pack is older than the grace period; verify re-hashes
packed objects and sees a damaged pack.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from agentsnap_core import Repo
from agentsnap_core.format import content, objects
from agentsnap_core.format.objects import Kind
from agentsnap_core.stores import pack as packmod
from agentsnap_core.stores.local import LocalStore
from agentsnap_core.testing.store_contract import StoreContract

OLD = 1_000_000_000


def _files(root: Path) -> int:
    return sum(len(names) for _d, _s, names in os.walk(root))


def _loose(repo: Repo) -> list[str]:
    return list(repo.objects.iter_loose())


def _packs(repo: Repo) -> list[str]:
    d = repo.store_dir / "objects" / "pack"
    return sorted(n for n in os.listdir(d) if packmod.is_pack_name(n)) if d.is_dir() else []


def _tree(root: Path, n: int, tag: str = "") -> dict[str, bytes]:
    files = {f"d{i % 7}/f{i}.txt": f"file {i} {tag}\n".encode() * (1 + i % 5) for i in range(n)}
    for rel, data in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
    return files


def _read(root: Path) -> dict[str, bytes]:
    out = {}
    for d, _s, names in os.walk(root):
        if ".agentsnap" in d:
            continue
        for n in names:
            p = Path(d) / n
            out[str(p.relative_to(root))] = p.read_bytes()
    return out


def test_gc_packs_small_objects_into_o1_files_and_everything_restores(repo: Repo, tmp_path: Path) -> None:
    files = _tree(repo.root, 300)
    big = os.urandom(600_000)  # chunked: chunks below the pack threshold are packed, larger ones stay loose
    (repo.root / "big.bin").write_bytes(big)
    files["big.bin"] = big
    snap = repo.snapshot("first")
    assert _files(repo.store_dir / "objects") < 20  # the snapshot's small objects went into one pack already
    repo.gc(grace_seconds=0)
    assert len(_packs(repo)) == 1
    small_loose = [o for o in _loose(repo) if len(repo.objects.get_stored(o)) < packmod.PACK_MAX_STORED]
    assert small_loose == []
    assert _files(repo.store_dir / "objects") < 20  # the pack, its lock, a few large chunks, empty fan-out dirs
    assert repo.verify()["ok"]
    dest = tmp_path / "out"
    repo.restore(snap.id, to=dest)
    assert _read(dest) == files
    with Repo.open(repo.root) as other:  # a fresh process-like handle finds everything in the pack
        assert other.verify()["ok"]
        assert other.verify()["objects"] == repo.verify()["objects"]


def test_second_gc_keeps_one_pack(repo: Repo) -> None:
    _tree(repo.root, 50, "a")
    repo.snapshot("a")
    repo.gc(grace_seconds=0)
    _tree(repo.root, 50, "b")
    repo.snapshot("b")
    repo.gc(grace_seconds=0)
    assert len(_packs(repo)) == 1
    assert _loose(repo) == []
    assert repo.verify()["ok"]


def test_writer_reusing_a_packed_object_writes_no_loose_copy(repo: Repo) -> None:
    _tree(repo.root, 40)
    repo.snapshot("one")
    repo.gc(grace_seconds=0)
    assert _loose(repo) == []
    pack_path = repo.store_dir / "objects" / "pack" / _packs(repo)[0]
    os.utime(pack_path, (OLD, OLD))
    oid = repo.objects.put(Kind.BLOB, b"file 3 \n" * 4)
    assert repo.objects.has(oid)
    repo.snapshot("same files again")  # re-uses every packed blob
    assert [o for o in _loose(repo) if o == oid] == []
    assert os.stat(pack_path).st_mtime > OLD + 1  # re-use refreshed the pack: gc's grace protects it


def test_packed_objects_keep_the_store_contract(repo: Repo) -> None:
    ids = [repo.objects.put(Kind.BLOB, f"obj{i}".encode() * 10) for i in range(20)]
    report = repo.objects.pack_live(set(ids), None)
    assert report["packed"] == 20 and _loose(repo) == []
    absent = objects.digest(Kind.BLOB, b"absent")
    assert all(repo.objects.has(o) for o in ids) and not repo.objects.has(absent)
    assert repo.objects.missing(ids + [absent]) == {absent}
    assert sorted(repo.objects.iter_oids()) == sorted(ids)
    assert repo.objects.get(ids[3]) == (Kind.BLOB, b"obj3" * 10)
    assert objects.decode(ids[4], repo.objects.get_stored(ids[4]))[1] == b"obj4" * 10
    assert repo.objects.age(ids[0]) < 3600
    repo.objects.delete(ids[0])
    assert not repo.objects.has(ids[0])
    assert all(repo.objects.has(o) for o in ids[1:])
    repo.objects.put(Kind.BLOB, b"obj0" * 10)  # deleted: written again, loose
    assert _loose(repo) == [ids[0]]


def test_another_handle_finds_objects_packed_after_it_looked(repo: Repo) -> None:
    oid = repo.objects.put(Kind.BLOB, b"packed later" * 5)
    with Repo.open(repo.root) as other:
        assert other.objects.get(oid)[1] == b"packed later" * 5  # loose, and no pack list yet
        repo.objects.pack_live({oid}, None)
        assert _loose(repo) == []
        assert other.objects.has(oid)  # a miss re-lists the packs
        assert other.objects.get(oid)[1] == b"packed later" * 5


def _garbage_in_pack(repo: Repo) -> str:
    """A snapshot plus an unreachable object, all packed, the pack aged past any grace."""
    _tree(repo.root, 20)
    repo.snapshot("keep")
    garbage = content.put_value(repo.objects, {"garbage": 1})
    live = set(repo.objects.iter_oids()) - {garbage}
    repo.objects.pack_live(live | {garbage}, None)  # packed while it was still (say) reachable
    assert _loose(repo) == []
    for n in _packs(repo):
        os.utime(repo.store_dir / "objects" / "pack" / n, (OLD, OLD))
    return garbage


def test_gc_drops_unreachable_packed_objects_when_no_writer_runs(repo: Repo) -> None:
    garbage = _garbage_in_pack(repo)
    report = repo.gc(grace_seconds=3600)
    assert report["packs"]["dropped"] == 1
    assert not repo.objects.has(garbage)
    assert repo.verify()["ok"]


def test_gc_keeps_unreachable_packed_objects_while_a_writer_runs(repo: Repo) -> None:
    garbage = _garbage_in_pack(repo)
    with repo.writer_sessions.session():
        with Repo.open(repo.root) as other:
            other.gc(grace_seconds=0)
        assert repo.objects.has(garbage)
    repo.gc(grace_seconds=0)
    assert not repo.objects.has(garbage)


def test_gc_keeps_unreachable_packed_objects_in_a_pack_younger_than_the_grace(repo: Repo) -> None:
    garbage = _garbage_in_pack(repo)
    for n in _packs(repo):
        os.utime(repo.store_dir / "objects" / "pack" / n)  # re-used just now
    repo.gc(grace_seconds=3600)
    assert repo.objects.has(garbage)


def test_writer_reuse_while_gc_retires_the_pack_keeps_the_object(repo: Repo, monkeypatch: pytest.MonkeyPatch) -> None:
    """gc decided to drop a pack's garbage; a writer re-uses that garbage before the old pack is retired: the
    old pack is put back (or the writer writes it again), never lost."""
    garbage = _garbage_in_pack(repo)
    real = packmod.write_pack

    def write_then_reuse(*a: object, **kw: object) -> str | None:
        out = real(*a, **kw)  # type: ignore[arg-type]
        with Repo.open(repo.root) as writer:
            writer.objects.put(Kind.BLOB, b"x")  # unrelated
            assert content.put_value(writer.objects, {"garbage": 1}) == garbage
        return out

    monkeypatch.setattr(packmod, "write_pack", write_then_reuse)
    repo.gc(grace_seconds=3600)
    monkeypatch.undo()
    with Repo.open(repo.root) as fresh:
        assert fresh.objects.get(garbage)
        assert fresh.verify()["ok"]


def _verify_with_a_flipped_pack_byte(repo: Repo, at: int) -> dict[str, Any]:
    _tree(repo.root, 10)
    repo.snapshot("s")
    repo.gc(grace_seconds=0)
    path = repo.store_dir / "objects" / "pack" / _packs(repo)[0]
    data = bytearray(path.read_bytes())
    data[at] ^= 0xFF
    os.chmod(path, 0o644)
    path.write_bytes(bytes(data))
    with Repo.open(repo.root) as fresh:
        return fresh.verify()


def test_verify_reports_a_damaged_packed_object(repo: Repo) -> None:
    report = _verify_with_a_flipped_pack_byte(repo, packmod.HEAD.size + 20)  # inside the first object's bytes
    assert not report["ok"]
    assert any(p["kind"] == "object" for p in report["problems"])


def test_verify_reports_a_damaged_pack_index(repo: Repo) -> None:
    report = _verify_with_a_flipped_pack_byte(repo, -packmod.TRAILER.size - 3)  # inside the index
    assert not report["ok"]
    assert any(p["kind"] in ("pack", "object") for p in report["problems"])


def test_leftovers_of_a_killed_pack_are_reported_and_cleaned(repo: Repo) -> None:
    _tree(repo.root, 10)
    snap = repo.snapshot("s")
    repo.gc(grace_seconds=0)
    d = repo.store_dir / "objects" / "pack"
    name = _packs(repo)[0]
    (d / ".tmp-pack-1-1").write_bytes(b"half a pack")
    shutil.copy(d / name, d / (packmod.TRASH_PREFIX + name[len(packmod.PREFIX) :]))  # an old pack killed mid-retire
    with Repo.open(repo.root) as fresh:
        assert fresh.verify()["temp_files"] == 2
        fresh.gc(grace_seconds=0)
        assert fresh.verify()["temp_files"] == 0
        assert fresh.verify()["ok"]
        assert fresh.world_entries(snap.id)


class TestPackedLocalStore(StoreContract):
    """The store contract on a store whose every object is packed right after it is written."""

    @pytest.fixture
    def store(self, tmp_path: Path) -> LocalStore:
        s = LocalStore(tmp_path / "store", create=True)
        real_put, real_put_stored = s.objects.put, s.objects.put_stored

        def put(kind: int, raw: bytes) -> str:
            oid = real_put(kind, raw)
            s.objects.pack_live(set(s.objects.iter_oids()), None)
            return oid

        def put_stored(oid: str, stored: bytes) -> None:
            real_put_stored(oid, stored)
            s.objects.pack_live(set(s.objects.iter_oids()), None)

        s.objects.put, s.objects.put_stored = put, put_stored  # type: ignore[method-assign]
        yield s
        s.close()
        shutil.rmtree(tmp_path / "store", ignore_errors=True)


def test_encrypted_store_packs_and_restores(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from agentsnap_core.format import crypto

    monkeypatch.setattr(objects, "encrypted_opener", None)
    monkeypatch.setenv(crypto.KEY_ENV, crypto.generate_key())
    with Repo.init(tmp_path / "work") as repo:
        crypto.enable_encryption(repo)
        files = _tree(repo.root, 30, "secret")
        snap = repo.snapshot("sealed")
        repo.gc(grace_seconds=0)
        assert len(_packs(repo)) == 1 and _loose(repo) == []
        pack_bytes = (repo.store_dir / "objects" / "pack" / _packs(repo)[0]).read_bytes()
        assert b"secret" not in pack_bytes
        assert repo.verify()["ok"]
        repo.restore(snap.id, to=tmp_path / "out")
    assert _read(tmp_path / "out") == files


def test_push_from_and_into_packed_stores(tmp_path: Path) -> None:
    from agentsnap_core.operations.remote import add_remote, push

    with Repo.init(tmp_path / "a") as a:
        files = _tree(a.root, 40, "v1")
        a.snapshot("one")
        a.gc(grace_seconds=0)
        assert _loose(a) == []
        add_remote(a, "origin", str(tmp_path / "remote"))
        push(a, "origin", jobs=2)  # every object read from the pack
        remote = LocalStore(tmp_path / "remote")
        remote.objects.pack_live(set(remote.objects.iter_oids()), None)  # the remote packs too
        remote.close()
        files.update(_tree(a.root, 45, "v2"))
        snap = a.snapshot("two")
        push(a, "origin", jobs=2)  # the remote already has the packed objects: only the new ones go
        remote = LocalStore(tmp_path / "remote")
        loose_after, packed = set(remote.objects.iter_loose()), remote.objects.packs.all_oids()
        remote.close()
    assert loose_after and not loose_after & packed  # the new objects only, no loose copy of what was packed
    with Repo.init(tmp_path / "b") as b:
        from agentsnap_core.operations.remote import fetch

        add_remote(b, "origin", str(tmp_path / "remote"))
        fetch(b, "origin")
        b.restore(snap.id, to=tmp_path / "out")
    assert _read(tmp_path / "out") == files


def test_packing_recompresses_harder_same_id_same_bytes(repo: Repo) -> None:
    raw = b"".join(f"def handler_{i}(request, value={i}):\n    return request.get({i!r}) or value\n".encode()
                   for i in range(150))
    oid = repo.objects.put(Kind.BLOB, raw)
    loose = repo.objects.get_stored(oid)
    repo.objects.pack_live({oid}, None)
    hit = repo.objects.packs.locate(oid)
    assert hit is not None
    _pack, (_off, frame_bytes, _inner, _size) = hit
    assert frame_bytes < len(loose)  # its bytes in the pack: compressed at gc's level (in a block of one)
    packed = repo.objects.get_stored(oid)
    assert objects.decode(oid, packed) == (Kind.BLOB, raw)
    assert repo.verify()["objects"] == 1


def test_a_small_flush_does_not_copy_a_large_pack_and_packs_stay_few(repo: Repo) -> None:
    big = [repo.objects.put(Kind.BLOB, os.urandom(2000)) for _ in range(200)]
    repo.objects.pack_live(set(big), None)
    (first,) = _packs(repo)
    live = set(big)
    for i in range(packmod.MAX_PACKS + 3):  # many small flushes, each gc'd
        live.add(repo.objects.put(Kind.BLOB, os.urandom(100) + bytes([i])))
        repo.objects.pack_live(live, None)
        assert first in _packs(repo) or i >= packmod.MAX_PACKS  # the large pack is not rewritten for a small flush
        assert len(_packs(repo)) <= packmod.MAX_PACKS + 1
    assert _loose(repo) == [] and set(repo.objects.iter_oids()) == live
    assert repo.objects.verify_packs()[1] == []
