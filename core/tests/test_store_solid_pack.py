"""Packs compress their small objects together, in blocks (pack version 2, store format 3).

Each small object used to be compressed on its own: a LangGraph checkpoint's state document, its manifest, a
message list one message longer than the one before, a source file beside its siblings share most of their bytes,
and alone none of that can be used (issue 22: 2.8 MB of packs for a 200-step thread; issue 19: the store 1.2x git
on 100k small files, where git deltas inside its packs). Reading, verifying, gc and pushing keep their contracts;
packs written before (version 1) are still read, and rewritten by gc.
"""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

import blake3
import pytest
from agentsnap_core import Repo
from agentsnap_core.errors import ObjectCorrupt, UnsupportedFormat
from agentsnap_core.format import objects
from agentsnap_core.format.objects import Kind
from agentsnap_core.operations.remote import add_remote, push
from agentsnap_core.stores import local as localmod
from agentsnap_core.stores import pack as packmod
from agentsnap_core.stores.local import LocalStore


def _docs(n: int) -> list[bytes]:
    """Checkpoint-like documents: each one differs from the one before by a little."""
    history = ""
    out = []
    for i in range(n):
        history += f'{{"role": "user", "id": "msg-{i:05d}", "content": "question number {i} about the plan"}},'
        out.append(f'{{"thread": "t1", "step": {i}, "messages": [{history}]}}'.encode()[-6000:])
    return out


def _pack_bytes(repo: Repo) -> int:
    d = repo.store_dir / "objects" / "pack"
    return sum((d / n).stat().st_size for n in os.listdir(d) if packmod.is_pack_name(n))


def test_small_objects_written_together_are_compressed_together(repo: Repo) -> None:
    docs = _docs(300)
    alone = sum(len(objects.encode(Kind.BLOB, d)[1]) for d in docs)  # what each object compressed alone takes
    with repo.objects.batch():
        ids = [repo.objects.put(Kind.BLOB, d) for d in docs]
    repo.objects.barrier()
    assert list(repo.objects.iter_loose()) == []
    packed = _pack_bytes(repo)
    assert packed < alone / 3, f"the pack takes {packed} bytes; its objects compressed one by one take {alone}"
    assert [repo.objects.get(o) for o in ids] == [(Kind.BLOB, d) for d in docs]
    assert repo.verify()["objects"] == len(set(ids))
    repo.objects.pack_live(set(ids), None)  # gc: one pack, blocks at gc's level
    assert _pack_bytes(repo) <= packed
    assert [repo.objects.get(o) for o in ids] == [(Kind.BLOB, d) for d in docs]
    assert repo.objects.verify_packs()[1] == []


def _write_v1_pack(directory: Path, items: list[tuple[str, bytes]]) -> None:
    """A pack as the code before version 2 wrote it: each object's stored bytes, 44-byte entries."""
    head = packmod.HEAD.pack(packmod.MAGIC, 1, 0)
    body, index, at = b"", [], packmod.HEAD.size
    for oid, stored in items:
        index.append((bytes.fromhex(oid), at, len(stored)))
        body += stored
        at += len(stored)
    entries = b"".join(struct.pack("<32sQI", *e) for e in sorted(index))
    digest = blake3.blake3(entries).digest()
    trailer = packmod.TRAILER.pack(packmod.TRAILER_MAGIC, 1, at, len(index), digest)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"pack-{digest.hex()[:40]}.pack").write_bytes(head + body + entries + trailer)


def test_a_store_with_packs_of_version_1_is_read_and_gc_rewrites_them(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    repo = Repo.init(tmp_path / "w")
    docs = _docs(40)
    items = [objects.encode(Kind.BLOB, d) for d in docs]
    _write_v1_pack(repo.store_dir / "objects" / "pack", items)
    fmt = repo.store_dir / "format.json"
    fmt.write_text('{"format": "agentsnap-store", "version": 2}\n')  # written by the agentsnap before blocks
    repo.close()
    with Repo.open(tmp_path / "w") as old:
        assert [old.objects.get(o) for o, _ in items] == [(Kind.BLOB, d) for d in docs]
        assert old.objects.verify_packs()[1] == []
        assert json.loads(fmt.read_text())["version"] == 2  # reading changes nothing
        old.objects.pack_live({o for o, _ in items}, None)
        assert json.loads(fmt.read_text())["version"] == 3  # marked before the first block was written
        [name] = [n for n in os.listdir(old.store_dir / "objects" / "pack") if packmod.is_pack_name(n)]
        assert packmod.Pack(str(old.store_dir / "objects" / "pack" / name)).version == 2
        assert [old.objects.get(o) for o, _ in items] == [(Kind.BLOB, d) for d in docs]
    monkeypatch.setattr(localmod, "STORE_FORMATS", (1, 2))  # the agentsnap before blocks refuses, by name
    monkeypatch.setattr(localmod, "STORE_FORMAT", 2)
    with pytest.raises(UnsupportedFormat, match=r"has format version 3, this agentsnap understands 2; upgrade"):
        LocalStore(tmp_path / "w" / ".agentsnap")


def _block_of(repo: Repo, oid: str) -> tuple[Path, int]:
    hit = repo.objects.packs.locate(oid)
    assert hit is not None
    pk, (off, _length, inner, _size) = hit
    assert inner != packmod.PLAIN
    return Path(pk.path), off


def test_a_damaged_block_is_an_error_naming_the_object_and_gc_keeps_the_pack(repo: Repo) -> None:
    docs = _docs(200)
    with repo.objects.batch():
        ids = [repo.objects.put(Kind.BLOB, d) for d in docs]
    repo.objects.barrier()
    path, off = _block_of(repo, ids[0])
    data = bytearray(path.read_bytes())
    data[off + 40] ^= 0xFF  # inside the first block's compressed bytes
    os.chmod(path, 0o644)
    path.write_bytes(bytes(data))
    fresh = LocalStore(repo.store_dir)  # no block of it cached
    try:
        with pytest.raises(ObjectCorrupt, match=ids[0]):
            fresh.objects.get(ids[0])
        report = Repo.open(repo.root).verify()
        assert not report["ok"] and ids[0] in {p.get("id") for p in report["problems"]}
        with pytest.raises(packmod.PackCorrupt, match="nothing was repacked"):
            fresh.objects.pack_live(set(ids), None)
        assert path.exists()  # the damaged pack stays: its other blocks still read
        later = [o for o in ids if _block_of(repo, o)[1] != off]
        assert later and all(fresh.objects.get(o)[0] == Kind.BLOB for o in later)
    finally:
        fresh.close()


def test_push_sends_packed_small_objects_compressed(repo: Repo, tmp_path: Path) -> None:
    """Objects read out of a block are uncompressed; a remote gets them compressed, as a loose object is."""
    (repo.root / "notes.txt").write_text("the plan, step by step\n" * 200)
    snap = repo.snapshot("one")
    add_remote(repo, "origin", str(tmp_path / "remote"))
    push(repo, "origin")
    [oid] = [o for o in repo.objects.iter_oids() if repo.objects.get(o) == (Kind.BLOB, b"the plan, step by step\n" * 200)]
    assert repo.objects.get_stored(oid)[5] == 0  # the block's uncompressed form
    remote = LocalStore(tmp_path / "remote")
    try:
        sent = remote.objects.get_stored(oid)
        assert sent[5] == 1 and len(sent) < 200  # compressed on the way, kept as sent
        assert remote.objects.has(snap.id)
    finally:
        remote.close()


def test_compact_gives_the_compressed_stored_form_of_the_same_object() -> None:
    raw = b"abc " * 500
    oid, _ = objects.encode(Kind.BLOB, raw)
    plain = objects.HEADER.pack(objects.MAGIC, objects.OBJECT_FORMAT, Kind.BLOB, 0, len(raw)) + raw
    small = objects.compact(plain)
    assert small[5] == 1 and len(small) < len(plain) and objects.decode(oid, small) == (Kind.BLOB, raw)
    noise = os.urandom(500)
    plain_noise = objects.HEADER.pack(objects.MAGIC, objects.OBJECT_FORMAT, Kind.BLOB, 0, len(noise)) + noise
    assert objects.compact(plain_noise) == plain_noise  # incompressible: kept as it is


def test_merging_packs_copies_whole_blocks_without_recompressing_them(repo: Repo) -> None:
    """A block whose objects all go into the merged pack is copied as it is: merging packs (gc's geometric merge, a
    barrier past 16 packs) must not decompress and recompress at gc's level what gc already compressed."""
    first = _docs(120)
    ids = [repo.objects.put(Kind.BLOB, d) for d in first]  # loose
    repo.objects.pack_live(set(ids), None)  # gc: one pack at gc's level
    [name] = [n for n in os.listdir(repo.store_dir / "objects" / "pack") if packmod.is_pack_name(n)]
    old = packmod.Pack(str(repo.store_dir / "objects" / "pack" / name))
    frames = {old.mm[loc[0] : loc[0] + loc[1]] for _o, loc in old.entries() if loc[2] != packmod.PLAIN}
    old.close()
    more = [repo.objects.put(Kind.BLOB, d + b" (second)") for d in _docs(120)]
    repo.objects.pack_live(set(ids) | set(more), None)  # merges the first pack with the new objects
    names = [n for n in os.listdir(repo.store_dir / "objects" / "pack") if packmod.is_pack_name(n)]
    assert name not in names and len(names) == 1
    merged = (repo.store_dir / "objects" / "pack" / names[0]).read_bytes()
    assert frames and all(f in merged for f in frames)
    assert [repo.objects.get(o) for o in ids] == [(Kind.BLOB, d) for d in first]
    assert repo.objects.verify_packs()[1] == [] and repo.verify()["ok"]


def test_reading_every_object_decompresses_each_block_once(repo: Repo, monkeypatch: pytest.MonkeyPatch) -> None:
    """verify and du read every object by ``iter_oids``: in id order a pack's objects are spread over all its
    blocks, and every read decompressed a whole block (verify of a 20k-file store took 2.9x as long)."""
    with repo.objects.batch():
        ids = [repo.objects.put(Kind.BLOB, d) for d in _docs(400)]
    repo.objects.barrier()
    hit = repo.objects.packs.locate(ids[0])
    assert hit is not None
    blocks = {loc[0] for _o, loc in hit[0].entries() if loc[2] != packmod.PLAIN}
    assert len(blocks) >= 4
    calls = []
    real = objects.decompress_bounded
    monkeypatch.setattr(objects, "decompress_bounded", lambda data, n: calls.append(n) or real(data, n))
    fresh = LocalStore(repo.store_dir)  # nothing cached
    try:
        assert sorted(fresh.objects.iter_oids()) == sorted(set(ids))
        for oid in fresh.objects.iter_oids():
            fresh.objects.get(oid)
    finally:
        fresh.close()
    assert len([n for n in calls if n == packmod.BLOCK_MAX]) == len(blocks)
