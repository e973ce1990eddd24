"""Fuzzing the decoders untrusted bytes reach: objects, canonical msgpack, chunk lists, manifests, world trees.

The property everywhere: any input either decodes or raises an :class:`AgentSnapError` subclass -
never another exception, a crash or a hang (pytest-timeout bounds each test). Hypothesis drives it;
``AGENTSNAP_LONG=1`` runs many more examples. Coverage-guided fuzzing with atheris is in
``test_fuzz_atheris.py``.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import msgpack
import pytest
import zstandard
from agentsnap_core import Repo
from agentsnap_core.errors import AgentSnapError
from agentsnap_core.format import content, objects
from agentsnap_core.format.encoding import pack, unpack
from agentsnap_core.format.objects import HEADER, MAGIC, Kind
from agentsnap_core.layers import world
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

LONG = os.environ.get("AGENTSNAP_LONG") == "1"
EXAMPLES = 4000 if LONG else 250
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), derandomize=not LONG)
TALLY = {"inputs": 0, "rejected": 0, "accepted": 0}

OIDS = st.one_of(st.text(max_size=70), st.just("0" * 64), st.from_regex(r"\A[0-9a-f]{64}\Z"))
scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2**63), 2**64 - 1), st.floats(allow_nan=True),
                    st.text(max_size=30), st.binary(max_size=30))
values = st.recursive(scalars, lambda c: st.one_of(st.lists(c, max_size=6),
                                                   st.dictionaries(st.text(max_size=10), c, max_size=6)),
                      max_leaves=30)


def _typed(fn: Any, *args: Any) -> Any:
    TALLY["inputs"] += 1
    try:
        out = fn(*args)
    except AgentSnapError:
        TALLY["rejected"] += 1
        return None
    TALLY["accepted"] += 1
    return out


def _valid_stored(raw: bytes, kind: int = Kind.BLOB) -> tuple[str, bytes]:
    return objects.encode(kind, raw)


@pytest.mark.timeout(300)
@SETTINGS
@given(oid=OIDS, data=st.binary(max_size=300))
def test_decode_arbitrary_bytes(oid: str, data: bytes) -> None:
    _typed(objects.decode, oid, data)


@pytest.mark.timeout(300)
@SETTINGS
@given(version=st.integers(0, 255), kind=st.integers(0, 255), codec=st.integers(0, 255),
       length=st.integers(0, 2**64 - 1), payload=st.binary(max_size=200), compress=st.booleans())
def test_decode_structured_headers(version: int, kind: int, codec: int, length: int, payload: bytes,
                                   compress: bool) -> None:
    if compress:
        payload = zstandard.ZstdCompressor().compress(payload)
    stored = HEADER.pack(MAGIC, version, kind, codec, length) + payload
    _typed(objects.decode, objects.digest(kind, payload), stored)


@pytest.mark.timeout(300)
@SETTINGS
@given(raw=st.binary(min_size=0, max_size=2000), cut=st.integers(0, 3000), flip=st.integers(0, 3000),
       extra=st.binary(max_size=20))
def test_decode_mutated_objects(raw: bytes, cut: int, flip: int, extra: bytes) -> None:
    oid, stored = _valid_stored(raw * 3)
    mutated = bytearray(stored[:cut] if cut < len(stored) else stored)
    if mutated and flip < len(mutated):
        mutated[flip] ^= 0x41
    mutated += extra
    out = _typed(objects.decode, oid, bytes(mutated))
    if out is not None:
        assert out == (Kind.BLOB, raw * 3)  # anything accepted is exactly the original


@pytest.mark.timeout(300)
@SETTINGS
@given(data=st.binary(max_size=400))
def test_unpack_arbitrary_bytes(data: bytes) -> None:
    _typed(unpack, data, "fuzz")


@pytest.mark.timeout(300)
@SETTINGS
@given(value=values)
def test_unpack_chunk_list_documents(value: Any) -> None:
    raw = msgpack.packb(value, use_bin_type=True)
    _typed(lambda: objects.unpack_chunk_list(objects.digest(Kind.CHUNKS, raw), raw))


# ---------------------------------------------------------------- manifests and trees in a real store

_REPO: dict[str, Any] = {}


def _repo() -> Repo:
    if "repo" not in _REPO:
        d = Path(tempfile.mkdtemp(prefix="agentsnap-fuzz-"))
        _REPO["dir"] = d
        _REPO["repo"] = Repo.init(d / "work")
        (d / "work" / "a.txt").write_text("hello")
        _REPO["good"] = _REPO["repo"].snapshot("seed")
        _REPO["blob"] = content.put_bytes(_REPO["repo"].objects, b"hello")
    return _REPO["repo"]  # type: ignore[no-any-return]


@pytest.fixture(scope="module", autouse=True)
def _cleanup() -> Any:
    yield
    if "repo" in _REPO:
        _REPO["repo"].close()
        shutil.rmtree(_REPO["dir"], ignore_errors=True)
        _REPO.clear()


def _manifest_like() -> st.SearchStrategy[dict[str, Any]]:
    layer = st.dictionaries(st.sampled_from(["tree", "env", "content", "refs", "count", "x"]),
                            st.one_of(values, OIDS, st.lists(OIDS, max_size=3)), max_size=4)
    return st.fixed_dictionaries(
        {"format": st.one_of(st.just("agentsnap-manifest"), st.text(max_size=5)),
         "v": st.one_of(st.just(1), st.integers(-2, 5), values),
         "parents": st.one_of(st.lists(OIDS, max_size=3), values),
         "time": st.one_of(st.floats(allow_nan=True), st.integers(), values),
         "layers": st.one_of(st.dictionaries(st.sampled_from(["world", "trace", "state"]), layer, max_size=3), values)},
        optional={"meta": values, "message": values, "agent": values},
    )


def _use_snapshot(repo: Repo, oid: str) -> None:
    snap = repo.get(oid)
    list(repo.walk([oid], limit=5))
    snap.summary()
    for name in snap.layers:
        if name == "world":
            repo.world_entries(snap)
        else:
            repo.read_layer(snap, name)


@pytest.mark.timeout(300)
@SETTINGS
@given(doc=st.one_of(_manifest_like(), values))
def test_manifest_documents(doc: Any) -> None:
    repo = _repo()
    try:
        oid = repo.objects.put(Kind.MANIFEST, pack(doc))
    except (AgentSnapError, ValueError):  # not storable at all (e.g. map keys of mixed types)
        return
    _typed(_use_snapshot, repo, oid)


entry = st.tuples(
    st.one_of(st.text(min_size=0, max_size=12),
              st.sampled_from(["a", "a/b", "../x", "/abs", ".agentsnap/x", "a" * 300]), values),
    st.one_of(st.sampled_from(["f", "l", "d", "h", "p", "c"]), values),
    st.one_of(st.integers(-1, 0o7777), values),
    st.one_of(st.integers(-1, 100), values),
    st.one_of(OIDS, st.sampled_from(["sub", "../..", "/etc"]), values),
).map(list)


def _near_valid_entry() -> st.SearchStrategy[list[Any]]:
    """Entries that mostly pass validation, so the fuzzer reaches the code that writes files."""
    names = st.sampled_from(["a", "b", "a/b", "a/b/c", "b/a", "a" * 256, "é" * 128, ".x", "a/.agentsnap-tmp-1-b"])
    return st.one_of(
        st.tuples(names, st.just("d"), st.integers(0, 0o777), st.just(0), st.just("")),
        st.tuples(names, st.just("f"), st.integers(0, 0o777), st.integers(0, 8), st.just("blob")),
        st.tuples(names, st.just("l"), st.just(0o777), st.just(0), st.sampled_from(["a", "../a", "b/../..", "/x"])),
    ).map(list)


def _with_blob(entries: list[list[Any]]) -> list[list[Any]]:
    blob = _REPO["blob"]
    return [[*e[:4], blob] if e[4] == "blob" else e for e in entries]


@pytest.mark.timeout(300)
@SETTINGS
@given(entries=st.lists(st.one_of(entry, _near_valid_entry(), _near_valid_entry()), max_size=6),
       version=st.sampled_from([1, 1, 1, 2, "1"]))
def test_world_trees_load_and_restore(entries: list[list[Any]], version: Any) -> None:
    repo = _repo()
    entries = _with_blob(entries)
    try:
        tree = content.put_bytes(repo.objects, pack({"entries": entries, "v": version}))
    except AgentSnapError:
        return
    target = Path(tempfile.mkdtemp(prefix="agentsnap-fuzz-target-"))
    try:
        loaded = _typed(world.load_tree, repo.objects, tree)
        if loaded is not None:
            _typed(world.materialize, repo.objects, target, loaded, [])
    finally:
        for dirpath, dirnames, _ in os.walk(target):
            for d in dirnames:
                p = os.path.join(dirpath, d)
                if not os.path.islink(p):
                    os.chmod(p, 0o700)
        shutil.rmtree(target, ignore_errors=True)


def test_values_msgpack_cannot_hold_are_refused_with_a_typed_error(repo: Repo) -> None:
    """Regression: an int outside 64 bits raised a bare OverflowError from snapshot()."""
    with pytest.raises(AgentSnapError, match="cannot be stored"):
        repo.snapshot("s", layers={"state": {"n": 2**70}}, capture_world=False)


def test_fuzz_totals_printed() -> None:
    print(f"\nfuzz: {TALLY['inputs']} inputs, {TALLY['rejected']} rejected with typed errors, "
          f"{TALLY['accepted']} accepted, 0 crashes")
    assert TALLY["inputs"] > 0
