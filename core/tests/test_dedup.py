"""Storage sharing: forks cost nothing until they diverge; edits store about one chunk."""

from __future__ import annotations

import os
import random
from pathlib import Path

from agentsnap_core import Repo
from agentsnap_core.format import objects
from agentsnap_core.format.objects import Kind
from conftest import store_size

MB = 1024 * 1024


def _random_tree(root: Path, files: int, size: int, seed: int = 7) -> list[Path]:
    rnd = random.Random(seed)
    out = []
    for i in range(files):
        d = root / f"pkg{i % 20:02d}"
        d.mkdir(exist_ok=True)
        p = d / f"module_{i:04d}.dat"
        p.write_bytes(rnd.randbytes(size))
        out.append(p)
    return out


def _edit_middle(p: Path, marker: bytes) -> None:
    data = bytearray(p.read_bytes())
    mid = len(data) // 2
    data[mid : mid + len(marker)] = marker
    p.write_bytes(bytes(data))


def _new_objects(repo: Repo, before: set[str]) -> dict[str, tuple[int, int]]:
    out = {}
    for oid in set(repo.objects.iter_oids()) - before:
        kind, raw = repo.objects.get(oid)
        out[oid] = (kind, len(raw))
    return out


def test_fork_12_on_100mb_tree_shares_storage(tmp_path: Path) -> None:
    root = tmp_path / "work"
    root.mkdir()
    files = _random_tree(root, files=1000, size=100 * 1024)  # 100 MB, incompressible
    repo = Repo.init(root)
    base = repo.snapshot("base")
    one_snapshot = store_size(repo)
    assert one_snapshot > 95 * MB

    forks = repo.fork(base.id, 12, worktrees=str(tmp_path / "forks"))
    grown = store_size(repo) - one_snapshot
    assert grown < 0.01 * one_snapshot, f"forking grew the store by {grown} bytes"

    # each fork changes 1% of the files (10 files, one edit in the middle of each)
    rnd = random.Random(1)
    for k, fork in enumerate(forks):
        wt = Path(fork["path"])
        for i in rnd.sample(range(len(files)), 10):
            _edit_middle(wt / files[i].relative_to(root), f"fork {k} edit {i}".encode())
        with Repo.open(wt) as r:
            r.snapshot(f"fork {k}")
    total = store_size(repo)
    assert total <= 1.1 * one_snapshot, f"12 diverged forks use {total / one_snapshot:.3f}x one snapshot"

    # and editing one worktree never changed another
    a, b = Path(forks[0]["path"]), Path(forks[1]["path"])
    diffs = sum((a / p.relative_to(root)).read_bytes() != (b / p.relative_to(root)).read_bytes() for p in files)
    assert 10 <= diffs <= 20


def _big_text(path: Path, size: int) -> None:
    rnd = random.Random(3)
    lines = []
    total = 0
    n = 0
    while total < size:
        line = f"{n:08d} " + rnd.randbytes(40).hex() + "\n"
        lines.append(line)
        total += len(line)
        n += 1
    path.write_text("".join(lines))


def _chunks_added(repo: Repo, before: set[str]) -> tuple[int, int]:
    new = _new_objects(repo, before)
    chunk_blobs = [n for oid, (k, n) in new.items() if k == Kind.BLOB and n > objects.CDC_MIN // 2]
    return len(chunk_blobs), sum(n for k, n in new.values() if k != Kind.BLOB)


def test_one_line_edit_in_50mb_file_stores_at_most_two_chunks(repo: Repo) -> None:
    big = repo.root / "big.txt"
    _big_text(big, 50 * MB)
    repo.snapshot("base")
    before = set(repo.objects.iter_oids())
    lines = big.read_text().splitlines(keepends=True)
    mid = len(lines) // 2
    lines[mid] = lines[mid].replace(lines[mid][:8], "EDITED!!", 1)
    big.write_text("".join(lines))
    repo.snapshot("one-line edit")
    chunks, metadata = _chunks_added(repo, before)
    assert chunks <= 2, f"a one-line edit stored {chunks} new chunks"
    assert metadata < 64 * 1024  # the chunk list, tree, manifest


def test_one_byte_insert_at_start_stores_at_most_two_chunks(repo: Repo) -> None:
    big = repo.root / "big.txt"
    _big_text(big, 50 * MB)
    repo.snapshot("base")
    before = set(repo.objects.iter_oids())
    data = big.read_bytes()
    big.write_bytes(b"!" + data)
    repo.snapshot("insert at start")
    chunks, _ = _chunks_added(repo, before)
    assert chunks <= 2, f"a 1-byte insert stored {chunks} new chunks"


def test_fork_without_worktrees_writes_no_objects(repo: Repo) -> None:
    (repo.root / "f.bin").write_bytes(os.urandom(1 * MB))
    snap = repo.snapshot("s")
    before = set(repo.objects.iter_oids())
    repo.fork(snap.id, 12)
    assert set(repo.objects.iter_oids()) == before
    assert sorted(repo.branches()) == sorted(["main"] + [f"attempt-{i}" for i in range(1, 13)])
