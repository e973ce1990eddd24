"""What a snapshot binds to in the effects ledger (count, head, kid, the branch's lineage) is read incrementally: a
snapshot reads only the entries appended since the last one, and always records what a fold of the whole ledger
gives (docs/EFFECTS.md)."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
from agentsnap_core import Repo
from agentsnap_core.layers import effects_ledger
from agentsnap_core.layers.effects_ledger import BINDING_CACHE, LEDGER_FILE, Ledger, store_for
from test_effects import effects_key_home  # noqa: F401  (autouse: a private key dir per test)


def _expected(repo: Repo, branch: str | None) -> dict[str, Any] | None:
    """The binding as a fresh, whole fold of the ledger says it (what bind_snapshot recorded before); None for an
    empty ledger (no effects layer then)."""
    full = Ledger(store_for(repo), repo).sync()
    if not full.entries:
        return None
    return {**full.binding(), "branch": branch, "lineage": full.lineage_of(branch) if branch else None}


def _recorded(repo: Repo, snap_id: str) -> dict[str, Any] | None:
    rec = repo.manifest(snap_id)["layers"].get("effects")
    return None if rec is None else {k: rec[k] for k in ("count", "head", "kid", "branch", "lineage")}


def _rows_read(monkeypatch: pytest.MonkeyPatch, store: Any) -> list[int]:
    """Spy on the ledger store's reads: the number of rows each returned, appended to the list returned."""
    read: list[int] = []
    real = type(store).read

    def spy(self, start: int = 0):  # type: ignore[no-untyped-def]
        rows = real(self, start)
        read.append(len(rows))
        return rows

    monkeypatch.setattr(type(store), "read", spy)
    return read


def _folded_500(tmp_path: Path) -> Repo:
    """A store whose ledger holds 500 entries, folded once by a snapshot."""
    repo = Repo.init(tmp_path / "work")
    (repo.root / "a.txt").write_text("a")
    _append(repo, 500, "old")
    repo.snapshot("first")
    return repo


def _append(repo: Repo, n: int, tag: str) -> None:
    Ledger.for_repo(repo).append_many([{"kind": "note", "text": f"{tag}-{i}"} for i in range(n)])


@pytest.mark.parametrize("seed", range(3))
def test_every_snapshot_binds_what_a_whole_fold_of_the_ledger_gives(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    repo = Repo.init(tmp_path / "work")
    (repo.root / "a.txt").write_text("a")
    repo.snapshot("base")
    branches = ["main"]
    seen: set[str] = set()
    for step in range(40):
        op = rng.choice(["append", "append", "fork", "snapshot", "snapshot", "snapshot_branch"])
        if op == "append":
            _append(repo, rng.randint(1, 5), f"s{step}")
        elif op == "fork":
            branches += [b["branch"] for b in repo.fork(None, 2, prefix=f"f{step}")]
        else:
            (repo.root / "a.txt").write_text(f"a{step}")
            branch = rng.choice(branches) if op == "snapshot_branch" else "main"
            snap = repo.snapshot(f"s{step}", ref=f"refs/heads/{branch}", move_head=branch == "main")
            assert _recorded(repo, snap.id) == _expected(repo, branch), f"seed {seed}, step {step}"
            seen.add(((_recorded(repo, snap.id) or {}).get("lineage") or "").partition("@")[1])
    assert seen >= {"@"}  # snapshots on forked branches (a lineage other than the branch name) were among them
    repo.close()


def test_a_snapshot_reads_only_the_entries_appended_since_the_last_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The speed property (a snapshot's cost must not grow with the ledger): rows read from the ledger store."""
    repo = _folded_500(tmp_path)
    store = store_for(repo)
    read = _rows_read(monkeypatch, store)
    _append(repo, 3, "new")
    read.clear()
    snap = repo.snapshot("second")
    assert sum(read) <= 4  # the last folded entry (its MAC checked) and the 3 new ones
    assert _recorded(repo, snap.id) == _expected(repo, "main")
    repo.close()


@pytest.mark.parametrize("how", ["damaged", "another ledger"])
def test_a_cache_that_does_not_match_the_ledger_is_folded_again(tmp_path: Path, how: str) -> None:
    repo = Repo.init(tmp_path / "work")
    (repo.root / "a.txt").write_text("a")
    repo.snapshot("base")
    repo.fork(None, 2, prefix="x")
    _append(repo, 5, "one")
    repo.snapshot("first")
    cache = repo.store_dir / BINDING_CACHE
    assert cache.is_file()
    if how == "damaged":
        cache.write_bytes(b"\x93not a cache")
    else:  # the ledger replaced (deleted, then other entries): the cache's MAC is not at its index any more
        repo.close()
        (repo.store_dir / LEDGER_FILE).unlink()
        repo = Repo.open(tmp_path / "work")
        _append(repo, 9, "two")
    (repo.root / "a.txt").write_text("b")
    snap = repo.snapshot("second")
    assert _recorded(repo, snap.id) == _expected(repo, "main")
    if how == "another ledger":
        assert (_recorded(repo, snap.id) or {}).get("count") == 9
    repo.close()


def test_the_cache_is_only_a_cache(tmp_path: Path) -> None:
    """Deleted or unwritable, snapshots bind the same."""
    repo = Repo.init(tmp_path / "work")
    (repo.root / "a.txt").write_text("a")
    repo.snapshot("base")
    repo.fork(None, 1, prefix="y")
    _append(repo, 2, "n")
    s1 = repo.snapshot("one")
    (repo.store_dir / BINDING_CACHE).unlink()
    (repo.root / "a.txt").write_text("b")
    s2 = repo.snapshot("two")
    one, two = _recorded(repo, s1.id), _recorded(repo, s2.id)
    assert one is not None and one == two == _expected(repo, "main")
    assert effects_ledger.binding_view(repo, store_for(repo))[0]["count"] == two["count"]
    repo.close()


def _forks(repo: Repo) -> list[tuple[Any, ...]]:
    full = Ledger(store_for(repo), repo).sync()
    return [(e["branch"], e["parent"], e["policy"]) for e in full.entries if e.get("kind") == "fork"]


@pytest.mark.parametrize("seed", range(3))
def test_forks_from_new_processes_record_what_a_folded_ledger_records(tmp_path: Path, seed: int) -> None:
    """The same random forks (from main and from forked branches, notes appended between them), once through one
    long-lived Repo whose ledger is folded in memory and once through a new Repo per command, as the CLI runs
    them (the fork reads only the entries since the last snapshot or fork): the same fork entries, parents
    (lineage ids) included, and a ledger that verifies."""
    rng = random.Random(seed)
    plan = [(rng.choice(["fork", "fork", "note", "snapshot"]), rng.random(), rng.randint(1, 3)) for _ in range(25)]
    results = []
    for mode in ("folded", "new process"):
        repo = Repo.init(tmp_path / mode)
        (repo.root / "a.txt").write_text("a")
        repo.snapshot("base")
        Ledger.for_repo(repo).sync()
        branches = ["main"]
        for step, (op, pick, n) in enumerate(plan):
            if mode == "new process":
                repo.close()
                repo = Repo.open(tmp_path / mode)
            if op == "fork":
                parent = branches[int(pick * len(branches))]
                branches += [b["branch"] for b in repo.fork(parent, n, prefix=f"f{step}")]
            elif op == "note":
                Ledger(store_for(repo), repo).append_many([{"kind": "note", "text": f"{step}-{i}"} for i in range(n)])
            else:
                (repo.root / "a.txt").write_text(f"a{step}")
                repo.snapshot(f"s{step}")
        assert effects_ledger.verify_ledger(repo)["status"] == "ok"
        results.append(_forks(repo))
        repo.close()
    assert results[0] == results[1]
    assert any("@" in parent for _b, parent, _p in results[1])  # forks of forked branches were among them


def test_a_fork_in_a_new_process_reads_only_the_entries_appended_since_the_last_snapshot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The speed property of a fork (its cost must not grow with the ledger): rows read from the ledger store."""
    repo = _folded_500(tmp_path)
    _append(repo, 3, "new")
    repo.close()
    repo = Repo.open(tmp_path / "work")
    store = store_for(repo)
    read = _rows_read(monkeypatch, store)
    repo.fork(None, 12, prefix="p")
    assert sum(read) <= 4  # the last folded entry (its MAC checked) and the 3 new ones
    assert [b for b, _parent, _policy in _forks(repo)] == [f"p-{i}" for i in range(1, 13)]
    assert effects_ledger.verify_ledger(repo)["status"] == "ok"
    repo.close()


def test_a_fork_after_another_writer_appended_meanwhile_goes_after_its_entries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process appends between the fork's read of the ledger and its write: the store refuses the write,
    the fork reads again and appends after that entry; nothing is lost and the chain verifies."""
    repo = Repo.init(tmp_path / "work")
    (repo.root / "a.txt").write_text("a")
    repo.snapshot("base")
    _append(repo, 2, "before")
    repo.close()
    repo = Repo.open(tmp_path / "work")
    real = effects_ledger._write_chained
    calls: list[int] = []

    def racing(store, key, start, prev, records):  # type: ignore[no-untyped-def]
        if records[0].get("kind") != "fork":  # the other writer's own append
            return real(store, key, start, prev, records)
        calls.append(start)
        if len(calls) == 1:
            Ledger(store_for(repo), repo).append_many([{"kind": "note", "text": "meanwhile"}])
        return real(store, key, start, prev, records)

    monkeypatch.setattr(effects_ledger, "_write_chained", racing)
    repo.fork(None, 3, prefix="q")
    assert calls == [2, 3]
    full = Ledger(store_for(repo), repo).sync()
    assert [e.get("text") or e.get("branch") for e in full.entries] == ["before-0", "before-1", "meanwhile", "q-1",
                                                                        "q-2", "q-3"]
    assert effects_ledger.verify_ledger(repo)["status"] == "ok"
    repo.close()
