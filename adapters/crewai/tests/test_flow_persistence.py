"""``@persist(AgentsnapFlowPersistence(...))`` against CrewAI's own SQLite persistence on the same script."""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from agentsnap_core import InvalidInput, Repo
from agentsnap_crewai import AgentsnapFlowPersistence
from crewai.flow.flow import Flow, FlowState, listen, start
from crewai.flow.persistence import SQLiteFlowPersistence, persist


class NoteState(FlowState):
    label: str = "A"
    counter: int = 0
    notes: list[str] = []


def flow_class(persistence: Any) -> type[Flow[NoteState]]:
    @persist(persistence)
    class NoteFlow(Flow[NoteState]):
        @start()
        def first(self) -> None:
            self.state.counter += 1
            self.state.notes.append(f"{self.state.label}:first:{self.state.counter}")

        @listen(first)
        def second(self) -> str:
            self.state.counter += 10
            self.state.notes.append(f"{self.state.label}:second:{self.state.counter}")
            return self.state.notes[-1]

    return NoteFlow


def run_script(persistence: Any) -> None:
    """Run, resume, fork (restore_from_state_id), then advance the original again."""
    cls = flow_class(persistence)
    cls().kickoff(inputs={"id": "flow-1"})
    cls().kickoff(inputs={"id": "flow-1"})
    cls().kickoff(inputs={"id": "fork-1", "label": "B"}, restore_from_state_id="flow-1")
    cls().kickoff(inputs={"id": "flow-1"})


def sqlite_history(db: str, flow_uuid: str) -> list[tuple[str, dict[str, Any]]]:
    with closing(sqlite3.connect(db)) as conn:
        rows = conn.execute("SELECT method_name, state_json FROM flow_states WHERE flow_uuid=? ORDER BY id", (flow_uuid,)).fetchall()
    return [(m, json.loads(s)) for m, s in rows]


def agentsnap_history(p: AgentsnapFlowPersistence, flow_uuid: str) -> list[tuple[str, dict[str, Any]]]:
    own = [h for h in p.history(flow_uuid) if h["flow_uuid"] == flow_uuid]
    return [(h["method"], p.repo.read_layer(h["id"], "state")["state"]) for h in reversed(own)]


def test_same_states_as_crewai_sqlite_persistence(tmp_path: Path) -> None:
    db = str(tmp_path / "flows.db")
    sqlite = SQLiteFlowPersistence(db)
    ours = AgentsnapFlowPersistence(tmp_path / "repo")
    run_script(sqlite)
    run_script(ours)
    for flow_uuid in ("flow-1", "fork-1"):
        assert ours.load_state(flow_uuid) == sqlite.load_state(flow_uuid)
        assert agentsnap_history(ours, flow_uuid) == sqlite_history(db, flow_uuid)
    assert ours.load_state("flow-1")["notes"] == ["A:first:1", "A:second:11", "A:first:12", "A:second:22", "A:first:23", "A:second:33"]
    assert ours.load_state("fork-1")["notes"][-2:] == ["B:first:23", "B:second:33"]  # hydrated from flow-1, diverged
    assert ours.load_state("fork-1")["id"] == "fork-1"


def test_fork_lineage_is_an_agentsnap_branch(tmp_path: Path) -> None:
    ours = AgentsnapFlowPersistence(tmp_path / "repo")
    run_script(ours)
    repo = Repo.open(tmp_path / "repo")
    assert {"crewai/flows/flow-1", "crewai/flows/fork-1"} <= set(repo.branches())
    fork_chain = ours.history("fork-1")
    first_of_fork = [h for h in fork_chain if h["flow_uuid"] == "fork-1"][-1]
    source = repo.get(first_of_fork["id"]).parents[0]
    assert repo.get(source).manifest["meta"] == {"flow_uuid": "flow-1", "method": "second"}
    assert repo.read_layer(source, "state")["state"]["counter"] == 22  # the state the fork was hydrated from
    assert repo.verify()["ok"]


def test_agentsnap_fork_then_resume_leaves_the_source_untouched(tmp_path: Path) -> None:
    ours = AgentsnapFlowPersistence(tmp_path / "repo")
    cls = flow_class(ours)
    cls().kickoff(inputs={"id": "src"})
    before = ours.load_state("src")
    new_id = ours.fork("src")
    assert ours.load_state(new_id) == {**before, "id": new_id}
    cls().kickoff(inputs={"id": new_id, "label": "C"})
    assert ours.load_state(new_id)["notes"][-1] == "C:second:22"
    assert ours.load_state("src") == before
    with pytest.raises(InvalidInput, match="already exists"):
        ours.fork("src", new_id)
    with pytest.raises(InvalidInput, match="no persisted state"):
        ours.fork("never-ran")


def test_persistence_round_trips_through_crewai_serialisation(tmp_path: Path) -> None:
    """Flows serialise their persistence into checkpoints; it must come back as the same backend."""
    ours = AgentsnapFlowPersistence(tmp_path / "repo")
    flow = flow_class(ours)()
    dumped = flow.model_dump(mode="json")["persistence"]
    assert dumped["persistence_type"] == "AgentsnapFlowPersistence"
    again = AgentsnapFlowPersistence.model_validate(dumped)
    flow.kickoff(inputs={"id": "x"})
    assert again.load_state("x") == ours.load_state("x")


def test_a_new_flow_is_not_parented_on_a_flow_resumed_before_it(tmp_path: Path) -> None:
    """One shared ``@persist(p)``: resume flow A, then start an unrelated flow; its history is its own."""
    ours = AgentsnapFlowPersistence(tmp_path / "repo")
    cls = flow_class(ours)
    cls().kickoff(inputs={"id": "flow-A"})
    cls().kickoff(inputs={"id": "flow-A"})  # a resume: load_state("flow-A"), then saves to flow-A
    fresh = cls()
    fresh.kickoff()
    new_id = str(fresh.state.id)
    history = ours.history(new_id)
    assert [h["flow_uuid"] for h in history] == [new_id, new_id]
    assert ours.repo.get(history[-1]["id"]).parents == []
    # a flow that loaded A but then ran under a new id in another kickoff is not a fork of A either
    cls().kickoff(inputs={"id": "flow-A"})
    other = cls()
    other.kickoff(inputs={"label": "Z"})
    assert {h["flow_uuid"] for h in ours.history(str(other.state.id))} == {str(other.state.id)}



def nested_flow_class(persistence: Any, inner_ids: list[str], *, same_task: bool) -> type[Flow[NoteState]]:
    """An outer flow whose start method kicks off a fresh inner flow with the same ``@persist`` backend: from a sync
    method (CrewAI runs it in a worker thread) or awaited in an async one (in the outer kickoff's own task)."""

    @persist(persistence)
    class Inner(Flow[NoteState]):
        @start()
        def go(self) -> None:
            self.state.notes.append("inner")

    if same_task:
        @persist(persistence)
        class OuterAsync(Flow[NoteState]):
            @start()
            async def first(self) -> None:
                inner = Inner()
                await inner.kickoff_async()
                inner_ids.append(str(inner.state.id))
                self.state.notes.append("outer")

        return OuterAsync

    @persist(persistence)
    class Outer(Flow[NoteState]):
        @start()
        def first(self) -> None:
            inner = Inner()
            inner.kickoff()
            inner_ids.append(str(inner.state.id))
            self.state.notes.append("outer")

    return Outer


@pytest.mark.parametrize("same_task", [False, True], ids=["sync-method", "awaited-in-async-method"])
def test_a_flow_kicked_off_inside_a_resumed_or_forked_flow_is_not_recorded_as_its_fork(tmp_path: Path,
                                                                                         same_task: bool) -> None:
    """A nested kickoff inherits CrewAI's ``current_flow_request_id``: the outer run's hydration (a resume, a
    ``restore_from_state_id`` fork) must not make the fresh inner flow's first save a child of the outer's source
    (its history would be the source's), nor be used up by it (the fork would lose its lineage)."""
    ours = AgentsnapFlowPersistence(tmp_path / "repo")
    inner_ids: list[str] = []
    outer = nested_flow_class(ours, inner_ids, same_task=same_task)
    outer().kickoff(inputs={"id": "src"})
    outer().kickoff(inputs={"id": "src"})  # a resume of src
    src_head = ours.head("src")
    forked = outer()
    forked.kickoff(restore_from_state_id="src")  # a fork of src
    fork_id = str(forked.state.id)
    assert fork_id != "src" and ours.load_state(fork_id)["notes"] == ["outer", "outer", "outer"]
    assert len(inner_ids) == 3
    for inner_id in inner_ids:
        history = ours.history(inner_id)
        assert [h["flow_uuid"] for h in history] == [inner_id], history  # its own save, no source flow's
        assert ours.repo.get(history[0]["id"]).parents == []
    own = [h for h in ours.history(fork_id) if h["flow_uuid"] == fork_id]
    assert ours.repo.get(own[-1]["id"]).parents == [src_head]  # the fork's first save descends from its source
