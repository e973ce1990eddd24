"""Hostile snapshots: a corpus of crafted trees, manifests and objects, each refused with a specific error.

Every case is planted in a real store the way a pushed or cloned snapshot would arrive (objects and a
ref), then restored into ``target`` beside a ``canary`` directory. A hostile case must raise its
specific error and leave the canary, the target and everything else outside the store untouched
(0 escapes); its harmless twin, built by the same code with one detail changed, must restore
(a store that refuses everything fails). Counts are printed (``pytest -s``).
"""

from __future__ import annotations

import os
import pickle
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import zstandard
from agentsnap_core import Repo
from agentsnap_core.errors import (
    AgentSnapError,
    ObjectCorrupt,
    ObjectMissing,
    UnknownSnapshot,
    UnsafeSnapshot,
    UnsupportedFormat,
)
from agentsnap_core.format import content, objects
from agentsnap_core.format.encoding import DecodeError, pack
from agentsnap_core.format.objects import HEADER, MAGIC, Kind
from agentsnap_core.stores.base import RefUpdate
from agentsnap_core.stores.local import LocalStore

TALLY = {"rejected": 0, "restored": 0, "escapes": 0}
Build = Callable[[Repo, Path, bool], Callable[[], Any]]


@dataclass
class Case:
    name: str
    category: str
    build: Build  #: (repo, tmp, hostile) -> the action a user runs
    error: type[AgentSnapError]
    match: str


def _blob(repo: Repo, data: bytes) -> str:
    return content.put_bytes(repo.objects, data)


def _plant(repo: Repo, entries: list[list[Any]], *, tree_v: int = 1, manifest_v: int = 1, **manifest: Any) -> str:
    """Store a snapshot with exactly these tree entries (no validation) and point a branch at it."""
    tree = content.put_bytes(repo.objects, pack({"entries": entries, "v": tree_v}))
    doc = {"format": "agentsnap-manifest", "v": manifest_v, "parents": [], "time": 1.0, "author": "mallory",
           "agent": "", "message": "hostile", "meta": {},
           "layers": {"world": {"tree": tree, "env": content.put_value(repo.objects, {})}}}
    doc.update(manifest)
    oid = repo.objects.put(Kind.MANIFEST, pack(doc))
    repo.refs.update_refs([RefUpdate("refs/heads/incoming", oid)], "test: planted as a fetch would")
    return oid


def _restore(repo: Repo, tmp: Path, entries: list[list[Any]], **kw: Any) -> Callable[[], Any]:
    oid = _plant(repo, entries)
    return lambda: repo.restore(oid, to=tmp / "target", **kw)


def _file(repo: Repo, path: str, data: bytes = b"x", mode: int = 0o644) -> list[Any]:
    return [path, "f", mode, len(data), _blob(repo, data)]


def path_case(bad: str, good: str) -> Build:
    def build(repo: Repo, tmp: Path, hostile: bool) -> Callable[[], Any]:
        if hostile:
            return _restore(repo, tmp, [_file(repo, bad.replace("{tmp}", str(tmp)), b"pwned")])
        parts = good.split("/")
        dirs = [["/".join(parts[:i]), "d", 0o755, 0, ""] for i in range(1, len(parts))]
        return _restore(repo, tmp, [*dirs, _file(repo, good, b"pwned")])

    return build


def link_case(entries: Callable[[Repo, bool], list[list[Any]]], **kw: Any) -> Build:
    def build(repo: Repo, tmp: Path, hostile: bool) -> Callable[[], Any]:
        return _restore(repo, tmp, entries(repo, hostile), **kw)

    return build


def kind_case(kind: str) -> Build:
    def build(repo: Repo, tmp: Path, hostile: bool) -> Callable[[], Any]:
        e = _file(repo, "dev")
        if hostile:
            e[1], e[4] = kind, "/dev/sda" if kind in "bc" else "../canary/target"
        return _restore(repo, tmp, [e])

    return build


def field_case(index: int, bad: Any) -> Build:
    def build(repo: Repo, tmp: Path, hostile: bool) -> Callable[[], Any]:
        e = _file(repo, "f.txt")
        if hostile:
            e[index] = bad
        return _restore(repo, tmp, [e])

    return build


def _stored(kind: int, codec: int, length: int, payload: bytes, version: int = 1) -> bytes:
    return HEADER.pack(MAGIC, version, kind, codec, length) + payload


def _replace_object(repo: Repo, oid: str, stored: bytes) -> None:
    path = Path(repo.objects.loose_copy(oid))  # packed: its loose copy, which reads take first
    os.chmod(path, 0o644)
    path.write_bytes(stored)


def object_case(damage: Callable[[bytes, str], bytes]) -> Build:
    """Restore a snapshot one of whose files is stored damaged (a hostile peer pushed it)."""

    def build(repo: Repo, tmp: Path, hostile: bool) -> Callable[[], Any]:
        data = b"victim content " * 40
        entries = [_file(repo, "a.txt", b"first file"), _file(repo, "b.txt", data)]
        oid = entries[1][4]
        if hostile:
            _replace_object(repo, oid, damage(repo.objects.get_stored(oid), oid))
        return _restore(repo, tmp, entries)

    return build


def _bomb(stored: bytes, oid: str) -> bytes:
    # 64 MiB of zeros compress to a few KiB; the header declares the real (small) length
    payload = zstandard.ZstdCompressor().compress(b"\0" * (64 * 1024 * 1024))
    return _stored(Kind.BLOB, 1, 600, payload)


def _declared_huge(stored: bytes, oid: str) -> bytes:
    return _stored(Kind.BLOB, 1, objects.MAX_OBJECT_BYTES + 1, stored[HEADER.size :])


def _wrong_digest(stored: bytes, oid: str) -> bytes:
    _, other = objects.encode(Kind.BLOB, b"victim content " * 39 + b"evil content   ")
    return other


def _kind_confusion(stored: bytes, oid: str) -> bytes:
    kind, raw = objects.decode(oid, stored)
    return objects.encode(Kind.MANIFEST, raw)[1]


def _truncated_payload(stored: bytes, oid: str) -> bytes:
    return stored[: len(stored) - 7]


def _truncated_header(stored: bytes, oid: str) -> bytes:
    return stored[:9]


def _empty(stored: bytes, oid: str) -> bytes:
    return b""


def _object_v2(stored: bytes, oid: str) -> bytes:
    return stored[:3] + bytes([2]) + stored[4:]


def _unknown_codec(stored: bytes, oid: str) -> bytes:
    return stored[:5] + bytes([9]) + stored[6:]


def _missing(repo: Repo, oid: str) -> None:
    repo.objects.delete(oid)  # loose or packed


def missing_object(repo: Repo, tmp: Path, hostile: bool) -> Callable[[], Any]:
    entries = [_file(repo, "a.txt", b"present"), _file(repo, "b.txt", b"gone soon")]
    if hostile:
        _missing(repo, entries[1][4])
    return _restore(repo, tmp, entries)


def chunk_list_bomb(repo: Repo, tmp: Path, hostile: bool) -> Callable[[], Any]:
    """A world tree whose chunk list repeats one chunk until it declares ~3 GiB."""
    piece = os.urandom(200 * 1024)
    chunk = repo.objects.put(Kind.BLOB, piece)
    count = 16_000 if hostile else 2
    listing = repo.objects.put(Kind.CHUNKS, objects.pack_chunk_list([(chunk, len(piece))] * count))
    doc = {"format": "agentsnap-manifest", "v": 1, "parents": [], "time": 1.0, "author": "", "agent": "",
           "message": "", "meta": {}, "layers": {"world": {"tree": listing}}}
    if not hostile:
        doc["layers"] = {"world": {"tree": content.put_bytes(repo.objects, pack({"entries": [], "v": 1}))}}
    oid = repo.objects.put(Kind.MANIFEST, pack(doc))
    return lambda: repo.restore(oid, to=tmp / "target")


def file_bigger_than_declared(repo: Repo, tmp: Path, hostile: bool) -> Callable[[], Any]:
    """A tree entry declaring 10 bytes whose content is 3 MiB: restore stops at the declared size."""
    big = _blob(repo, os.urandom(3 * 1024 * 1024))
    e = ["big.bin", "f", 0o644, 10, big] if hostile else ["big.bin", "f", 0o644, 3 * 1024 * 1024, big]
    return _restore(repo, tmp, [e])


def manifest_case(**fields: Any) -> Build:
    def build(repo: Repo, tmp: Path, hostile: bool) -> Callable[[], Any]:
        entries = [_file(repo, "ok.txt")]
        oid = _plant(repo, entries, **(fields if hostile else {}))
        return lambda: repo.restore(oid, to=tmp / "target")

    return build


def oversized_manifest(repo: Repo, tmp: Path, hostile: bool) -> Callable[[], Any]:
    oid = _plant(repo, [_file(repo, "ok.txt")], meta={"padding": "x" * ((17 if hostile else 1) * 1024 * 1024)})
    return lambda: repo.restore(oid, to=tmp / "target")


def tree_v2(repo: Repo, tmp: Path, hostile: bool) -> Callable[[], Any]:
    oid = _plant(repo, [_file(repo, "ok.txt")], tree_v=2 if hostile else 1)
    return lambda: repo.restore(oid, to=tmp / "target")


def manifest_v2(repo: Repo, tmp: Path, hostile: bool) -> Callable[[], Any]:
    oid = _plant(repo, [_file(repo, "ok.txt")], manifest_v=2 if hostile else 1)
    return lambda: repo.restore(oid, to=tmp / "target")


def not_a_manifest(repo: Repo, tmp: Path, hostile: bool) -> Callable[[], Any]:
    good = _plant(repo, [_file(repo, "ok.txt")])
    blob = _blob(repo, b"I am a blob, not a snapshot")
    return lambda: repo.restore(blob if hostile else good, to=tmp / "target")


def missing_parent(repo: Repo, tmp: Path, hostile: bool) -> Callable[[], Any]:
    parent = _plant(repo, [_file(repo, "p.txt")])
    child = _plant(repo, [_file(repo, "c.txt")], parents=[parent])
    if hostile:
        _missing(repo, parent)
    return lambda: repo.log(child)


def cyclic_parents(repo: Repo, tmp: Path, hostile: bool) -> Callable[[], Any]:
    """Two manifests naming each other can only exist under names they do not hash to: refused on read."""
    a = _plant(repo, [_file(repo, "a.txt")])
    b = _plant(repo, [_file(repo, "b.txt")], parents=[a])
    if hostile:
        doc = repo.manifest(a)
        doc["parents"] = [b]
        _replace_object(repo, a, objects.encode(Kind.MANIFEST, pack(doc))[1])
    return lambda: repo.log(b)


def self_parent(repo: Repo, tmp: Path, hostile: bool) -> Callable[[], Any]:
    good = _plant(repo, [_file(repo, "a.txt")])
    if not hostile:
        return lambda: repo.log(good)
    # a manifest that names itself: store it under that name (its digest cannot match)
    doc = repo.manifest(good)
    doc["parents"] = [good]
    _replace_object(repo, good, objects.encode(Kind.MANIFEST, pack(doc))[1])
    return lambda: repo.log(good)


def pickle_layer(repo: Repo, tmp: Path, hostile: bool) -> Callable[[], Any]:
    """A state layer holding a pickle that would create a file in the canary when unpickled."""

    class Exploit:
        def __reduce__(self) -> tuple[Any, ...]:
            return (open, (str(tmp / "canary" / "pickled"), "w"))

    payload = pickle.dumps(Exploit()) if hostile else pack({"ok": True})
    oid = _plant(repo, [_file(repo, "ok.txt")])
    doc = repo.manifest(oid)
    doc["layers"]["state"] = {"content": content.put_bytes(repo.objects, payload)}
    snap = repo.objects.put(Kind.MANIFEST, pack(doc))
    return lambda: repo.read_layer(snap, "state")


def msgpack_ext_layer(repo: Repo, tmp: Path, hostile: bool) -> Callable[[], Any]:
    import msgpack

    value = msgpack.ExtType(42, b"\x80\x04evil") if hostile else b"\x80\x04evil"
    oid = _plant(repo, [_file(repo, "ok.txt")])
    doc = repo.manifest(oid)
    doc["layers"]["state"] = {"content": content.put_bytes(repo.objects, msgpack.packb({"v": value}))}
    snap = repo.objects.put(Kind.MANIFEST, pack(doc))
    return lambda: repo.read_layer(snap, "state")


def store_format_v2(repo: Repo, tmp: Path, hostile: bool) -> Callable[[], Any]:
    other = tmp / "other-store"
    LocalStore(other, create=True).close()
    if hostile:
        (other / "format.json").write_text('{"format": "agentsnap-store", "version": 4}\n')  # 2, 3 = packs (read)
    return lambda: LocalStore(other).close()


def index_schema_v2(repo: Repo, tmp: Path, hostile: bool) -> Callable[[], Any]:
    import sqlite3

    other = tmp / "other-store"
    LocalStore(other, create=True).close()
    if hostile:
        db = sqlite3.connect(other / "index.sqlite")
        db.execute("UPDATE meta SET value='2' WHERE key='schema'")
        db.commit()
        db.close()
    return lambda: LocalStore(other).close()


def fetched_object(damage: Callable[[bytes, str], bytes]) -> Build:
    """A peer hands over stored bytes (push/fetch path): ``put_stored`` verifies before accepting."""

    def build(repo: Repo, tmp: Path, hostile: bool) -> Callable[[], Any]:
        oid, stored = objects.encode(Kind.BLOB, b"payload from a peer " * 10)
        if hostile:
            stored = damage(stored, oid)
        return lambda: repo.objects.put_stored(oid, stored)

    return build


def _inside_dir(repo: Repo, hostile: bool) -> list[list[Any]]:
    return [["sub", "d", 0o755, 0, ""], ["sub/x.txt", "f", 0o644, 1, _blob(repo, b"x")]]


CASES = [
    # paths
    Case("dotdot", "path", path_case("../canary/pwned", "canary-ok/pwned"), UnsafeSnapshot, "escapes"),
    Case("dotdot-inner", "path", path_case("a/../../canary/pwned", "a/b/pwned"), UnsafeSnapshot, "escapes"),
    Case("absolute", "path", path_case("{tmp}/canary/pwned", "tmp/canary/pwned"), UnsafeSnapshot, "absolute"),
    Case("drive-letter", "path", path_case("C:/Windows/pwned", "C/Windows/pwned"), UnsafeSnapshot, "absolute"),
    Case("store-dir", "path", path_case(".agentsnap/objects/pwned", "agentsnap/objects/pwned"), UnsafeSnapshot,
         "store"),
    Case("nul-byte", "path", path_case("ok\x00/../../canary", "ok"), UnsafeSnapshot, "NUL"),
    Case("missing-parent-dir", "path", path_case("nodir/pwned", "dir/pwned"), UnsafeSnapshot,
         "not a directory entry"),
    Case("empty-part", "path", path_case("a//pwned", "a/pwned"), UnsafeSnapshot, "normalised"),
    Case("dot-part", "path", path_case("./pwned", "pwned"), UnsafeSnapshot, "normalised"),
    Case("too-long", "path", path_case("a/" * 2100 + "x", "a/" * 20 + "x"), UnsafeSnapshot, "too long"),
    # symlinks
    Case("link-out", "symlink", link_case(lambda r, h: [["l", "l", 0o777, 0, "../canary" if h else "sub"]]),
         UnsafeSnapshot, "outside"),
    Case("link-absolute", "symlink", link_case(lambda r, h: [["l", "l", 0o777, 0, "/etc" if h else "etc"]]),
         UnsafeSnapshot, "outside"),
    Case("link-deep-out", "symlink",
         link_case(lambda r, h: [["a", "d", 0o755, 0, ""], ["a/b", "d", 0o755, 0, ""],
                                 ["a/b/l", "l", 0o777, 0, "../../../canary" if h else "../../x"]]),
         UnsafeSnapshot, "outside"),
    Case("write-through-link", "symlink",
         link_case(lambda r, h: [["d", "l", 0o777, 0, "../canary"] if h else ["d", "d", 0o755, 0, ""],
                                 ["d/pwned", "f", 0o644, 1, _blob(r, b"p")]], allow_external_symlinks=True),
         UnsafeSnapshot, "nested under symlink"),
    Case("write-through-inner-link", "symlink",
         link_case(lambda r, h: _inside_dir(r, h) + [["l", "l", 0o777, 0, "sub"] if h else ["l", "d", 0o755, 0, ""],
                                                      ["l/y.txt", "f", 0o644, 1, _blob(r, b"y")]]),
         UnsafeSnapshot, "nested under symlink"),
    Case("write-through-link-unsorted", "symlink",
         link_case(lambda r, h: [["d/pwned", "f", 0o644, 1, _blob(r, b"p")],
                                 ["d", "l", 0o777, 0, "../canary"] if h else ["d", "d", 0o755, 0, ""]],
                   allow_external_symlinks=True),
         UnsafeSnapshot, "nested under non-directory"),
    Case("file-under-file", "symlink",
         link_case(lambda r, h: [_file(r, "f"), *([] if h else [["g", "d", 0o755, 0, ""]]),
                                 _file(r, "f/x" if h else "g/x")]),
         UnsafeSnapshot, "nested under file"),
    # hard links, devices, FIFOs
    Case("hardlink", "device", kind_case("h"), UnsafeSnapshot, "hard links"),
    Case("char-device", "device", kind_case("c"), UnsafeSnapshot, "devices"),
    Case("block-device", "device", kind_case("b"), UnsafeSnapshot, "devices"),
    Case("fifo", "device", kind_case("p"), UnsafeSnapshot, "FIFOs"),
    Case("socket", "device", kind_case("s"), UnsafeSnapshot, "unknown entry kind"),
    Case("setuid-mode", "device", field_case(2, 0o4755), UnsafeSnapshot, "bad mode"),
    Case("negative-size", "entry", field_case(3, -1), UnsafeSnapshot, "bad size"),
    Case("bad-content-id", "entry", field_case(4, "../../etc/passwd"), UnsafeSnapshot, "content id"),
    Case("duplicate", "entry", link_case(lambda r, h: [_file(r, "a"), _file(r, "a" if h else "b")]),
         UnsafeSnapshot, "duplicate"),
    Case("short-entry", "entry", link_case(lambda r, h: [["a", "f", 0o644, 1] if h else _file(r, "a")]),
         UnsafeSnapshot, "malformed"),
    # decompression bombs and oversized input
    Case("zstd-bomb", "bomb", object_case(_bomb), ObjectCorrupt, "bad compressed data|length"),
    Case("declared-huge", "bomb", object_case(_declared_huge), ObjectCorrupt, "over the limit"),
    Case("chunk-list-bomb", "bomb", chunk_list_bomb, ObjectCorrupt, "content too large"),
    Case("file-over-declared-size", "bomb", file_bigger_than_declared, ObjectCorrupt, "file size differs"),
    Case("oversized-manifest", "oversized", oversized_manifest, ObjectCorrupt, "oversized manifest"),
    # wrong digests and truncation
    Case("wrong-digest", "digest", object_case(_wrong_digest), ObjectCorrupt, "digest mismatch"),
    Case("kind-confusion", "digest", object_case(_kind_confusion), ObjectCorrupt, "digest mismatch"),
    Case("not-a-manifest", "digest", not_a_manifest, UnknownSnapshot, "unknown snapshot"),
    Case("fetched-wrong-digest", "digest", fetched_object(_wrong_digest), ObjectCorrupt, "digest mismatch"),
    Case("truncated-payload", "truncated", object_case(_truncated_payload), ObjectCorrupt, "compressed|length"),
    Case("truncated-header", "truncated", object_case(_truncated_header), ObjectCorrupt, "truncated header"),
    Case("empty-object", "truncated", object_case(_empty), ObjectCorrupt, "truncated header"),
    Case("fetched-truncated", "truncated", fetched_object(_truncated_payload), ObjectCorrupt, "compressed|length"),
    Case("missing-object", "truncated", missing_object, ObjectMissing, "missing"),
    Case("unknown-codec", "truncated", object_case(_unknown_codec), ObjectCorrupt, "unknown codec"),
    # parents
    Case("missing-parent", "parents", missing_parent, ObjectMissing, "missing"),
    Case("cyclic-parents", "parents", cyclic_parents, ObjectCorrupt, "digest mismatch"),
    Case("self-parent", "parents", self_parent, ObjectCorrupt, "digest mismatch"),
    Case("parents-not-ids", "parents", manifest_case(parents=["../../x"]), ObjectCorrupt, "bad parents"),
    # format versions
    Case("object-v2", "version", object_case(_object_v2), UnsupportedFormat, "format version 2"),
    Case("manifest-v2", "version", manifest_v2, UnsupportedFormat, "snapshot .* format version 2"),
    Case("tree-v2", "version", tree_v2, UnsupportedFormat, "world tree .* format version 2"),
    Case("store-v2", "version", store_format_v2, UnsupportedFormat, "store .* format version 4"),
    Case("index-v2", "version", index_schema_v2, UnsupportedFormat, "index .* format version 2"),
    Case("manifest-format", "version", manifest_case(format="pickle"), ObjectCorrupt, "not a snapshot manifest"),
    # pickle and other code-carrying payloads
    Case("pickle-layer", "pickle", pickle_layer, DecodeError, "cannot decode"),
    Case("msgpack-ext", "pickle", msgpack_ext_layer, DecodeError, "extension type"),
]


def _snapshot_outside(tmp: Path) -> dict[str, Any]:
    """Everything under tmp except the store and the target: names, kinds, sizes, contents."""
    out: dict[str, Any] = {}
    for dirpath, dirnames, files in os.walk(tmp):
        rel_dir = os.path.relpath(dirpath, tmp)
        dirnames[:] = [d for d in dirnames if not (rel_dir == "." and d in ("work", "target", "other-store"))]
        for name in dirnames + files:
            full = os.path.join(dirpath, name)
            st = os.lstat(full)
            data = open(full, "rb").read() if stat.S_ISREG(st.st_mode) else None
            out[os.path.join(rel_dir, name)] = (stat.S_IFMT(st.st_mode), data)
    return out


@pytest.fixture
def setting(tmp_path: Path) -> tuple[Repo, Path]:
    canary = tmp_path / "canary"
    canary.mkdir()
    (canary / "keep.txt").write_text("the canary lives\n")
    repo = Repo.init(tmp_path / "work")
    yield repo, tmp_path
    repo.close()


def test_corpus_covers_every_category() -> None:
    cats = {c.category for c in CASES}
    assert {"path", "symlink", "device", "bomb", "oversized", "digest", "truncated", "parents", "version",
            "pickle"} <= cats
    assert len(CASES) >= 30


@pytest.mark.timeout(120)
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_hostile_case_is_refused_and_nothing_escapes(setting: tuple[Repo, Path], case: Case) -> None:
    repo, tmp = setting
    action = case.build(repo, tmp, True)
    before = _snapshot_outside(tmp)
    with pytest.raises(case.error, match=case.match):
        action()
    TALLY["rejected"] += 1
    after = _snapshot_outside(tmp)
    if after != before:
        TALLY["escapes"] += 1
    assert after == before, f"written outside the target: {set(after) ^ set(before)}"
    target = tmp / "target"
    assert not target.exists() or not any(target.iterdir()), "a refused restore left files in the target"


@pytest.mark.timeout(120)
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_harmless_twin_restores(setting: tuple[Repo, Path], case: Case) -> None:
    repo, tmp = setting
    result = case.build(repo, tmp, False)()
    TALLY["restored"] += 1
    target = tmp / "target"
    if isinstance(result, dict) and "files" in result:
        written = [p for p in target.rglob("*") if p.is_file()]
        assert len(written) == result["files"]
        assert not [p for p in written if p.name.startswith(".agentsnap-tmp-")]
    assert (tmp / "canary" / "keep.txt").read_text() == "the canary lives\n"


def test_pickle_bytes_inside_msgpack_stay_bytes(setting: tuple[Repo, Path]) -> None:
    """A pickle stored as a plain bytes value comes back as bytes: nothing ever unpickles it."""
    repo, tmp = setting
    evil = pickle.dumps({"any": "pickle"})
    snap = repo.snapshot("s", layers={"state": {"blob": evil}}, capture_world=False)
    assert repo.read_layer(snap, "state") == {"blob": evil}


def test_capture_skips_fifos_and_devices_and_splits_hard_links(repo: Repo, tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("shared inode")
    os.link(outside, repo.root / "hard.txt")
    os.mkfifo(repo.root / "fifo")
    snap = repo.snapshot("s")
    kinds = {e[0]: e[1] for e in repo.world_entries(snap)}
    assert kinds == {"hard.txt": "f"}
    repo.restore(snap.id, to=tmp_path / "copy")
    copy = tmp_path / "copy" / "hard.txt"
    copy.write_text("changed")  # the restored file is its own inode: the outside file is untouched
    assert outside.read_text() == "shared inode"


def test_hostile_totals_printed() -> None:
    print(f"\nhostile corpus: {len(CASES)} cases, {TALLY['rejected']} inputs rejected, {TALLY['restored']} twins "
          f"restored, {TALLY['escapes']} escapes")
    assert TALLY["escapes"] == 0


def test_in_place_restore_of_a_corrupt_object_leaves_no_temp_file(repo: Repo) -> None:
    """Regression: a corrupt object mid-restore left ``.agentsnap-tmp-*`` in the working tree."""
    (repo.root / "a.txt").write_bytes(b"good content " * 10)
    snap = repo.snapshot("s")
    oid = next(e[4] for e in repo.world_entries(snap) if e[0] == "a.txt")
    (repo.root / "a.txt").unlink()
    _replace_object(repo, oid, _truncated_payload(repo.objects.get_stored(oid), oid))
    with pytest.raises(ObjectCorrupt):
        repo.restore(snap.id)
    assert not [p for p in repo.root.iterdir() if p.name.startswith(".agentsnap-tmp-")]
