"""Each seed's README example, rewritten against agentsnap's Python API (examples/api/), runs as a test.

Seeds (small tools in this space, each good at one piece):
* agent-checkpoint (github.com/darshjme/agent-checkpoint): state_dict mixin, rollback on exception, clone,
  schema versions + migration hooks -> ``rollback_agent.py``, ``migration.py``;
* AgentStateProtocol (pypi agentstateprotocol): per-step checkpoints, history, rollback N steps -> ``timeline.py``;
* snapstate-sdk (pypi snapstate-sdk 1.0.0): save per step, resume, replay, handoff between agents, async ->
  ``handoff.py``;
* durable agents' "Time-To-Live (TTL) for durable agent sessions" doc -> ``ttl.py``.
"""

from __future__ import annotations

import asyncio
import importlib.util
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import agentsnap_core
import pytest
from agentsnap_core.format.migrations import clear_migrations
from agentsnap_core.repository.retention import SnapshotGone
from click.testing import CliRunner

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "api"


def load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"agentsnap_example_{name}", EXAMPLES / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # classes named in snapshots must be importable by name
    spec.loader.exec_module(module)
    return module


@pytest.fixture(autouse=True)
def _no_leftover_migrations() -> Iterator[None]:
    yield
    clear_migrations()


def test_seed_rollback_agent_with_memory_and_counters_after_failed_call(tmp_path: Path) -> None:
    ex = load("rollback_agent")
    out = ex.main(str(tmp_path))
    agent = out["agent"]
    assert out["error"] == "search API timed out"
    assert (agent.memory, agent.call_count, agent.tools_used) == (["hello", "world"], 2, set())
    assert agent._llm.startswith("a client object")  # private attributes are left alone by the rollback
    assert out["fresh"].memory == ["hello", "world"] and out["twin"].call_count == 3
    state = agentsnap_core.Client(tmp_path).repo.read_layer(out["snapshot"], "state")
    assert "_llm" not in state["state"] and state["class"] == "MyAgent"


def test_seed_seven_step_timeline_newest_first_and_rollback_three_steps(tmp_path: Path) -> None:
    ex = load("timeline")
    out = ex.main(str(tmp_path))
    timeline = out["timeline"]
    assert len(timeline) == 7
    assert [t.message for t in timeline] == ["answer", "rank", "infer_preferences", "reviews", "filter", "search", "parse_input"]
    assert [t.time for t in timeline] == sorted((t.time for t in timeline), reverse=True)
    assert all(t.parents == [older.id] for t, older in zip(timeline, timeline[1:], strict=False))  # one chain: the session
    assert timeline[0].metadata == {"confidence": 0.95, "logic_step": "answer"}
    assert out["rolled_back"].state == {"stage": "reviews", "stars": {"La Cabra": 4.7}}
    with agentsnap_core.Client(tmp_path) as client:  # tuples came back as tuples
        assert client.restore(timeline[5].id, into=ex.ResearchAgent()).state["results"] == ("Devocion", "La Cabra")
    # the CLI sees the same snapshots
    from agentsnap_core.cli import main

    res = CliRunner().invoke(main, ["-C", str(tmp_path), "timeline", "--agent", "research-agent", "--json"])
    assert res.exit_code == 0, res.output
    assert res.output.count('"id"') == 7
    log = CliRunner().invoke(main, ["-C", str(tmp_path), "log", "refs/agents/research-agent/nyc-coffee"])
    assert log.exit_code == 0 and "parse_input" in log.output and "answer" in log.output


def test_seed_handoff_keeps_the_parent_chain(tmp_path: Path) -> None:
    ex = load("handoff")
    out = ex.main(str(tmp_path))
    chain = out["lineage"]
    assert [c.message for c in chain] == ["draft written", "hand off to the writer", "step 2", "step 1"]
    assert chain[1].handoff_from == chain[2].id and chain[1].parents[0] == chain[2].id
    assert out["writer"].sources == ["arxiv.org/123", "arxiv.org/456"]
    with agentsnap_core.Client(tmp_path) as client:
        assert [t.message for t in client.timeline("researcher")] == ["step 2", "step 1"]  # source untouched
        assert [t.message for t in client.timeline("writer")] == ["draft written", "hand off to the writer"]
    assert asyncio.run(ex.main_async(str(tmp_path))) == ["writer", "researcher"]


def test_seed_ttl_expiry(tmp_path: Path) -> None:
    ex = load("ttl")
    out = ex.main(str(tmp_path))
    assert "expired" in out["refused"] and "cannot be restored" in out["refused"]
    assert out["gc"]["removed"] >= 1  # the expired snapshot's own state layer was reclaimed
    with agentsnap_core.Client(tmp_path) as client:
        tomb = client.repo.manifest(out["short"])  # the manifest stays: the kept snapshot descends from it
        assert not client.repo.objects.has(tomb["layers"]["state"]["content"])
        assert client.repo.manifest(out["kept"])["parents"] == [out["short"]]
        client.expire(out["short"])  # the example's clock ran ahead; mark it for the real clock too
        with pytest.raises(SnapshotGone, match="was expired"):
            client.repo.restore_into(ex.Session(), out["short"])


def test_seed_migration_from_1_0_to_2_0(tmp_path: Path) -> None:
    ex = load("migration")
    out = ex.main(str(tmp_path))
    assert "no migration from version 1.0" in out["refused"] and "register_migration('MyAgent', '1.0'" in out["refused"]
    assert vars(out["agent"]) == {"memory": [{"role": "user", "text": "hello"}, {"role": "user", "text": "world"}], "calls": 2}


@pytest.mark.parametrize("name", ["rollback_agent", "timeline", "handoff", "ttl", "migration"])
def test_seed_example_runs_as_a_script(name: str, tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, str(EXAMPLES / f"{name}.py")], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip()
