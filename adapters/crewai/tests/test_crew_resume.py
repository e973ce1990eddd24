"""``repo.restore_into(crew)`` then ``kickoff()`` continues where the crew stopped: finished tasks are not re-run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from agentsnap_core import Repo
from crewai import Agent, Crew, Task
from crewai_fakes import ScriptedLLM

ANSWERS = {"population": "about 12000 souls", "capital of Atlantis": "Poseidonia"}


class FailsOnPopulation(ScriptedLLM):
    """The model goes away in the middle of the second task (a crash, a quota, Ctrl-C)."""

    def call(self, messages: Any, *args: Any, **kwargs: Any) -> str:
        if "population" in str(messages):
            raise ConnectionError("model endpoint went away")
        return super().call(messages, *args, **kwargs)


def build(llm: ScriptedLLM) -> Crew:
    agent = Agent(role="Researcher", goal="Answer questions", backstory="A scholar", llm=llm, max_retry_limit=0)
    tasks = [
        Task(description="What is the capital of Atlantis?", expected_output="a city", agent=agent),
        Task(description="What is the population there?", expected_output="a number", agent=agent),
    ]
    return Crew(agents=[agent], tasks=tasks)


def test_restored_crew_kickoff_runs_only_the_unfinished_tasks(tmp_path: Path) -> None:
    repo = Repo.init(tmp_path / "repo")
    crew = build(FailsOnPopulation(answers=ANSWERS))
    with pytest.raises(Exception, match="went away"):
        crew.kickoff()
    assert [t.output.raw if t.output else None for t in crew.tasks] == ["Poseidonia", None]
    snap = repo.capture(crew, "stopped in task 2")

    llm = ScriptedLLM(answers=ANSWERS)
    again = build(llm)  # the same crew definition, the caller's live LLM
    repo.restore_into(again, snap.id)
    result = again.kickoff()

    prompts = llm.task_prompts()
    assert not any("capital of Atlantis" in p and "population" not in p for p in prompts), "task 1 ran again"
    assert any("population" in p for p in prompts)
    assert "Poseidonia" in prompts[0]  # task 2 saw task 1's restored output as its context
    assert [t.raw for t in result.tasks_output] == ["Poseidonia", "about 12000 souls"]


def test_restore_of_a_finished_crew_runs_nothing_again(tmp_path: Path) -> None:
    repo = Repo.init(tmp_path / "repo")
    build(ScriptedLLM(answers=ANSWERS)).kickoff()
    crew = build(ScriptedLLM(answers=ANSWERS))
    crew.kickoff()
    snap = repo.capture(crew, "done")
    llm = ScriptedLLM(answers=ANSWERS)
    again = build(llm)
    repo.restore_into(again, snap.id)
    result = again.kickoff()
    assert llm.task_prompts() == []
    assert [t.raw for t in result.tasks_output] == ["Poseidonia", "about 12000 souls"]
