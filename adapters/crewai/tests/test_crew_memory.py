"""A real 2-task CrewAI crew with memory in AgentsnapStorage: snapshot, fresh-process restore, fork."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from agentsnap_core import AgentSnapError, Repo
from agentsnap_crewai import AgentsnapStorage
from crewai import Agent, Crew, Task
from crewai.memory.unified_memory import Memory
from crewai_fakes import ScriptedLLM, embed

#: first matching phrase wins, so the specific ones come first
ANSWERS = {"population of the capital": "about 12000 souls", "travel note": "Visit Poseidonia", "capital of Atlantis": "Poseidonia"}


def build_crew(storage: Any, llm: ScriptedLLM) -> tuple[Crew, Memory]:
    memory = Memory(llm=llm, storage=storage, embedder=embed)
    agent = Agent(role="Researcher", goal="Answer questions about Atlantis", backstory="A careful scholar", llm=llm)
    tasks = [
        Task(description="What is the capital of Atlantis?", expected_output="a city", agent=agent),
        Task(description="What is the population of the capital of Atlantis?", expected_output="a number", agent=agent),
    ]
    return Crew(agents=[agent], tasks=tasks, memory=memory), memory


def recall_view(memory: Memory) -> list[tuple[str, str]]:
    return sorted((m.record.id, m.record.content) for m in memory.recall("capital of Atlantis", depth="shallow", limit=10))


CHILD = textwrap.dedent(
    """
    import json, sys
    import conftest  # offline environment
    from agentsnap_core import Repo
    from crewai import Crew, Task
    from crewai_fakes import ScriptedLLM
    from agentsnap_crewai import AgentsnapStorage
    from test_crew_memory import ANSWERS, build_crew, recall_view

    repo = Repo.open(sys.argv[1])
    llm = ScriptedLLM(answers=ANSWERS)  # the live object the caller re-injects
    crew, memory = build_crew(AgentsnapStorage(repo, branch="restored"), llm)
    before = recall_view(memory)
    repo.restore_into(crew, sys.argv[2])
    outputs = [t.output.raw for t in crew.tasks]
    after = recall_view(memory)
    note = Task(description="Write a travel note about the capital of Atlantis.", expected_output="one line",
                agent=crew.agents[0], context=crew.tasks)
    result = Crew(agents=crew.agents, tasks=[note], memory=memory).kickoff()
    print("CHILD " + json.dumps({"before": before, "after": after, "outputs": outputs,
                                 "result": result.raw, "prompts": llm.task_prompts()}))
    """
)


def test_crew_memory_restores_in_a_fresh_process_and_the_crew_continues(tmp_path: Path) -> None:
    repo = Repo.init(tmp_path / "repo")
    llm = ScriptedLLM(answers=ANSWERS)
    crew, memory = build_crew(AgentsnapStorage(repo), llm)
    assert crew.kickoff().raw == "about 12000 souls"
    recalled = recall_view(memory)
    assert {c for _, c in recalled} >= {"Learned: Poseidonia", "Learned: about 12000 souls"}
    snap = repo.capture(crew, "crew after two tasks")

    script = tmp_path / "child.py"
    script.write_text(CHILD)
    here = str(Path(__file__).parent)
    proc = subprocess.run(
        [sys.executable, str(script), str(repo.root), snap.id],
        capture_output=True, text=True, timeout=600, cwd=here,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([here, *sys.path])},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    child = json.loads(next(x for x in proc.stdout.splitlines() if x.startswith("CHILD "))[6:])
    assert child["before"] == []  # a fresh crew on a fresh branch knows nothing
    assert [tuple(x) for x in child["after"]] == recalled  # the same records, same ids
    assert child["outputs"] == ["Poseidonia", "about 12000 souls"]
    assert child["result"] == "Visit Poseidonia"
    prompt = child["prompts"][-1]
    memories = prompt.split("# Memories from past conversations:", 1)[1]
    assert "Learned: Poseidonia" in memories and "Learned: about 12000 souls" in memories  # restored memory reached the LLM
    context = prompt.split("This is the context you're working with:", 1)[1].split("# Memories", 1)[0]
    assert "Poseidonia" in context and "about 12000 souls" in context  # restored task outputs as context


def test_prompts_without_restore_do_not_contain_the_memory(tmp_path: Path) -> None:
    """Control for the test above: the memory text in the prompt comes from the restore only."""
    llm = ScriptedLLM(answers=ANSWERS)
    crew, _ = build_crew(AgentsnapStorage(tmp_path / "repo"), llm)
    crew.kickoff()
    first_prompt = llm.task_prompts()[0]
    assert "Learned:" not in first_prompt
    assert "Learned: Poseidonia" in llm.task_prompts()[1]  # the second task sees what the first one stored


def test_a_fork_diverges_without_touching_the_original(tmp_path: Path) -> None:
    repo = Repo.init(tmp_path / "repo")
    storage = AgentsnapStorage(repo)
    crew, memory = build_crew(storage, ScriptedLLM(answers=ANSWERS))
    crew.kickoff()
    memory.drain_writes()
    original = storage.snapshot("original")
    before = storage.rows()

    fork = storage.fork("attempt-1")
    fork_memory = Memory(llm=ScriptedLLM(answers=ANSWERS), storage=fork, embedder=embed)
    fork_memory.remember("Atlantis sank in a single day", scope="/facts", categories=["facts"], importance=0.9)
    fork.delete(record_ids=[next(iter(before))])
    fork.snapshot("fork work")

    assert storage.rows() == before
    assert repo.read_layer(original.id, "state") == storage.payload()
    assert AgentsnapStorage(repo).rows() == before  # reopened from the store: still the original
    reopened_fork = AgentsnapStorage(repo, branch="attempt-1")
    contents = {r["content"] for r in reopened_fork.rows().values()}
    assert "Atlantis sank in a single day" in contents and len(reopened_fork.rows()) == len(before)
    assert repo.get("attempt-1").parents == [original.id]


def test_restore_into_a_crew_without_memory_fails_clearly(tmp_path: Path) -> None:
    repo = Repo.init(tmp_path / "repo")
    crew, _ = build_crew(AgentsnapStorage(repo), ScriptedLLM(answers=ANSWERS))
    crew.kickoff()
    snap = repo.capture(crew, "with memory")
    bare = Crew(agents=crew.agents, tasks=[Task(description=t.description, expected_output=t.expected_output, agent=crew.agents[0]) for t in crew.tasks])
    with pytest.raises(AgentSnapError, match="has none"):
        repo.restore_into(bare, snap.id)
    assert all(t.output is None for t in bare.tasks)


def test_memory_storage_factory_routes_agentsnap_specs(tmp_path: Path) -> None:
    from agentsnap_crewai import register_memory_storage
    from crewai.memory.storage.factory import set_memory_storage_factory
    from crewai.memory.storage.lancedb_storage import LanceDBStorage

    register_memory_storage()
    try:
        memory = Memory(storage=f"agentsnap:{tmp_path / 'repo'}#team", llm=ScriptedLLM(), embedder=embed)
        assert isinstance(memory._storage, AgentsnapStorage) and memory._storage.branch == "team"
        memory.remember("a fact", scope="/f", categories=["c"], importance=0.5)
        memory._storage.snapshot("team memory")
        assert [r.content for r in AgentsnapStorage(tmp_path / "repo", branch="team").list_records()] == ["a fact"]
        other = Memory(storage=str(tmp_path / "lance"), llm=ScriptedLLM(), embedder=embed)
        assert isinstance(other._storage, LanceDBStorage)  # other specs keep CrewAI's default
    finally:
        set_memory_storage_factory(None)
