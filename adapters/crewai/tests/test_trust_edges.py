"""Edges a demanding user meets: wrong argument types, odd paths, inspecting a flow, values JSON cannot hold.

Each test names the behaviour before its fix in its docstring.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from agentsnap_core import InvalidInput, Repo
from agentsnap_crewai import AgentsnapFlowPersistence, AgentsnapStorage, register_memory_storage
from crewai.flow.flow import Flow, FlowState, start
from crewai.flow.persistence import persist
from crewai.memory.storage.factory import resolve_memory_storage, set_memory_storage_factory
from crewai.memory.types import MemoryRecord
from crewai_fakes import embed
from pydantic import BaseModel


def _record(rid: str, text: str) -> MemoryRecord:
    return MemoryRecord(id=rid, content=text, embedding=embed([text])[0])


def test_delete_with_one_id_as_a_string_deletes_nothing_else(tmp_path: Path) -> None:
    """``delete(record_ids="12")`` (one id, not a list) used to delete records "1" and "2" (the characters of
    the string) and return 2, leaving "12" in place; it now refuses the string and deletes nothing."""
    store = AgentsnapStorage(tmp_path / "repo")
    store.save([_record("1", "one"), _record("2", "two"), _record("12", "twelve")])
    with pytest.raises(InvalidInput, match=r"record_ids must be a list.*\['12'\]"):
        store.delete(record_ids="12")
    assert sorted(store.rows()) == ["1", "12", "2"]
    assert store.delete(record_ids=["12"]) == 1
    assert sorted(store.rows()) == ["1", "2"]


def test_fork_to_an_existing_branch_says_it_exists(tmp_path: Path) -> None:
    """A second ``fork("attempt-1")`` used to raise RefConflict "ref refs/heads/attempt-1 moved while you worked
    ... another writer won the race - nothing was lost, re-run the command" (re-running fails the same way);
    it now says the branch exists, and neither branch moves."""
    store = AgentsnapStorage(tmp_path / "repo")
    store.save([_record("a", "alpha")])
    first = store.fork("attempt-1")
    first.save([_record("b", "beta")])
    first.snapshot("fork's own work")
    heads = {b: store.repo.refs.get_ref(f"refs/heads/{b}") for b in ("crewai/memory", "attempt-1")}
    store.save([_record("c", "gamma")])
    with pytest.raises(InvalidInput, match="branch 'attempt-1' already exists"):
        store.fork("attempt-1")
    assert {b: store.repo.refs.get_ref(f"refs/heads/{b}") for b in heads} == heads
    assert sorted(AgentsnapStorage(store.repo, branch="attempt-1").rows()) == ["a", "b"]


def test_storage_spec_of_a_path_with_a_hash_round_trips(tmp_path: Path) -> None:
    """``Memory(storage=storage.spec)`` (what a CrewAI checkpoint of the Memory holds) for a repository in
    ``run#1/`` used to raise InvalidRefName "invalid name '1#crewai/memory'" (the spec was split at its first
    '#'); it now opens the same repository and branch."""
    root = tmp_path / "run#1"
    store = AgentsnapStorage(root, branch="team/mem")
    store.save([_record("a", "alpha")])
    register_memory_storage()
    try:
        again = resolve_memory_storage(store.spec)
        plain = resolve_memory_storage(f"agentsnap:{tmp_path / 'plain'}")
    finally:
        set_memory_storage_factory(None)
    assert isinstance(again, AgentsnapStorage)
    assert (again.repo.root, again.branch) == (store.repo.root, "team/mem")
    assert sorted(again.rows()) == ["a"]
    assert isinstance(plain, AgentsnapStorage) and plain.branch == "crewai/memory"


@pytest.mark.parametrize("make", [AgentsnapStorage, AgentsnapFlowPersistence], ids=["storage", "flow-persistence"])
def test_a_store_path_that_is_a_file_is_refused_clearly(tmp_path: Path, make: Any) -> None:
    """A file given as the repository path used to raise a bare ``FileExistsError: [Errno 17] File exists``
    from deep in ``Repo.init``; it is now an InvalidInput saying the path is a file, and the file is untouched."""
    path = tmp_path / "notes.txt"
    path.write_text("keep me")
    with pytest.raises(InvalidInput, match="notes.txt' is a file"):
        make(path)
    assert path.read_text() == "keep me"


class Counter(FlowState):
    n: int = 0


def test_looking_at_a_saved_flow_does_not_make_the_next_flow_its_fork(tmp_path: Path) -> None:
    """``persistence.load_state(old_id)`` (looking at a saved state) and then a fresh ``kickoff()`` used to
    record the fresh flow as a fork of the one looked at: its first save got the old flow's save as parent, and
    ``history(new_id)`` listed the old flow's saves. Now the fresh flow's history is its own; a real fork
    (``restore_from_state_id``) still records its source."""
    persistence = AgentsnapFlowPersistence(tmp_path / "repo")

    @persist(persistence)
    class CountFlow(Flow[Counter]):
        @start()
        def bump(self) -> None:
            self.state.n += 1

    CountFlow().kickoff(inputs={"id": "old-flow"})
    assert persistence.load_state("old-flow")["n"] == 1

    fresh = CountFlow()
    fresh.kickoff()
    assert [h["flow_uuid"] for h in persistence.history(fresh.state.id)] == [fresh.state.id]

    fork = CountFlow()
    fork.kickoff(restore_from_state_id="old-flow")
    assert [h["flow_uuid"] for h in persistence.history(fork.state.id)] == [fork.state.id, "old-flow"]
    assert persistence.load_state(fork.state.id)["n"] == 2


class Blob(FlowState):
    data: bytes = b""


class BlobFlow(Flow[Blob]):
    @start()
    def go(self) -> None:
        pass


class Loose(FlowState):
    extra: Any = None


class LooseFlow(Flow[Loose]):
    @start()
    def go(self) -> None:
        pass


class Opaque:
    def __repr__(self) -> str:
        return "Opaque()"


class Point(BaseModel):
    x: int


def test_capturing_a_flow_state_json_cannot_hold_is_refused(tmp_path: Path) -> None:
    """``repo.capture(flow)`` of a state holding ``bytes`` that are not UTF-8 used to succeed, and
    ``restore_into`` then gave ``data == b"b'\\\\x00\\\\xff'"`` (the bytes' repr, encoded); an arbitrary object
    came back as the string ``'Opaque()'``. Such a capture is now refused, naming the type, and writes no
    snapshot; JSON-able values (models, tuples, datetimes) still round-trip."""
    repo = Repo.init(tmp_path / "repo")
    flow = BlobFlow()
    flow.state.data = b"\x00\xff"
    with pytest.raises(InvalidInput, match="flow state holds a bytes"):
        repo.capture(flow, "binary")
    loose = LooseFlow()
    loose.state.extra = {"o": Opaque()}
    with pytest.raises(InvalidInput, match="flow state holds a Opaque"):
        repo.capture(loose, "object")
    assert repo.refs.get_ref("refs/heads/main") is None

    flow.state.data = b"ok"
    restored = BlobFlow()
    repo.restore_into(restored, repo.capture(flow, "utf-8 bytes").id)
    assert restored.state.data == b"ok"
    loose.state.extra = {"p": Point(x=3), "t": (1, 2)}
    other = LooseFlow()
    repo.restore_into(other, repo.capture(loose, "plain").id)
    assert other.state.extra == {"p": {"x": 3}, "t": [1, 2]}


def test_a_project_whose_store_is_outside_it_keeps_its_memory_when_the_link_is_gone(tmp_path, monkeypatch):
    """A project made with ``agentsnap init --store-dir`` keeps only a link file ``.agentsnap`` in its tree. Once that
    link had gone with the files (``git clean -fdx``), ``AgentsnapStorage(project)`` made a new, empty store inside
    the project in silence: the crew's memories were not there. Now it finds the store outside the tree again."""
    from agentsnap_core import Repo
    from agentsnap_crewai import AgentsnapStorage
    from crewai.memory.types import MemoryRecord

    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    project, store = tmp_path / "project", tmp_path / "outside"
    project.mkdir()
    Repo.init(project, store_dir=store).close()
    storage = AgentsnapStorage(project)
    storage.save([MemoryRecord(content="The user prefers metric units", embedding=[1.0, 2.0, 3.0], scope="/prefs")])
    storage.snapshot()
    storage.close()
    (project / ".agentsnap").unlink()  # (what git clean -fdx does to it)
    again = AgentsnapStorage(project)
    try:
        assert again.count() == 1 and again.repo.store_dir == store.resolve()
    finally:
        again.close()
    assert (project / ".agentsnap").is_file()
