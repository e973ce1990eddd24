"""Every store passes the same contract: local (via open_store), PostgreSQL, S3 and the combined one.

The servers are real (PostgreSQL 15, SeaweedFS ``weed mini``) on loopback ports; outside CI a
missing server skips, under ``CI=true`` it fails (``agentsnap_core.testing.servers.need``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from agentsnap_core.format.objects import Kind
from agentsnap_core.stores import mask_url, open_store
from agentsnap_core.stores.base import ObjectStore, RefStore, RefUpdate
from agentsnap_core.stores.postgres import SCHEMA_VERSION, PostgresDB
from agentsnap_core.testing.store_contract import StoreContract


def _opened(url: str) -> Any:
    store = open_store(url, create=True)
    assert isinstance(store.objects, ObjectStore) and isinstance(store.refs, RefStore)
    return store


class TestLocalStoreByURL(StoreContract):
    @pytest.fixture
    def store(self, tmp_path: Path) -> Any:
        s = _opened((tmp_path / "store").as_uri())
        yield s
        s.close()


class TestPostgresStore(StoreContract):
    @pytest.fixture
    def store(self, postgres_url: str) -> Any:
        s = _opened(postgres_url)
        yield s
        s.close()


class TestS3Store(StoreContract):
    @pytest.fixture
    def store(self, s3_url: str) -> Any:
        s = _opened(s3_url)
        yield s
        s.close()


class TestCombinedStore(StoreContract):
    @pytest.fixture
    def store(self, combined_url: str) -> Any:
        s = _opened(combined_url)
        yield s
        s.close()

    def test_objects_live_in_s3_and_refs_in_postgres(self, store: Any, combined_url: str) -> None:
        oid = store.objects.put(Kind.BLOB, b"where am I")
        store.refs.update_refs([RefUpdate("refs/heads/w", oid, None)], "w")
        assert type(store.objects).__name__ == "S3Objects"
        assert type(store.refs).__name__ == "PostgresRefs"
        again = open_store(combined_url)
        try:
            assert again.refs.get_ref("refs/heads/w") == oid and again.objects.get(oid)[1] == b"where am I"
        finally:
            again.close()


def test_postgres_schema_is_versioned_and_migrates_once(postgres_url: str) -> None:
    """Two opens of a fresh database: the first migrates, the second finds the current version."""
    open_store(postgres_url).close()
    store = open_store(postgres_url)
    try:
        assert store.db.version() == SCHEMA_VERSION
    finally:
        store.close()


def test_newer_postgres_schema_is_refused(postgres_url: str) -> None:
    from agentsnap_core import UnsupportedFormat

    store = open_store(postgres_url)
    with store.db.connection() as conn:
        conn.execute(f"UPDATE {store.db.schema}.meta SET value = '99' WHERE key = 'schema'")
    store.close()
    with pytest.raises(UnsupportedFormat, match="version 99"):
        open_store(postgres_url)


def test_s3_refs_race_is_linearized(s3_url: str) -> None:
    """Two handles on one S3 store: a stale compare-and-swap loses, the reflog has both updates in order."""
    from agentsnap_core import RefConflict

    a, b = open_store(s3_url, create=True), open_store(s3_url)
    try:
        x = a.objects.put(Kind.BLOB, b"x")
        y = a.objects.put(Kind.BLOB, b"y")
        a.refs.update_refs([RefUpdate("refs/heads/m", x, None)], "a creates")
        with pytest.raises(RefConflict):
            b.refs.update_refs([RefUpdate("refs/heads/m", y, None)], "b thinks it is new")
        b.refs.update_refs([RefUpdate("refs/heads/m", y, x)], "b moves")
        assert a.refs.get_ref("refs/heads/m") == y
        assert [e.message for e in a.refs.reflog("refs/heads/m")] == ["b moves", "a creates"]
    finally:
        a.close()
        b.close()


def test_mask_url_hides_passwords() -> None:
    url = "postgresql://bob:hunter2@db:5432/x?objects=s3://b/p?endpoint=http://h:1&key=K&secret=S3CRET"
    masked = mask_url(url)
    assert "hunter2" not in masked and "S3CRET" not in masked
    assert masked.startswith("postgresql://bob:***@db:5432/x")


def test_postgres_pool_is_remade_after_fork(postgres_url: str) -> None:
    """A store opened before ``fork`` works in the child (psycopg connections are not fork-safe)."""
    import multiprocessing

    store = open_store(postgres_url)
    oid = store.objects.put(Kind.BLOB, b"parent")
    ctx = multiprocessing.get_context("fork")
    proc = ctx.Process(target=_child_update, args=(store, oid))
    proc.start()
    proc.join(60)
    assert proc.exitcode == 0
    assert store.refs.get_ref("refs/heads/child") == oid
    store.close()


def _child_update(store: Any, oid: str) -> None:
    store.refs.update_refs([RefUpdate("refs/heads/child", oid, None)], "from the child")


def test_pg_db_rejects_bad_schema_name(postgres_server: Any) -> None:
    from agentsnap_core.stores import InvalidStoreURL

    with pytest.raises(InvalidStoreURL, match="schema"):
        PostgresDB(postgres_server.url + "?schema=Robert'); DROP")


@pytest.mark.parametrize("kind", ["local", "postgres", "s3"])
def test_effects_ledger_storage_is_append_only_with_one_winner(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """Each store's ledger storage: appends in order, a second appender at one index loses, seal follows."""
    from agentsnap_core.stores import ledger_of

    url = (tmp_path / "s").as_uri() if kind == "local" else str(request.getfixturevalue(f"{kind}_url"))
    store = open_store(url, create=True)
    try:
        ledger = ledger_of(store)
        assert ledger.count() == 0 and ledger.seal() is None
        assert ledger.append(0, b"body0", b"mac0", b"seal0")
        assert not ledger.append(0, b"other", b"macX", b"sealX")  # index taken
        assert not ledger.append(2, b"gap", b"macG", b"sealG")  # not the next index
        assert ledger.append(1, b"body1", b"mac1", b"seal1")
        again = ledger_of(open_store(url))
        assert again.count() == 2 and again.read(0) == [(b"body0", b"mac0"), (b"body1", b"mac1")]
        assert again.read(1) == [(b"body1", b"mac1")] and again.seal() == b"seal1"
    finally:
        store.close()


@pytest.mark.parametrize("kind", ["local", "postgres"])
def test_effects_ledger_append_many_is_one_write_or_none(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """The stores with a transaction take a batch of rows whole (a fork's N entries: one commit), or none of it."""
    from agentsnap_core.stores import ledger_of

    url = (tmp_path / "s").as_uri() if kind == "local" else str(request.getfixturevalue(f"{kind}_url"))
    store = open_store(url, create=True)
    try:
        ledger = ledger_of(store)
        rows = [(b"body%d" % i, b"mac%d" % i) for i in range(3)]
        assert ledger.append_many(0, rows, b"seal2")
        assert not ledger.append_many(2, [(b"x", b"y"), (b"z", b"w")], b"sealX")  # index taken: nothing written
        assert not ledger.append_many(4, [(b"x", b"y")], b"sealX")  # not the next index
        assert ledger.count() == 3 and ledger.seal() == b"seal2"
        assert ledger.append_many(3, [(b"body3", b"mac3"), (b"body4", b"mac4")], b"seal4")
        again = ledger_of(open_store(url))
        assert again.read(0) == [*rows, (b"body3", b"mac3"), (b"body4", b"mac4")] and again.seal() == b"seal4"
    finally:
        store.close()


@pytest.mark.parametrize("kind", ["postgres", "s3"])
def test_batch_index_matches_single_rows(kind: str, request: pytest.FixtureRequest) -> None:
    from agentsnap_core.format import objects
    from agentsnap_core.stores.base import SnapshotRow

    store = open_store(str(request.getfixturevalue(f"{kind}_url")), create=True)
    try:
        ids = [objects.digest(Kind.MANIFEST, f"b{i}".encode()) for i in range(5)]
        store.refs.index_snapshots([SnapshotRow(oid, (), 10.0 + i, f"b{i}", "a") for i, oid in enumerate(ids)])
        store.refs.index_snapshots([SnapshotRow(ids[0], (), 10.0, "b0", "a")])  # idempotent
        assert [r.id for r in store.refs.list_snapshots()] == ids[::-1]
    finally:
        store.close()
