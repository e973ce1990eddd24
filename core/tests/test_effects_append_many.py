"""The ledger appends many entries in one store transaction (a fork of N branches: one durable commit, not N).

Also: a store without ``append_many`` (S3 writes one conditional object per entry) still gets them all, in order,
and an appender that lands between two of them moves the rest after it; the chain verifies either way.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from agentsnap_core import Repo
from agentsnap_core.errors import AgentSnapError
from agentsnap_core.layers.effects_ledger import Ledger, store_for, verify_ledger
from agentsnap_core.stores.ledger import SqliteLedgerStore
from test_effects import effects_key_home  # noqa: F401  (autouse: a private key dir per test)


class OneAtATime:
    """A ledger store with only the protocol's ``append`` (as S3's), counting the calls."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.appends = 0

    def count(self) -> int:
        return int(self.inner.count())

    def read(self, start: int = 0) -> list[tuple[bytes, bytes]]:
        return list(self.inner.read(start))

    def append(self, index: int, body: bytes, mac: bytes, seal: bytes) -> bool:
        self.appends += 1
        return bool(self.inner.append(index, body, mac, seal))

    def seal(self) -> bytes | None:
        return self.inner.seal()  # type: ignore[no-any-return]


@pytest.fixture
def repo(tmp_path: Path) -> Any:
    r = Repo.init(tmp_path / "work")
    (r.root / "a.txt").write_text("a\n")
    r.snapshot("base")
    yield r
    r.close()


def test_fork_of_twelve_branches_writes_the_ledger_in_one_transaction(
    repo: Repo, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[tuple[str, int]] = []
    single, many = SqliteLedgerStore.append, getattr(SqliteLedgerStore, "append_many", None)

    def count_single(self: SqliteLedgerStore, index: int, body: bytes, mac: bytes, seal: bytes) -> bool:
        calls.append(("append", 1))
        return single(self, index, body, mac, seal)

    def count_many(self: SqliteLedgerStore, index: int, rows: list[tuple[bytes, bytes]], seal: bytes) -> bool:
        calls.append(("append_many", len(rows)))
        assert many is not None
        return bool(many(self, index, rows, seal))

    monkeypatch.setattr(SqliteLedgerStore, "append", count_single)
    if many is not None:  # (on a tree without append_many the count below says what happened instead)
        monkeypatch.setattr(SqliteLedgerStore, "append_many", count_many)
    names = [f["branch"] if "branch" in f else f["name"] for f in repo.fork("HEAD", n=12, prefix="try")]
    assert names == [f"try-{i}" for i in range(1, 13)]
    assert calls == [("append_many", 12)], f"one transaction for the 12 fork entries, got {calls}"
    led = Ledger.for_repo(repo).sync()
    forks = [e for e in led.entries if e.get("kind") == "fork"]
    assert [e["branch"] for e in forks] == names and [e["i"] for e in forks] == list(range(len(forks)))
    assert len({led.lineage_of(b) for b in names}) == 12  # each branch its own lineage, as before
    assert verify_ledger(repo)["status"] == "ok"


def test_a_store_without_append_many_gets_every_entry_in_order(repo: Repo) -> None:
    store = OneAtATime(store_for(repo))
    led = Ledger(store, repo)
    got = led.append_many([{"kind": "note", "note": f"n{i}"} for i in range(5)])
    assert store.appends == 5 and [e["i"] for e in got] == [0, 1, 2, 3, 4]
    assert [e["note"] for e in Ledger(store_for(repo), repo).sync().entries] == ["n0", "n1", "n2", "n3", "n4"]
    assert verify_ledger(repo)["status"] == "ok"


def test_an_append_between_two_of_them_moves_the_rest_after_it(repo: Repo) -> None:
    """Another process appends after the first of five: the other four follow it, none lost or doubled."""
    other = Ledger(store_for(repo), repo)

    class Interleaved(OneAtATime):
        def append(self, index: int, body: bytes, mac: bytes, seal: bytes) -> bool:
            if index == 1 and not other.entries:
                other.sync().append({"kind": "note", "note": "other"})
            return super().append(index, body, mac, seal)

    led = Ledger(Interleaved(store_for(repo)), repo)
    got = led.append_many([{"kind": "note", "note": f"n{i}"} for i in range(5)])
    assert [e["note"] for e in got] == ["n0", "n1", "n2", "n3", "n4"]
    final = [e["note"] for e in Ledger(store_for(repo), repo).sync().entries]
    assert final == ["n0", "other", "n1", "n2", "n3", "n4"]
    assert verify_ledger(repo)["status"] == "ok"


def test_append_many_on_a_moved_index_writes_nothing(repo: Repo) -> None:
    """All or nothing: a stale view's batch is refused whole, then retried after the other entry."""
    store = store_for(repo)
    a, b = Ledger(store, repo).sync(), Ledger(store, repo).sync()
    a.append({"kind": "note", "note": "first"})
    assert b.try_append_many([{"kind": "note", "note": "x"}, {"kind": "note", "note": "y"}]) is None
    assert store.count() == 1
    assert [e["note"] for e in b.append_many([{"kind": "note", "note": "x"}, {"kind": "note", "note": "y"}])] == [
        "x",
        "y",
    ]
    assert [e["note"] for e in Ledger(store, repo).sync().entries] == ["first", "x", "y"]
    assert verify_ledger(repo)["status"] == "ok"


class Refusing(OneAtATime):
    """A store that says "not the next index" to every append, while nobody else appends (an inconsistent store)."""

    def append(self, index: int, body: bytes, mac: bytes, seal: bytes) -> bool:
        self.appends += 1
        return False


def test_a_store_that_refuses_every_append_is_an_error_not_an_endless_retry(repo: Repo) -> None:
    """append_many retried for ever when the store refused for any reason other than a concurrent appender."""
    led = Ledger(Refusing(store_for(repo)), repo).sync()
    count = led.store.count()
    with pytest.raises(AgentSnapError, match=rf"refused entry #{count} .* no other writer appended"):
        led.append_many([{"kind": "note", "note": "a"}, {"kind": "note", "note": "b"}])
    assert led.store.appends == 1 and led.store.count() == count  # one try, nothing appended
