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
    repo = Repo.init(tmp_path / "work")
    (repo.root / "a.txt").write_text("a")
    _append(repo, 500, "old")
    repo.snapshot("first")  # folds the 500 once
    store = store_for(repo)
    read: list[int] = []
    real = type(store).read

    def spy(self, start: int = 0):  # type: ignore[no-untyped-def]
        rows = real(self, start)
        read.append(len(rows))
        return rows

    monkeypatch.setattr(type(store), "read", spy)
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
