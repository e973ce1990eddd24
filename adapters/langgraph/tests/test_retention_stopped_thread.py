"""``agentsnap prune`` / ``gc`` on a thread that waits at an interrupt keeps the thread where it stopped.

README ("agentsnap prune / expire and LangGraph"): "Each thread's newest checkpoint (its ref) is always kept". A thread
stopped at an ``interrupt()`` (or on a failed node) has a writes snapshot at its branch's tip (``_writes``), a child of
its newest checkpoint; core's prune keeps only what refs name, so it marked that checkpoint dead, the saver dropped its
row on open and gc reclaimed its values. Before: ``get_state`` of a thread waiting for approval came back ``{}`` with
no question, and the answer started the run over - no error anywhere (``agentsnap verify`` passed).
"""

from __future__ import annotations

import operator
from pathlib import Path
from typing import Annotated, Any

from agentsnap_langgraph import PFSaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, Send, interrupt
from lg_kit import cfg
from test_push_clone import cli
from test_push_clone_pending import approval_graph
from typing_extensions import TypedDict


def prune_everything_the_cli_may(store: Path) -> None:
    cli(store, "prune", "--keep-last", "1")
    cli(store, "gc", "--prune", "now")
    cli(store, "verify")


def test_a_thread_waiting_for_approval_keeps_its_question_through_prune_and_gc(store: Path) -> None:
    with PFSaver(store) as saver:
        graph = approval_graph(saver)
        graph.invoke({"log": []}, cfg("job"))
        asked = graph.get_state(cfg("job"))
    assert asked.next == ("ask",) and len(asked.interrupts) == 1

    prune_everything_the_cli_may(store)

    with PFSaver(store) as saver:
        graph = approval_graph(saver)
        kept = graph.get_state(cfg("job"))
        assert kept.values == asked.values == {"draft": "rm -rf build", "log": ["write"]}  # was: {}
        assert kept.next == ("ask",)
        assert [(i.id, i.value) for i in kept.interrupts] == [(i.id, i.value) for i in asked.interrupts]
        assert kept.config == asked.config
        done = graph.invoke(Command(resume="yes"), cfg("job"))
        assert done == {"draft": "rm -rf build", "approved": "yes", "log": ["write", "ask:yes"]}  # was: asked again
    # once the thread went on, the checkpoint prune marked is dropped as any other (only the ref's is kept)
    with PFSaver(store) as saver:
        graph = approval_graph(saver)
        history = list(graph.get_state_history(cfg("job")))
        assert asked.config not in [s.config for s in history]
        assert graph.get_state(cfg("job")).values["log"] == ["write", "ask:yes"]


class Part(TypedDict, total=False):
    name: str
    log: Annotated[list[str], operator.add]


class Plan(TypedDict, total=False):
    log: Annotated[list[str], operator.add]


def parallel_approvals(saver: Any) -> Any:
    """Two calls of one subgraph node at once (``Send``), each stopping at its own interrupt: two namespaces, one
    node ref (``refs/langgraph-ns/<thread>/review``) that names only the newer one."""

    def prep(state: Part) -> dict[str, Any]:
        return {"log": [f"prep {state['name']}"]}

    def ask(state: Part) -> dict[str, Any]:
        answer = interrupt(f"ship {state['name']}?")
        return {"log": [f"{state['name']}:{answer}"]}

    sub = StateGraph(Part)
    sub.add_node("prep", prep)
    sub.add_node("ask", ask)
    sub.add_edge(START, "prep")
    sub.add_edge("prep", "ask")
    sub.add_edge("ask", END)

    def plan(state: Plan) -> dict[str, Any]:
        return {"log": ["plan"]}

    g = StateGraph(Plan)
    g.add_node("plan", plan)
    g.add_node("review", sub.compile())
    g.add_edge(START, "plan")
    g.add_conditional_edges("plan", lambda s: [Send("review", {"name": n}) for n in ("a", "b")], ["review"])
    g.add_edge("review", END)
    return g.compile(checkpointer=saver)


def test_parallel_subgraph_interrupts_keep_their_progress_through_prune_and_gc(store: Path) -> None:
    with PFSaver(store) as saver:
        graph = parallel_approvals(saver)
        graph.invoke({"log": []}, cfg("ship"))
        asked = graph.get_state(cfg("ship"), subgraphs=True)
    subs = sorted(tuple(t.state.values["log"]) for t in asked.tasks)
    assert subs == [("prep a",), ("prep b",)] and len(asked.interrupts) == 2

    prune_everything_the_cli_may(store)

    with PFSaver(store) as saver:
        graph = parallel_approvals(saver)
        kept = graph.get_state(cfg("ship"), subgraphs=True)
        assert kept.values == asked.values == {"log": ["plan"]}
        assert sorted(tuple(t.state.values["log"]) for t in kept.tasks) == subs
        assert sorted(i.value for i in kept.interrupts) == ["ship a?", "ship b?"]
        answers = {i.id: f"ok-{i.value[5]}" for i in kept.interrupts}
        done = graph.invoke(Command(resume=answers), cfg("ship"))
        # each subgraph call goes on from its interrupt: its "prep" ran once, before the prune
        assert sorted(done["log"]) == sorted(["plan", "prep a", "a:ok-a", "prep b", "b:ok-b"])
