"""Schema versions and registered migrations, applied on load; refused clearly when there is no path."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import agentsnap_core
import pytest
from agentsnap_core.format.migrations import clear_migrations, migrate, version_key


@pytest.fixture(autouse=True)
def _clean() -> Iterator[None]:
    clear_migrations()
    yield
    clear_migrations()


class V1(agentsnap_core.Snapshottable):
    __snapshot_name__ = "Planner"
    __snapshot_version__ = "1.0"

    def __init__(self) -> None:
        self.steps = ["a", "b"]


class V3(agentsnap_core.Snapshottable):
    __snapshot_name__ = "Planner"
    __snapshot_version__ = "3.0"

    def __init__(self) -> None:
        self.plan: dict[str, object] = {}


class Child(agentsnap_core.Snapshottable):
    __snapshot_version__ = "1.0"

    def __init__(self) -> None:
        self.n = 1


class Parent(agentsnap_core.Snapshottable):
    def __init__(self) -> None:
        self.child = Child()


def test_chain_of_migrations_applies_in_order(tmp_path: Path) -> None:
    calls: list[str] = []

    @agentsnap_core.register_migration("Planner", "1.0")
    def one(state: dict) -> dict:
        calls.append("1.0")
        return {"plan": {"steps": tuple(state["steps"])}}

    @agentsnap_core.register_migration("Planner", "2.0")
    def two(state: dict) -> dict:
        calls.append("2.0")
        state["plan"]["done"] = False
        return state

    with agentsnap_core.Client(tmp_path) as client:
        snap = client.save(V1(), agent_id="planner")
        loaded = client.restore(snap, into=V3())
    assert calls == ["1.0", "2.0"] and loaded.plan == {"steps": ("a", "b"), "done": False}


def test_no_path_is_refused_and_nothing_is_loaded(tmp_path: Path) -> None:
    agentsnap_core.register_migration("Planner", "1.0", lambda s: {"plan": s}, to="2.0")
    with agentsnap_core.Client(tmp_path) as client:
        snap = client.save(V1(), agent_id="planner")
        target = V3()
        with pytest.raises(agentsnap_core.MigrationError, match="no migration from version 2.0") as err:
            client.restore(snap, into=target)
    assert target.plan == {} and err.value.stored == "1.0" and err.value.current == "3.0"


def test_newer_snapshot_than_code_is_refused(tmp_path: Path) -> None:
    with agentsnap_core.Client(tmp_path) as client:
        snap = client.save(V3(), agent_id="planner")
        with pytest.raises(agentsnap_core.MigrationError, match="newer than this code"):
            client.restore(snap, into=V1())


def test_failing_or_bad_migrations_are_reported() -> None:
    agentsnap_core.register_migration("X", "1", lambda s: 1 / 0)
    with pytest.raises(agentsnap_core.MigrationError, match="ZeroDivisionError"):
        migrate("X", "1", {}, "2")
    agentsnap_core.register_migration("Y", "1", lambda s: ["not", "a", "dict"])
    with pytest.raises(agentsnap_core.MigrationError, match="returned list"):
        migrate("Y", "1", {}, "2")


def test_nested_agents_migrate_too(tmp_path: Path) -> None:
    with agentsnap_core.Client(tmp_path) as client:
        snap = client.save(Parent(), agent_id="p")
        Child.__snapshot_version__ = "2.0"
        try:
            with pytest.raises(agentsnap_core.MigrationError, match=r"at Parent\.child|no migration"):
                client.restore(snap, into=Parent())
            agentsnap_core.register_migration("Child", "1.0", lambda s: {"n": s["n"] * 10})
            assert client.restore(snap, into=Parent()).child.n == 10
        finally:
            Child.__snapshot_version__ = "1.0"


def test_versions_order_numerically() -> None:
    assert version_key("1.10") > version_key("1.9") > version_key("1.0")
