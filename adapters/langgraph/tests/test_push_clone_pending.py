"""A LangGraph thread that stopped with pending writes (a human-approval interrupt, or a super-step where one node
failed and another finished) pushed to a teammate: the writes must travel with the thread, or the teammate's copy is
not the same thread (the question to approve is gone; a finished node runs again)."""

from __future__ import annotations

import operator
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import pytest
from agentsnap_core.repo import Repo
from agentsnap_langgraph import PFSaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt
from lg_kit import cfg
from test_push_clone import cli
from typing_extensions import TypedDict


class Job(TypedDict, total=False):
    draft: str
    approved: str
    log: Annotated[list[str], operator.add]


def approval_graph(saver: Any) -> Any:
    def write(state: Job) -> dict[str, Any]:
        return {"draft": "rm -rf build", "log": ["write"]}

    def ask(state: Job) -> dict[str, Any]:
        answer = interrupt({"question": f"run {state['draft']}?"})
        return {"approved": answer, "log": [f"ask:{answer}"]}

    g = StateGraph(Job)
    g.add_node("write", write)
    g.add_node("ask", ask)
    g.add_edge(START, "write")
    g.add_edge("write", "ask")
    g.add_edge("ask", END)
    return g.compile(checkpointer=saver)


def test_a_thread_waiting_for_approval_reaches_the_teammate_with_its_question(tmp_path: Path) -> None:
    """Before: the clone's ``get_state`` said the thread waits in ``ask`` but held no interrupt (``interrupts == ()``):
    the question a teammate was sent the thread to answer was not there (pending writes lived only in the pushing
    store's checkpoint index). Now the question arrives with its id, the teammate's answer resumes the run, and the
    first store, opened again, still resumes where it stopped."""
    mine, bare, theirs = tmp_path / "mine", tmp_path / "shared.store", tmp_path / "theirs"
    with PFSaver(mine) as saver:
        graph = approval_graph(saver)
        graph.invoke({"log": []}, cfg("job"))
        asked = graph.get_state(cfg("job"))
    assert asked.next == ("ask",) and len(asked.interrupts) == 1
    cli(mine, "push", str(bare), "langgraph/job")
    cli(tmp_path, "clone", str(bare), str(theirs))

    with PFSaver(theirs) as saver:
        graph = approval_graph(saver)
        there = graph.get_state(cfg("job"))
        assert there.next == ("ask",)
        assert [(i.id, i.value) for i in there.interrupts] == [(i.id, i.value) for i in asked.interrupts]
        done = graph.invoke(Command(resume={asked.interrupts[0].id: "yes"}), cfg("job"))
        assert done["approved"] == "yes" and done["log"] == ["write", "ask:yes"]
        assert graph.get_state(cfg("job")).interrupts == ()
    with PFSaver(theirs) as saver:  # opened again: nothing adopted twice, the answered question stays answered
        assert approval_graph(saver).get_state(cfg("job")).values["log"] == ["write", "ask:yes"]
    cli(theirs, "verify")

    with PFSaver(mine) as saver:  # the pushing store is unchanged to LangGraph: it resumes there as before
        graph = approval_graph(saver)
        assert [i.id for i in graph.get_state(cfg("job")).interrupts] == [asked.interrupts[0].id]
        assert graph.invoke(Command(resume="no"), cfg("job"))["log"] == ["write", "ask:no"]
    cli(mine, "verify")


class Fan(TypedDict, total=False):
    results: Annotated[list[str], operator.add]


RUNS: dict[str, int] = {}


def fan_graph(saver: Any, fail: bool, ctrl_c: bool = False) -> Any:
    """Two nodes in one super-step: ``slow_tool`` finishes; ``flaky`` raises (``fail``), or runs while Ctrl-C comes
    (``ctrl_c``: once ``slow_tool`` is done; being a model call, it still runs to its end in its worker thread)."""
    def slow_tool(state: Fan) -> dict[str, Any]:
        RUNS["slow_tool"] = RUNS.get("slow_tool", 0) + 1
        return {"results": ["slow_tool done"]}

    def flaky(state: Fan) -> dict[str, Any]:
        if fail:
            raise RuntimeError("flaky failed")
        RUNS["flaky"] = RUNS.get("flaky", 0) + 1
        if ctrl_c:
            while RUNS.get("slow_tool", 0) == 0:
                time.sleep(0.01)
            os.kill(os.getpid(), signal.SIGINT)  # what the terminal sends: Python raises it in the main thread
            time.sleep(0.5)
        return {"results": ["flaky done"]}

    g = StateGraph(Fan)
    g.add_node("slow_tool", slow_tool)
    g.add_node("flaky", flaky)
    g.add_edge(START, "slow_tool")
    g.add_edge(START, "flaky")
    g.add_edge("slow_tool", END)
    g.add_edge("flaky", END)
    return g.compile(checkpointer=saver)


def test_a_super_step_that_failed_halfway_is_finished_by_the_teammate_without_running_the_done_node_again(
        tmp_path: Path) -> None:
    """Before: one node of a parallel step raised, the other had finished (its writes pending on the checkpoint). On
    the clone those writes were missing: resuming ran the finished node a second time (a tool with side effects ran
    twice). Now the teammate's resume runs only the node that failed, as it would on the first store."""
    mine, bare, theirs = tmp_path / "mine", tmp_path / "shared.store", tmp_path / "theirs"
    RUNS.clear()
    with PFSaver(mine) as saver:
        try:
            fan_graph(saver, fail=True).invoke({"results": []}, cfg("fan"))
        except RuntimeError:
            pass
        else:
            raise AssertionError("the flaky node should have failed")
    assert RUNS == {"slow_tool": 1}
    cli(mine, "push", str(bare), "langgraph/fan")
    cli(tmp_path, "clone", str(bare), str(theirs))
    with PFSaver(theirs) as saver:
        out = fan_graph(saver, fail=False).invoke(None, cfg("fan"))
    assert sorted(out["results"]) == ["flaky done", "slow_tool done"]
    assert RUNS == {"slow_tool": 1, "flaky": 1}, "the finished node ran again on the teammate's store"
    repo = Repo.open(theirs)
    try:
        assert repo.refs.get_ref("refs/heads/langgraph/fan")
    finally:
        repo.close()


class Review(TypedDict, total=False):
    facts: Annotated[list[str], operator.add]
    verdict: str


def nested_graph(saver: Any) -> Any:
    def research(state: Review) -> dict[str, Any]:
        RUNS["research"] = RUNS.get("research", 0) + 1  # a costly tool call inside the subgraph
        return {"facts": ["fact"]}

    def review(state: Review) -> dict[str, Any]:
        return {"verdict": interrupt({"question": "publish?", "facts": state["facts"]})}

    sub = StateGraph(Review)
    sub.add_node("research", research)
    sub.add_node("review", review)
    sub.add_edge(START, "research")
    sub.add_edge("research", "review")
    sub.add_edge("review", END)
    g = StateGraph(Review)
    g.add_node("desk", sub.compile())
    g.add_edge(START, "desk")
    g.add_edge("desk", END)
    return g.compile(checkpointer=saver)


def test_an_interrupt_inside_a_subgraph_resumes_on_the_teammate_store_where_it_stopped(tmp_path: Path) -> None:
    """Before: the subgraph's checkpoints (their refs are not branches) stayed behind: on the clone the question
    arrived but resuming ran the subgraph again from its start (the research step a second time). Now the stopped
    run's record names the subgraph's newest checkpoint too, the clone indexes that namespace, and the teammate's
    answer resumes the subgraph at its interrupt, as on the first store."""
    mine, bare, theirs = tmp_path / "mine", tmp_path / "shared.store", tmp_path / "theirs"
    RUNS.clear()
    with PFSaver(mine) as saver:
        graph = nested_graph(saver)
        graph.invoke({"facts": []}, cfg("desk"))
        asked = graph.get_state(cfg("desk"))
    assert RUNS == {"research": 1} and len(asked.interrupts) == 1
    cli(mine, "push", str(bare), "langgraph/desk")
    cli(tmp_path, "clone", str(bare), str(theirs))
    with PFSaver(theirs) as saver:
        graph = nested_graph(saver)
        there = graph.get_state(cfg("desk"), subgraphs=True)
        assert [i.value for i in there.interrupts] == [asked.interrupts[0].value]
        assert there.tasks[0].state.values["facts"] == ["fact"]  # the subgraph's own state came along
        out = graph.invoke(Command(resume="yes"), cfg("desk"))
    assert out == {"facts": ["fact"], "verdict": "yes"}
    assert RUNS == {"research": 1}, "the subgraph ran again from its start on the teammate's store"
    cli(theirs, "verify")


def test_a_copy_or_fork_of_a_thread_waiting_for_approval_carries_the_question_when_pushed(tmp_path: Path) -> None:
    """Before: ``copy_thread`` and ``fork_thread`` of a thread stopped at an interrupt showed the question in the first
    store (the index's writes were copied), but their branches named the bare checkpoint: pushed, the copy reached the
    teammate with no interrupt. Now each copy's branch records the stop too."""
    mine, bare, theirs = tmp_path / "mine", tmp_path / "shared.store", tmp_path / "theirs"
    with PFSaver(mine) as saver:
        graph = approval_graph(saver)
        graph.invoke({"log": []}, cfg("job"))
        asked = graph.get_state(cfg("job")).interrupts
        saver.copy_thread("job", "job-copy")
        fork, = saver.fork_thread(cfg("job"), 1)
    forked = fork["configurable"]["thread_id"]
    for thread in ("job-copy", forked):
        cli(mine, "push", str(bare), f"langgraph/{thread}")
    cli(tmp_path, "clone", str(bare), str(theirs))
    with PFSaver(theirs) as saver:
        graph = approval_graph(saver)
        for thread in ("job-copy", forked):
            assert [(i.id, i.value) for i in graph.get_state(cfg(thread)).interrupts] == \
                [(i.id, i.value) for i in asked], thread
            assert graph.invoke(Command(resume="ok"), cfg(thread))["log"] == ["write", "ask:ok"]


def test_a_run_stopped_by_ctrl_c_reaches_the_teammate_with_its_finished_nodes_writes(tmp_path: Path) -> None:
    """Ctrl-C during a parallel super-step: Python raises KeyboardInterrupt in the main thread, the nodes running in
    worker threads finish and their writes are stored, but no new checkpoint is made and LangGraph writes no
    ``__error__``: nothing marked the checkpoint as stopped, so its pending writes stayed in the pushing store's index.
    Before: on the teammate's clone both tools ran a second time (the first store resumes without running either).
    Now the saver records the pending writes of a thread it leaves stopped when it closes (its ``with`` block,
    ``close()``, or at exit), once; the teammate's resume runs no node again."""
    mine, bare, theirs = tmp_path / "mine", tmp_path / "shared.store", tmp_path / "theirs"
    RUNS.clear()
    with PFSaver(mine) as saver:
        try:
            fan_graph(saver, fail=False, ctrl_c=True).invoke({"results": []}, cfg("ctrl-c"))
        except KeyboardInterrupt:
            pass
        else:
            raise AssertionError("the run should have been cut short")
    assert RUNS == {"slow_tool": 1, "flaky": 1}
    with PFSaver(mine):  # (closed again with nothing new: nothing recorded twice)
        pass
    cli(mine, "push", str(bare), "langgraph/ctrl-c")
    cli(tmp_path, "clone", str(bare), str(theirs))
    with PFSaver(theirs) as saver:
        out = fan_graph(saver, fail=False).invoke(None, cfg("ctrl-c"))
    assert sorted(out["results"]) == ["flaky done", "slow_tool done"]
    assert RUNS == {"slow_tool": 1, "flaky": 1}, f"finished nodes ran again on the teammate's store: {RUNS}"
    repo = Repo.open(mine)
    try:
        stops = [s for s in repo.log("refs/heads/langgraph/ctrl-c") if "pending writes" in s.message]
        assert len(stops) == 1, [s.message for s in stops]
    finally:
        repo.close()


def test_a_thread_pruned_or_cut_back_still_reaches_the_teammate_as_it_is_here(tmp_path: Path) -> None:
    """``prune([thread], strategy="keep_latest")`` of a thread waiting for approval kept the question here but moved the
    branch to the re-rooted checkpoint without its writes record: a push then sent the thread without the question
    (the teammate's ``get_state`` said it waits in ``ask`` with no interrupt). ``delete_for_runs`` of the run that
    answered moved the branch back the same way, so the teammate saw ``ask`` still to run while this store had its
    writes. Now both record the writes of the checkpoint the branch is left at, and the teammate sees this state."""
    import uuid

    def pushed(mine: Path, name: str) -> Any:
        bare, theirs = tmp_path / f"{name}.store", tmp_path / f"{name}-theirs"
        cli(mine, "push", str(bare), "langgraph/job")
        cli(tmp_path, "clone", str(bare), str(theirs))
        with PFSaver(theirs) as saver:
            return approval_graph(saver).get_state(cfg("job"))

    mine = tmp_path / "pruned"
    with PFSaver(mine) as saver:
        graph = approval_graph(saver)
        graph.invoke({"log": []}, cfg("job"))
        asked = graph.get_state(cfg("job"))
    with PFSaver(mine) as saver:  # (later: the housekeeping of another process)
        saver.prune(["job"], strategy="keep_latest")
        assert [i.id for i in approval_graph(saver).get_state(cfg("job")).interrupts] == [asked.interrupts[0].id]
    there = pushed(mine, "pruned")
    assert there.next == ("ask",) and [i.id for i in there.interrupts] == [asked.interrupts[0].id]

    mine, first, second = tmp_path / "cut", str(uuid.uuid4()), str(uuid.uuid4())
    with PFSaver(mine) as saver:
        graph = approval_graph(saver)
        graph.invoke({"log": []}, {**cfg("job"), "metadata": {"run_id": first}})
        graph.invoke(Command(resume="yes"), {**cfg("job"), "metadata": {"run_id": second}})
    with PFSaver(mine) as saver:
        saver.delete_for_runs([second])
        here = approval_graph(saver).get_state(cfg("job"))
    there = pushed(mine, "cut")
    assert (there.next, there.values, len(there.interrupts)) == (here.next, here.values, len(here.interrupts))


KILLED = """
import os, signal, sys, time
sys.path.insert(0, {tests!r})
from agentsnap_langgraph import PFSaver
from langgraph.types import Command
from lg_kit import cfg
from test_push_clone_pending import approval_graph, fan_graph
saver = PFSaver({store!r}, flush_interval=3600)  # (nothing flushes by itself before the kill)
if {case!r} == "answered":
    graph = approval_graph(saver)
    graph.invoke({{"log": []}}, cfg("job"))
    saver.flush()  # the question is on the branch ...
    graph.invoke(Command(resume="yes"), cfg("job"))  # ... and answered, in checkpoints not flushed yet
    os.kill(os.getpid(), signal.SIGKILL)  # the OOM killer, a preempted machine: no close(), no atexit
else:
    def kill(*_):
        time.sleep(0.2)  # (slow_tool's writes are stored; flaky is still running)
        os.kill(os.getpid(), signal.SIGKILL)
    signal.signal(signal.SIGINT, kill)
    fan_graph(saver, fail=False, ctrl_c=True).invoke({{"results": []}}, cfg("job"))
"""


@pytest.mark.parametrize("case", ["answered", "mid-step"])
def test_a_killed_process_leaves_its_threads_said_and_the_next_saver_records_them(tmp_path: Path, case: str) -> None:
    """A process killed (SIGKILL, SIGTERM without a handler) before its saver closed: its last checkpoints were in the
    index but not on the thread's branch (flushed every ``flush_interval``), and writes of a super-step it was in were
    recorded nowhere the branch names. Before, ``agentsnap status`` and ``push`` said nothing: the push sent the thread
    as it was at the last flush (still waiting for an approval the run had since received), and after the next
    saver's recovery the finished node's writes still did not travel (the teammate ran it again). Now each saver keeps
    a journal of the threads it wrote to (core's write-behind convention, docs/PLUGINS.md): status and push name a
    dead one, and the next saver on the store records those threads (their checkpoints, and the writes on a tip)."""
    mine, bare, theirs = tmp_path / "mine", tmp_path / "shared.store", tmp_path / "theirs"
    script = KILLED.format(tests=str(Path(__file__).parent), store=str(mine), case=case)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    status = subprocess.run([sys.executable, "-m", "agentsnap_core", "status"], cwd=mine, capture_output=True,
                            text=True, timeout=300)
    assert "journal" in status.stderr and "langgraph" in status.stderr, status.stderr
    def graph_of(saver: Any) -> Any:
        return approval_graph(saver) if case == "answered" else fan_graph(saver, fail=False)

    RUNS.clear()
    with PFSaver(mine) as saver:  # the next saver on the store: recovers what the killed one left
        here = graph_of(saver).get_state(cfg("job"))
    status = subprocess.run([sys.executable, "-m", "agentsnap_core", "status"], cwd=mine, capture_output=True,
                            text=True, timeout=300)
    assert "journal" not in status.stderr, status.stderr
    cli(mine, "push", str(bare), "langgraph/job")
    cli(tmp_path, "clone", str(bare), str(theirs))
    with PFSaver(theirs) as saver:
        graph = graph_of(saver)
        there = graph.get_state(cfg("job"))
        assert (there.next, there.values) == (here.next, here.values)
        if case == "mid-step":
            out = graph.invoke(None, cfg("job"))
            assert sorted(out["results"]) == ["flaky done", "slow_tool done"]
            assert RUNS == {"flaky": 1}, f"the finished node ran again on the teammate's store: {RUNS}"
