"""A CrewAI checkpoint that cannot be written is loud (issue 23 #7).

CrewAI 1.15 writes checkpoints in event-bus workers and only logs a failure ("Auto-checkpoint failed"): the run
goes on and ``resume_crew(..., "crewai/main~1")`` later raises a bare UnknownSnapshot. Real CrewAI classes
throughout; only the model is scripted (``ScriptedLLM``) and the embedder is a plain function.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from agentsnap_core import Repo
from agentsnap_core.errors import UnknownSnapshot
from agentsnap_crewai import AgentsnapCheckpointProvider, AgentsnapStorage, CheckpointFailed, resume_crew
from crewai import Agent, Crew, Task
from crewai.events.event_bus import crewai_event_bus
from crewai.flow.flow import Flow, listen, start
from crewai.memory.unified_memory import Memory
from crewai.state.checkpoint_config import CheckpointConfig
from crewai_fakes import ScriptedLLM, embed

ANSWERS = {"capital": "Poseidonia", "population": "about 12000 souls"}


def two_crew_flow(tmp: Path, llm: ScriptedLLM) -> Flow[Any]:
    """The README's two examples in one run: a crew with memory (callable embedder), then a checkpointed crew.

    Both crews are in CrewAI's one runtime state, so every checkpoint of the second crew serialises the first
    crew's memory too, which CrewAI cannot do.
    """

    class Plan(Flow[Any]):
        @start()
        def research(self) -> str:
            agent = Agent(role="Researcher", goal="answer", backstory="scholar", llm=llm)
            memory = Memory(llm=llm, storage=AgentsnapStorage(tmp / "memory", branch="m"), embedder=embed)
            task = Task(description="The capital of Atlantis?", expected_output="a city", agent=agent)
            return str(Crew(agents=[agent], tasks=[task], memory=memory).kickoff().raw)

        @listen(research)
        def guide(self, found: str) -> str:
            agent = Agent(role="Guide", goal="answer", backstory="traveller", llm=llm)
            task = Task(description=f"The population of {found}?", expected_output="a number", agent=agent)
            cfg = CheckpointConfig(location=str(tmp / "repo"), provider=AgentsnapCheckpointProvider())
            return str(Crew(agents=[agent], tasks=[task], checkpoint=cfg).kickoff().raw)

    return Plan()


def test_a_crew_sharing_the_runtime_with_an_unserialisable_one_is_refused_before_it_runs(tmp_path: Path) -> None:
    llm = ScriptedLLM(answers=ANSWERS)
    with pytest.raises(Exception, match=r"cannot checkpoint this crew.*Unable to serialize unknown type"):
        two_crew_flow(tmp_path, llm).kickoff()
    crewai_event_bus.flush()
    prompts = llm.task_prompts()
    assert len(prompts) == 1 and "capital" in prompts[0]  # the checkpointed crew never ran a task


def test_resume_after_failed_checkpoints_names_the_cause(tmp_path: Path) -> None:
    with pytest.raises(Exception, match="cannot checkpoint"):
        two_crew_flow(tmp_path, ScriptedLLM(answers=ANSWERS)).kickoff()
    crewai_event_bus.flush()
    with pytest.raises(UnknownSnapshot, match=r"crewai/main~1.*CrewAI checkpoint.* failed.*Unable to serialize unknown type"):
        resume_crew(tmp_path / "repo", "crewai/main~1", llm=ScriptedLLM(answers=ANSWERS))


STORES_TO_REMOVE: list[Path] = []


def remove_store(_output: Any) -> None:
    """A task callback (module level: CrewAI serialises callbacks by name) that puts a file where the store was."""
    for store in STORES_TO_REMOVE:
        shutil.rmtree(store)
        store.write_text("not a store", encoding="utf-8")


def test_a_checkpoint_failing_mid_run_raises_at_kickoff_end_with_the_output(tmp_path: Path) -> None:
    """The checkpoint store is gone after the first task: CrewAI would log, finish and return as if all was well."""
    location = tmp_path / "repo"
    Repo.init(location).close()
    STORES_TO_REMOVE[:] = [location / ".agentsnap"]
    llm = ScriptedLLM(answers=ANSWERS)
    agent = Agent(role="Researcher", goal="answer", backstory="scholar", llm=llm)
    tasks = [Task(description="The capital of Atlantis?", expected_output="a city", agent=agent, callback=remove_store),
             Task(description="The population there?", expected_output="a number", agent=agent)]
    crew = Crew(agents=[agent], tasks=tasks,
                checkpoint=CheckpointConfig(location=str(location), provider=AgentsnapCheckpointProvider()))
    with pytest.raises(CheckpointFailed, match=r"CrewAI checkpoint\(s\) of this run were not written.*task_completed") as err:
        crew.kickoff()
    assert err.value.output is not None and err.value.output.raw == "about 12000 souls"  # the run's work is kept
    assert err.value.failures and all(f["trigger"] == "task_completed" for f in err.value.failures)
    assert len(llm.task_prompts()) == 2


def test_a_run_whose_checkpoints_all_succeed_returns_normally(tmp_path: Path) -> None:
    llm = ScriptedLLM(answers=ANSWERS)
    agent = Agent(role="Researcher", goal="answer", backstory="scholar", llm=llm)
    crew = Crew(agents=[agent], tasks=[Task(description="The capital of Atlantis?", expected_output="a city", agent=agent)],
                checkpoint=CheckpointConfig(location=str(tmp_path / "repo"), provider=AgentsnapCheckpointProvider()))
    assert crew.kickoff().raw == "Poseidonia"
    crewai_event_bus.flush()
    assert len(Repo.open(tmp_path / "repo").log("crewai/main")) == 1


class FakePanic(BaseException):
    """Stands in for pyo3's PanicException (a BaseException, not an Exception), which pydantic raises in CrewAI's
    checkpoint worker on its own race ("dictionary changed size during iteration"): that race cannot be triggered on
    demand, so the provider raises this on its second checkpoint; the path through CrewAI's real listener is the same."""


class PanicOnSecondCheckpoint(AgentsnapCheckpointProvider):
    def checkpoint(self, data: str, location: str, *, parent_id: str | None = None, branch: str = "main") -> str:
        if parent_id is not None:
            raise FakePanic("dictionary changed size during iteration")
        return super().checkpoint(data, location, parent_id=parent_id, branch=branch)


def test_a_checkpoint_lost_to_a_non_exception_in_crewais_worker_is_reported_fake_panic(tmp_path: Path) -> None:
    """CrewAI catches only Exception: the worker dies, no CheckpointFailedEvent, nothing logged but a flush message."""
    llm = ScriptedLLM(answers=ANSWERS)
    agent = Agent(role="Researcher", goal="answer", backstory="scholar", llm=llm)
    tasks = [Task(description="The capital of Atlantis?", expected_output="a city", agent=agent),
             Task(description="The population there?", expected_output="a number", agent=agent)]
    crew = Crew(agents=[agent], tasks=tasks,
                checkpoint=CheckpointConfig(location=str(tmp_path / "repo"), provider=PanicOnSecondCheckpoint()))
    with pytest.raises(CheckpointFailed, match="worker raised outside its error handling") as err:
        crew.kickoff()
    assert err.value.output.raw == "about 12000 souls"
    assert len(err.value.failures) == 1 and err.value.failures[0]["trigger"] == "task_completed"
    assert len(Repo.open(tmp_path / "repo").log("crewai/main")) == 1  # the first checkpoint was written
