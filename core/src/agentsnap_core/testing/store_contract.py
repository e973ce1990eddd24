"""Contract tests every store implementation runs (dulwich's ``ObjectStoreTests`` pattern).

Subclass :class:`StoreContract` in a test module and provide a ``store`` fixture returning an
object with ``.objects`` (:class:`~agentsnap_core.stores.base.ObjectStore`) and ``.refs``
(:class:`~agentsnap_core.stores.base.RefStore`)::

    class TestMyStore(StoreContract):
        @pytest.fixture
        def store(self, tmp_path):
            return MyStore(...)
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from agentsnap_core.errors import ObjectCorrupt, ObjectMissing, RefConflict
from agentsnap_core.format import objects
from agentsnap_core.format.objects import Kind
from agentsnap_core.stores.base import ANY, RefUpdate, SnapshotRow


class StoreContract:
    @pytest.fixture
    def store(self) -> Any:  # pragma: no cover - overridden
        raise NotImplementedError

    # ------------------------------------------------------------ objects
    def test_put_get_roundtrip(self, store: Any) -> None:
        data = os.urandom(5000) + b"x" * 5000
        oid = store.objects.put(Kind.BLOB, data)
        assert oid == objects.digest(Kind.BLOB, data)
        assert store.objects.get(oid) == (Kind.BLOB, data)

    def test_put_is_idempotent(self, store: Any) -> None:
        a = store.objects.put(Kind.BLOB, b"same")
        b = store.objects.put(Kind.BLOB, b"same")
        assert a == b
        assert list(store.objects.iter_oids()).count(a) == 1

    def test_kind_is_part_of_identity(self, store: Any) -> None:
        assert store.objects.put(Kind.BLOB, b"{}") != store.objects.put(Kind.MANIFEST, b"{}")

    def test_has_and_missing(self, store: Any) -> None:
        oid = store.objects.put(Kind.BLOB, b"present")
        absent = objects.digest(Kind.BLOB, b"absent")
        assert store.objects.has(oid) and not store.objects.has(absent)
        assert store.objects.missing([oid, absent]) == {absent}

    def test_get_missing_raises(self, store: Any) -> None:
        with pytest.raises(ObjectMissing):
            store.objects.get(objects.digest(Kind.BLOB, b"nope"))

    def test_put_stored_verifies(self, store: Any) -> None:
        oid, stored = objects.encode(Kind.BLOB, b"payload" * 100)
        store.objects.put_stored(oid, stored)
        assert store.objects.get(oid)[1] == b"payload" * 100
        wrong = objects.digest(Kind.BLOB, b"other")
        with pytest.raises(ObjectCorrupt):
            store.objects.put_stored(wrong, stored)
        assert not store.objects.has(wrong)

    def test_stored_bytes_transfer(self, store: Any) -> None:
        oid = store.objects.put(Kind.BLOB, b"transfer me" * 50)
        raw = store.objects.get_stored(oid)
        assert objects.decode(oid, raw) == (Kind.BLOB, b"transfer me" * 50)

    def test_iter_and_delete(self, store: Any) -> None:
        ids = {store.objects.put(Kind.BLOB, f"obj{i}".encode()) for i in range(20)}
        assert ids <= set(store.objects.iter_oids())
        victim = sorted(ids)[0]
        store.objects.delete(victim)
        assert not store.objects.has(victim)
        store.objects.barrier()

    def test_age_is_small_for_new_objects(self, store: Any) -> None:
        oid = store.objects.put(Kind.BLOB, b"young")
        assert store.objects.age(oid) < 3600

    # ------------------------------------------------------------ refs
    def test_ref_create_update_delete(self, store: Any) -> None:
        a = store.objects.put(Kind.BLOB, b"a")
        b = store.objects.put(Kind.BLOB, b"b")
        store.refs.update_refs([RefUpdate("refs/heads/x", a, None)], "create")
        assert store.refs.get_ref("refs/heads/x") == a
        store.refs.update_refs([RefUpdate("refs/heads/x", b, a)], "move")
        assert store.refs.get_ref("refs/heads/x") == b
        store.refs.update_refs([RefUpdate("refs/heads/x", None, b)], "delete")
        assert store.refs.get_ref("refs/heads/x") is None

    def test_ref_compare_and_swap(self, store: Any) -> None:
        a = store.objects.put(Kind.BLOB, b"a")
        b = store.objects.put(Kind.BLOB, b"b")
        store.refs.update_refs([RefUpdate("refs/heads/y", a, None)], "create")
        with pytest.raises(RefConflict) as info:
            store.refs.update_refs([RefUpdate("refs/heads/y", b, b)], "stale")
        assert info.value.actual == a
        with pytest.raises(RefConflict):
            store.refs.update_refs([RefUpdate("refs/heads/y", b, None)], "create again")
        assert store.refs.get_ref("refs/heads/y") == a

    def test_multi_ref_update_is_atomic(self, store: Any) -> None:
        a = store.objects.put(Kind.BLOB, b"a")
        store.refs.update_refs([RefUpdate("refs/heads/p", a, None)], "p")
        with pytest.raises(RefConflict):
            store.refs.update_refs(
                [RefUpdate("refs/heads/q", a, None), RefUpdate("refs/heads/p", a, None)], "both"
            )
        assert store.refs.get_ref("refs/heads/q") is None

    def test_reflog_records_every_update(self, store: Any) -> None:
        a = store.objects.put(Kind.BLOB, b"a")
        b = store.objects.put(Kind.BLOB, b"b")
        store.refs.update_refs([RefUpdate("refs/heads/r", a, None)], "one")
        store.refs.update_refs([RefUpdate("refs/heads/r", b, ANY)], "two")
        log = store.refs.reflog("refs/heads/r")
        assert [(e.old, e.new, e.message) for e in log] == [(a, b, "two"), (None, a, "one")]

    def test_list_refs_prefix(self, store: Any) -> None:
        a = store.objects.put(Kind.BLOB, b"a")
        store.refs.update_refs([RefUpdate("refs/heads/l1", a, None), RefUpdate("refs/tags/t1", a, None)], "x")
        assert set(store.refs.list_refs("refs/tags/")) == {"refs/tags/t1"}

    def test_heads(self, store: Any) -> None:
        store.refs.set_head("wt1", "refs/heads/main", None)
        assert store.refs.get_head("wt1") == ("refs/heads/main", None)
        assert store.refs.get_head("unknown") == (None, None)

    def test_snapshot_index_prefix_lookup(self, store: Any) -> None:
        ids = [objects.digest(Kind.MANIFEST, f"m{i}".encode()) for i in range(30)]
        for i, oid in enumerate(ids):
            store.refs.index_snapshot(SnapshotRow(oid, (), 1000.0 + i, f"m{i}", "agent"))
        target = ids[7]
        assert store.refs.snapshots_with_prefix(target[:20]) == [target]
        rows = store.refs.list_snapshots(limit=3)
        assert [r.id for r in rows] == [ids[29], ids[28], ids[27]]

    def test_config(self, store: Any) -> None:
        assert store.refs.get_config("k") is None
        store.refs.set_config("k", "v")
        assert store.refs.get_config("k") == "v"
