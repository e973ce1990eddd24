"""A real StateGraph (tools, interrupt/resume in a subgraph, Send fan-out, time travel) behaves with
PFSaver exactly as with LangGraph's InMemorySaver, also across process restarts."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from agentsnap_core import Repo
from agentsnap_core.testing.servers import need_module

need_module("langgraph.prebuilt")

import lg_script  # noqa: E402
from agentsnap_langgraph import PFSaver, thread_ref  # noqa: E402
from langgraph.checkpoint.memory import InMemorySaver  # noqa: E402

HERE = Path(__file__).parent


@pytest.fixture(scope="module")
def reference() -> list[dict[str, Any]]:
    """The script's normalized history with LangGraph's own InMemorySaver."""
    graph = lg_script.build(InMemorySaver())
    lg_script.phase1(graph)
    lg_script.phase2(graph)
    return lg_script.normalize(graph)


def test_reference_script_exercises_every_feature(reference: list[dict[str, Any]]) -> None:
    """Guard: the script really has a tool call, an interrupt, a fan-out, an update and a second branch."""
    steps = reference[:-1]
    assert any(m["type"] == "tool" for m in steps[0]["values"]["messages"])
    assert any(t[1] for s in steps for t in s["tasks"]), "no interrupt in the history"
    assert any(s["next"] == ["work", "work", "work"] for s in steps)
    assert any(s["source"] == "update" for s in steps)
    parents = [s["parent"] for s in steps if s["parent"] is not None]
    assert len(parents) != len(set(parents)), "no checkpoint has two children: no time travel happened"


def test_history_matches_inmemory_saver(store: Path, reference: list[dict[str, Any]]) -> None:
    with PFSaver(store) as saver:
        graph = lg_script.build(saver)
        interrupted = lg_script.phase1(graph)
        assert interrupted["__interrupt__"][0].value["question"] == "approve the answer?"
        assert graph.get_state(lg_script.THREAD).next == ("approval",)
        lg_script.phase2(graph)
        assert lg_script.normalize(graph) == reference


async def test_async_run_matches_inmemory_saver(store: Path) -> None:
    """The same first phase through ainvoke / aget_state_history."""
    from langchain_core.messages import HumanMessage

    async def run(checkpointer: Any) -> list[Any]:
        graph = lg_script.build(checkpointer)
        await graph.ainvoke({"messages": [HumanMessage(content="what is 2 + 3?", id="h-1")]}, lg_script.THREAD)
        return [
            (s.next, s.metadata.get("step"), s.metadata.get("source"), len(s.values.get("messages", [])))
            async for s in graph.aget_state_history(lg_script.THREAD)
        ]

    with PFSaver(store) as saver:
        assert await run(saver) == await run(InMemorySaver())


def _phase(n: str, store: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), *sys.path])}
    proc = subprocess.run(
        [sys.executable, str(HERE / "lg_script.py"), n, str(store)], capture_output=True, text=True, env=env, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_history_survives_process_restarts(store: Path, reference: list[dict[str, Any]]) -> None:
    """Phase 1 (until the interrupt) and phase 2 (resume + time travel) each run in their own process."""
    _phase("1", store)
    _phase("2", store)
    with PFSaver(store) as saver:
        assert lg_script.normalize(lg_script.build(saver)) == reference
    repo = Repo.open(store)
    report = repo.verify()
    assert report["ok"], report["problems"]
    head = repo.refs.get_ref(thread_ref("script"))
    assert head is not None, "the thread ref was not moved"
    snaps = repo.log(head)
    assert [s.manifest["meta"]["step"] for s in snaps] == [5, 4, 3, 2, 1, 0, -1]  # the newest branch
    assert {s.manifest["meta"]["thread_id"] for s in snaps} == {"script"}
    from agentsnap_core.maintenance import reachable

    with PFSaver(store) as saver:
        indexed = {row[4] for row in saver.index.iter_rows(None, None, None, None, None)}
    assert len(indexed) > 11  # the 11 root checkpoints plus the subgraph namespace's
    assert indexed <= reachable(repo), "a checkpoint snapshot is not reachable from any ref: gc would drop it"


def test_agentsnap_log_shows_thread_step_source(store: Path) -> None:
    with PFSaver(store) as saver:
        lg_script.phase1(lg_script.build(saver))
    env = {**os.environ, "AGENTSNAP_PLUGINS": "none"}
    proc = subprocess.run(
        [sys.executable, "-m", "agentsnap_core", "log", thread_ref("script"), "--json"],
        cwd=store,
        capture_output=True,
        text=True,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    entries = json.loads(proc.stdout)
    # the run stopped at an interrupt: its pending writes are the branch's tip (they travel with the thread on push)
    waiting = entries.pop(0)
    assert waiting["meta"]["stopped"] == "interrupt" and waiting["meta"]["step"] == 3
    assert "langgraph script step 3: stopped (interrupt), its pending writes" in waiting["message"]
    # ... with the subgraph that stopped (its checkpoints are parents of that record, so they travel too)
    assert {e["meta"]["checkpoint_ns"].split(":")[0] for e in entries if e["meta"]["checkpoint_ns"]} == {"approval"}
    metas = [e["meta"] for e in entries if not e["meta"]["checkpoint_ns"]]
    assert [m["step"] for m in metas] == [3, 2, 1, 0, -1]
    assert {m["thread_id"] for m in metas} == {"script"}
    assert [m["source"] for m in metas][-1] == "input"
    assert all(e["agent"] == "langgraph" for e in entries)
    # (the subgraph's checkpoints are made while step 3 runs: by time they come before or after it, within a ms)
    assert "langgraph script step 3 (loop)" in [e for e in entries if not e["meta"]["checkpoint_ns"]][0]["message"]


def test_encrypted_serializer(store: Path, reference: list[dict[str, Any]]) -> None:
    """With EncryptedSerializer the same history comes back and no object holds the plain text."""
    need_module("Crypto.Cipher")
    from langgraph.checkpoint.serde.encrypted import EncryptedSerializer

    serde = EncryptedSerializer.from_pycryptodome_aes(key=b"0123456789abcdef")
    with PFSaver(store, serde=serde) as saver:
        graph = lg_script.build(saver)
        lg_script.phase1(graph)
        lg_script.phase2(graph)
        assert lg_script.normalize(graph) == reference
    objects = Repo.open(store).objects
    for oid in objects.iter_oids():
        _kind, raw = objects.get(oid)
        assert b"what is 2 + 3" not in raw
        assert b"approve the answer" not in raw


class _Boom:
    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, ("touch pwned",))


def test_pickle_payloads_are_never_loaded(store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A 'pickle' typed value planted in the store raises instead of running code (no pickle fallback)."""
    monkeypatch.chdir(tmp_path)
    with PFSaver(store) as saver:
        graph = lg_script.build(saver)
        lg_script.phase1(graph)
        cfg = graph.get_state(lg_script.THREAD).config
        saver.put_writes(cfg, [("results", "ok")], "task-x")
        with saver.index.tx() as db:
            db.execute("UPDATE lg_writes SET type='pickle', value=? WHERE task_id='task-x'", (pickle.dumps(_Boom()),))
        with pytest.raises(Exception, match="pickle|Unknown serialization"):
            saver.get_tuple(cfg)
    assert not (tmp_path / "pwned").exists()
