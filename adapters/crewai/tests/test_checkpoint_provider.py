"""CrewAI's own ``CheckpointConfig`` with the agentsnap provider: checkpoints are snapshots with lineage."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from agentsnap_core import Repo
from agentsnap_crewai import (
    AgentsnapCheckpointProvider,
    MissingLiveObjects,
    checkpoint_path,
    inject_live_objects,
    resume_crew,
)
from agentsnap_crewai.checkpoint import checkpoint_data, checkpoint_runtime, resolve_checkpoint
from crewai import Agent, Crew, Task
from crewai.events.event_bus import crewai_event_bus
from crewai.state.checkpoint_config import CheckpointConfig
from crewai_fakes import ScriptedLLM

ANSWERS = {"population": "about 12000 souls", "capital of Atlantis": "Poseidonia"}


def build(repo_path: Path, llm: ScriptedLLM) -> Crew:
    agent = Agent(role="Researcher", goal="Answer questions", backstory="A scholar", llm=llm)
    tasks = [
        Task(description="What is the capital of Atlantis?", expected_output="a city", agent=agent),
        Task(description="What is the population there?", expected_output="a number", agent=agent),
    ]
    cfg = CheckpointConfig(location=str(repo_path), provider=AgentsnapCheckpointProvider())
    return Crew(agents=[agent], tasks=tasks, checkpoint=cfg)


def run(crew: Crew) -> Any:
    out = crew.kickoff()
    assert crewai_event_bus.flush()  # checkpoints are written by event-bus workers
    return out


@pytest.fixture
def checkpointed(tmp_path: Path) -> tuple[Repo, list[str]]:
    run(build(tmp_path / "repo", ScriptedLLM(answers=ANSWERS)))
    repo = Repo.open(tmp_path / "repo")
    chain = [s.id for s in repo.log("crewai/main")]
    return repo, chain[::-1]


def test_checkpoints_are_snapshots_with_lineage(checkpointed: tuple[Repo, list[str]]) -> None:
    repo, (first, second) = checkpointed
    assert repo.get(first).parents == []
    assert repo.get(second).parents == [first]
    meta = repo.get(second).manifest["meta"]
    first_id = repo.get(first).manifest["meta"]["crewai_id"]  # the id CrewAI was given (written behind)
    assert meta == {"crewai_branch": "main", "trigger": "task_completed", "crewai_parent": first_id,
                    "crewai_id": meta["crewai_id"]}
    assert resolve_checkpoint(repo, first_id) == first and resolve_checkpoint(repo, meta["crewai_id"]) == second
    data = checkpoint_runtime(repo, second)
    assert [t["output"]["raw"] if t["output"] else None for t in data["entities"][0]["tasks"]] == ["Poseidonia", "about 12000 souls"]
    assert data["parent_id"] == first_id  # CrewAI's own lineage field names the checkpoint before
    assert checkpoint_runtime(repo, first_id) == checkpoint_runtime(repo, first)
    assert repo.verify()["ok"]


def test_crew_from_checkpoint_resumes_after_the_first_task(checkpointed: tuple[Repo, list[str]]) -> None:
    repo, (first, _second) = checkpointed
    cfg = CheckpointConfig(location=str(repo.root), provider=AgentsnapCheckpointProvider(), restore_from=checkpoint_path(repo, first))
    crew = Crew.from_checkpoint(cfg)
    assert [t.output.raw if t.output else None for t in crew.tasks] == ["Poseidonia", None]
    llm = ScriptedLLM(answers=ANSWERS)
    inject_live_objects(crew, llm=llm)
    crew.checkpoint = cfg.model_copy(update={"restore_from": None})
    assert run(crew).raw == "about 12000 souls"
    prompts = llm.task_prompts()
    assert len(prompts) == 1 and "population" in prompts[0]  # only the second task ran again
    assert "Poseidonia" in prompts[0]  # the restored first task's output is the context
    resumed = repo.get("crewai/main")
    assert resumed.parents == [first]  # the resumed run's checkpoint descends from the one restored


_RESOLVE_IN_ANOTHER_PROCESS = (
    "import json, sys; from agentsnap_core import Repo; "
    "from agentsnap_crewai.checkpoint import checkpoint_runtime, resolve_checkpoint; "
    "repo = Repo.open(sys.argv[1]); oid = resolve_checkpoint(repo, sys.argv[2]); "
    "tasks = checkpoint_runtime(repo, sys.argv[2])['entities'][0]['tasks']; "
    "print(json.dumps([oid, [t['output']['raw'] if t['output'] else None for t in tasks]]))"
)


def test_a_checkpoint_a_resume_from_an_earlier_one_left_behind_stays_resolvable(
        checkpointed: tuple[Repo, list[str]]) -> None:
    """CrewAI resumes ``main~1`` on branch ``main`` (JsonProvider keeps the later checkpoint's file): the id CrewAI
    gave the later checkpoint ("Resume with ...") still names it, in another process too."""
    repo, (first, second) = checkpointed
    later_id = repo.get(second).manifest["meta"]["crewai_id"]
    run(resume_crew(repo, "crewai/main~1", llm=ScriptedLLM(answers={"population": "a different answer"})))
    assert repo.get("crewai/main").parents == [first]  # the resumed run continued branch main from there
    assert second not in [s.id for s in repo.log("crewai/main")]
    out = subprocess.run([sys.executable, "-c", _RESOLVE_IN_ANOTHER_PROCESS, str(repo.root), later_id],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout) == [second, ["Poseidonia", "about 12000 souls"]]


def test_crew_fork_writes_to_its_own_branch(checkpointed: tuple[Repo, list[str]]) -> None:
    repo, (first, second) = checkpointed
    llm = ScriptedLLM(answers={"population": "forked answer"})
    crew = resume_crew(repo, first, llm=llm, fork="try-b")
    assert crew.agents[0].llm is llm
    assert run(crew).raw == "forked answer"
    fork_head = repo.get("crewai/try-b")
    assert fork_head.parents == [first]
    assert fork_head.manifest["meta"]["crewai_branch"] == "try-b"
    assert repo.resolve("crewai/main") == second  # the original branch is untouched
    assert checkpoint_runtime(repo, second)["entities"][0]["tasks"][1]["output"]["raw"] == "about 12000 souls"


def test_restore_refuses_without_the_live_llm(checkpointed: tuple[Repo, list[str]]) -> None:
    """CrewAI alone would silently turn the custom LLM into an OpenAI client of the same name."""
    repo, (first, _) = checkpointed
    silent = Crew.from_checkpoint(CheckpointConfig(restore_from=checkpoint_path(repo, first)))
    assert not isinstance(silent.agents[0].llm, ScriptedLLM)
    with pytest.raises(MissingLiveObjects, match="Researcher") as err:
        resume_crew(repo, first)
    assert err.value.missing == {"llm": ["Researcher"]}
    assert set(repo.branches()) == {"crewai/main"}  # nothing was written


def test_prune_drops_materialised_files_but_keeps_history(checkpointed: tuple[Repo, list[str]]) -> None:
    repo, (first, second) = checkpointed
    provider = AgentsnapCheckpointProvider()
    assert not (repo.store_dir / "crewai" / "checkpoints").exists()  # no JSON written per checkpoint
    checkpoint_path(repo, first), checkpoint_path(repo, second)  # what restore_from needs, written on demand
    assert provider.prune(str(repo.root), 1, branch="main") == 1
    assert not (repo.store_dir / "crewai" / "checkpoints" / f"{first}.json").exists()
    assert [s.id for s in repo.log("crewai/main")] == [second, first]
    assert Path(checkpoint_path(repo, first)).exists()  # rebuilt from the snapshot on demand
    assert provider.from_checkpoint(checkpoint_path(repo, first)) == checkpoint_data(repo, first)


def _cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """A console script of this environment (``agentsnap`` or ``crewai``), as a user would run it."""
    exe = Path(sys.executable).parent / args[0]
    return subprocess.run([str(exe), *args[1:]], capture_output=True, text=True, timeout=300, cwd=cwd)


def test_the_documented_listing_command_lists_every_checkpoint(checkpointed: tuple[Repo, list[str]]) -> None:
    """README: ``crewai checkpoint list <location>`` has no extension point for other stores; ``agentsnap log`` lists them."""
    repo, (first, second) = checkpointed
    crewai_list = _cli("crewai", "checkpoint", "list", str(repo.root))
    assert "No checkpoints found" in crewai_list.stdout  # CrewAI's CLI globs *.json / reads its SQLite table only
    out = _cli("agentsnap", "-C", str(repo.root), "log", "crewai/main")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert [line.split()[0] for line in lines] == [second[:12], first[:12]]  # newest first, one line per checkpoint
    assert all("crewai checkpoint (task_completed) on main" in line for line in lines)
    shown = _cli("agentsnap", "-C", str(repo.root), "show", "crewai/main~1", "--json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["meta"]["trigger"] == "task_completed"


def test_the_provider_keeps_json_providers_contract_for_refusals_and_plain_files(tmp_path: Path) -> None:
    """As JsonProvider (which CrewAI lets it stand for): a bad branch is a ValueError, a missing file FileNotFoundError,
    and a plain JSON checkpoint file (JsonProvider's, or one checkpoint_path wrote elsewhere) is read as it is."""
    provider = AgentsnapCheckpointProvider()
    with pytest.raises(ValueError, match="escapes checkpoint directory"):
        provider.checkpoint("{}", str(tmp_path / "repo"), branch="../../etc")
    with pytest.raises(ValueError, match="refused"):
        provider.prune(str(tmp_path / "repo"), 1, branch="x~1")
    with pytest.raises(FileNotFoundError):
        provider.from_checkpoint(str(tmp_path / "missing.json"))
    plain = tmp_path / "main" / "20260101T000000_abcd1234_p-none.json"
    plain.parent.mkdir()
    plain.write_text('{"entities": []}', encoding="utf-8")
    assert provider.from_checkpoint(str(plain)) == '{"entities": []}'


def test_secrets_in_llm_configs_and_inputs_are_redacted_in_checkpoints(tmp_path: Path) -> None:
    """CrewAI's checkpoint JSON holds the LLM's api_key and the crew inputs (and descriptions made from them) in clear;
    the provider stores it through core's shared redaction, and resuming then needs the live LLM."""
    llm = ScriptedLLM(answers={"capital": "Poseidonia"}, api_key="sk-proj-abcdefghijklmnopqrstuvwxyz0123")
    agent = Agent(role="Researcher", goal="Answer questions", backstory="A scholar", llm=llm)
    task = Task(description="The capital of Atlantis? Data in {db}.", expected_output="a city", agent=agent)
    crew = Crew(agents=[agent], tasks=[task],
                checkpoint=CheckpointConfig(location=str(tmp_path / "repo"), provider=AgentsnapCheckpointProvider()))
    crew.kickoff(inputs={"db": "postgresql://app:s3cretpw@db.internal/prod"})
    assert crewai_event_bus.flush()
    repo = Repo.open(tmp_path / "repo")
    data = checkpoint_data(repo, "crewai/main")
    assert "sk-proj-abcdefghijklmnopqrstuvwxyz0123" not in data and "s3cretpw" not in data
    assert "postgresql://app:<redacted>@db.internal/prod" in data  # only the secret part of the URL
    redacted = repo.get("crewai/main").manifest["meta"]["redacted"]
    assert any(p.endswith("llm.api_key") for p in redacted) and any("checkpoint_inputs.db" in p for p in redacted)
    with pytest.raises(MissingLiveObjects):
        resume_crew(repo, "crewai/main")


def test_a_checkpoint_without_secrets_is_stored_as_crewai_wrote_it(checkpointed: tuple[Repo, list[str]]) -> None:
    repo, (_first, second) = checkpointed
    assert "redacted" not in repo.get(second).manifest["meta"]
    assert checkpoint_data(repo, second).endswith('"trigger": "task_completed"}')  # CrewAI's own JSON, not re-encoded


def test_the_scan_of_later_checkpoints_still_finds_a_secret_in_a_new_segment() -> None:
    """Only segments not seen before are scanned again: a secret arriving later is still found."""
    from agentsnap_core.layers.redact import _JSON_KEY_HINTS, _VALUE_HINTS
    from agentsnap_crewai.checkpoint import _SEGMENT, _CleanSegments, redact_checkpoint

    clean = _CleanSegments()
    tasks = [{"description": f"step {i}", "output": None} for i in range(5)]
    assert redact_checkpoint(json.dumps({"tasks": tasks}), clean)[1] == {}  # clean: remembered
    tasks[3]["output"] = "connect with postgresql://app:s3cretpw@db/prod"
    data, paths = redact_checkpoint(json.dumps({"tasks": tasks}), clean)
    assert "s3cretpw" not in data and list(paths) == ["tasks[3].output"]
    sep = _SEGMENT  # no hint of core's may_hold_secret contains or overlaps the separator: each lies within one segment
    hints = _VALUE_HINTS + _JSON_KEY_HINTS
    assert not any(sep in h or any(h[-k:] == sep[:k] or h[:k] == sep[-k:] for k in range(1, len(sep))) for h in hints)
