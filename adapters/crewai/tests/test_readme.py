"""The adapter README's examples, word for word, in one process; a crew CrewAI cannot checkpoint fails loudly."""

from __future__ import annotations

from pathlib import Path

import pytest
from agentsnap_core.testing.readme import code_blocks, run_python
from agentsnap_crewai import AgentsnapCheckpointProvider, AgentsnapStorage
from crewai import Agent, Crew, Task
from crewai.memory.unified_memory import Memory
from crewai.state.checkpoint_config import CheckpointConfig
from crewai_fakes import ScriptedLLM, embed

README = Path(__file__).parents[1] / "README.md"


def test_readme_examples_run_word_for_word_in_one_process(tmp_path: Path) -> None:
    blocks = code_blocks(README)
    assert len(blocks) >= 2
    proc = run_python("\n".join(blocks), tmp_path, timeout=600)
    assert "Auto-checkpoint failed" not in proc.stderr and "PydanticSerializationError" not in proc.stderr
    assert "Poseidonia" in proc.stdout


def test_a_crew_crewai_cannot_checkpoint_fails_at_kickoff(tmp_path: Path) -> None:
    """A callable embedder or a storage object cannot go into a CrewAI checkpoint: say so before running."""
    llm = ScriptedLLM(answers={"capital": "Poseidonia"})
    memory = Memory(llm=llm, storage=AgentsnapStorage(tmp_path / "repo", branch="m"), embedder=embed)
    agent = Agent(role="Researcher", goal="answer", backstory="scholar", llm=llm)
    crew = Crew(agents=[agent], tasks=[Task(description="The capital?", expected_output="a city", agent=agent)], memory=memory,
                checkpoint=CheckpointConfig(location=str(tmp_path / "repo"), provider=AgentsnapCheckpointProvider()))
    with pytest.raises(Exception, match="cannot checkpoint this crew"):
        crew.kickoff()
    assert llm.task_prompts() == []  # refused before any task ran

