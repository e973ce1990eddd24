"""With ``world_root``, the files captured with a checkpoint are the files as they were at that checkpoint.

Reported (tried as a user, langgraph 1.2.22): a graph ``plan -> act`` whose ``act`` node writes ``out.txt``, run with
``PFSaver(".", world_root=".")`` and a plain ``graph.invoke``. The checkpoint taken before ``act`` (``next ==
("act",)``) held ``out.txt``, so ``restore_world`` to it - the undo of what ``act`` did - left ``act``'s file in
place, and a fork's worktree from it had it too. Nothing said so. The cause: LangGraph's default durability
("async") stores a checkpoint in a background thread while the next step's nodes already run, so the saver's scan
of the files raced with ``act``. A graph run that does not wait for its checkpoints (LangGraph's
``durability="sync"``; or "exit", which only stores the run's last checkpoint, once every node is done) is now
refused at its first checkpoint with the fix in the message; ``update_state`` and direct ``put`` calls, which no
node runs beside, work as before.
"""

from __future__ import annotations

import operator
from pathlib import Path
from typing import Annotated, Any

import pytest
from agentsnap_core.errors import InvalidInput
from agentsnap_langgraph import PFSaver
from langgraph.graph import END, START, StateGraph
from typing_extensions import TypedDict


class Work(TypedDict):
    log: Annotated[list[str], operator.add]


def _graph(saver: PFSaver, project: Path) -> Any:
    def plan(state: Work) -> dict[str, Any]:
        return {"log": ["plan"]}

    def act(state: Work) -> dict[str, Any]:
        (project / "out.txt").write_text("acted\n")
        return {"log": ["act"]}

    builder = StateGraph(Work)
    builder.add_node("plan", plan)
    builder.add_node("act", act)
    builder.add_edge(START, "plan")
    builder.add_edge("plan", "act")
    builder.add_edge("act", END)
    return builder.compile(checkpointer=saver)


def _cfg(thread: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread}}


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    (root / "notes.txt").write_text("mine\n")
    return root


@pytest.mark.parametrize("durability", [None, "async"])
def test_a_run_that_does_not_wait_for_its_checkpoints_is_refused_naming_the_fix(project: Path,
                                                                                 durability: str | None) -> None:
    with PFSaver(project / "store", world_root=project) as saver:
        graph = _graph(saver, project)
        run = {} if durability is None else {"durability": durability}
        with pytest.raises(InvalidInput, match='durability="sync"'):
            graph.invoke({"log": []}, _cfg("t"), **run)


async def test_an_async_run_that_does_not_wait_is_refused_too(project: Path) -> None:
    with PFSaver(project / "store", world_root=project) as saver:
        graph = _graph(saver, project)
        with pytest.raises(InvalidInput, match='durability="sync"'):
            await graph.ainvoke({"log": []}, _cfg("t"))


def _names(saver: PFSaver, config: dict[str, Any]) -> list[str]:
    snap = saver.repo.get(saver.snapshot_id(config))
    return sorted(e[0] for e in saver.repo.world_entries(snap) if not e[0].startswith("store"))


def test_with_durability_sync_the_checkpoint_before_a_node_holds_the_files_before_it(project: Path,
                                                                                     tmp_path: Path) -> None:
    with PFSaver(project / "store", world_root=project) as saver:
        graph = _graph(saver, project)
        graph.invoke({"log": []}, _cfg("t"), durability="sync")
        history = list(graph.get_state_history(_cfg("t")))
        before_act = next(h for h in history if h.next == ("act",))
        assert _names(saver, before_act.config) == ["notes.txt"]
        assert _names(saver, history[0].config) == ["notes.txt", "out.txt"]
        fork, = saver.fork_thread(before_act.config, 1, worktrees=tmp_path / "forks")
        assert not (tmp_path / "forks" / fork["configurable"]["thread_id"] / "out.txt").exists()
        saver.restore_world(before_act.config)  # the undo of what act did
        assert not (project / "out.txt").exists() and (project / "notes.txt").read_text() == "mine\n"


async def test_an_async_run_with_durability_sync_captures_the_files_before_each_node(project: Path) -> None:
    with PFSaver(project / "store", world_root=project) as saver:
        graph = _graph(saver, project)
        await graph.ainvoke({"log": []}, _cfg("a"), durability="sync")
        history = [h async for h in graph.aget_state_history(_cfg("a"))]
        before_act = next(h for h in history if h.next == ("act",))
        assert _names(saver, before_act.config) == ["notes.txt"]


def test_durability_exit_stores_the_files_of_the_finished_run(project: Path) -> None:
    with PFSaver(project / "store", world_root=project) as saver:
        graph = _graph(saver, project)
        graph.invoke({"log": []}, _cfg("x"), durability="exit")
        assert _names(saver, _cfg("x")) == ["notes.txt", "out.txt"]


def test_update_state_needs_no_durability(project: Path) -> None:
    with PFSaver(project / "store", world_root=project) as saver:
        graph = _graph(saver, project)
        graph.invoke({"log": []}, _cfg("u"), durability="sync")
        (project / "later.txt").write_text("edited by hand\n")
        graph.update_state(_cfg("u"), {"log": ["by hand"]})
        assert "later.txt" in _names(saver, _cfg("u"))
