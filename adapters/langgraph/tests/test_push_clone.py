"""A LangGraph thread pushed to a teammate: ``agentsnap push`` / ``clone`` / ``branch -f`` carry a thread's checkpoints,
and PFSaver on the other store must see them (the checkpoint index, ``langgraph.sqlite``, is never pushed)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from agentsnap_langgraph import PFSaver
from lg_kit import cfg
from test_trust_edges import chat_graph, say


def cli(where: Path, *args: str) -> str:
    proc = subprocess.run([sys.executable, "-m", "agentsnap_core", *args], cwd=where, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, (args, proc.stdout, proc.stderr)
    return proc.stdout


def texts(graph: object, thread: str) -> list[str]:
    return [m.content for m in graph.get_state(cfg(thread)).values["messages"]]  # type: ignore[attr-defined]


def test_a_cloned_thread_is_the_same_thread_to_langgraph_and_goes_on_there(tmp_path: Path) -> None:
    """Before: after ``agentsnap push URL langgraph/trip`` and ``agentsnap clone URL`` the teammate's ``agentsnap log``
    listed the thread's checkpoints, but ``PFSaver`` on the clone gave ``get_state(...).values == {}`` and an empty
    history: the next turn started the conversation from nothing. Now the saver indexes the checkpoints the
    thread's branch names when it opens: same state and history, and the teammate's turns continue it; pushed
    back and taken with ``agentsnap branch -f``, they reach the first store too."""
    mine, bare, theirs = tmp_path / "mine", tmp_path / "shared.store", tmp_path / "theirs"
    with PFSaver(mine) as saver:
        graph = chat_graph(saver)
        say(graph, "trip", "Capital of France?", "q1")
        say(graph, "trip", "And Italy?", "q2")
        history = [s.config["configurable"]["checkpoint_id"] for s in graph.get_state_history(cfg("trip"))]
    cli(mine, "push", str(bare), "langgraph/trip")
    cli(tmp_path, "clone", str(bare), str(theirs))

    with PFSaver(theirs) as saver:
        graph = chat_graph(saver)
        assert texts(graph, "trip") == ["Capital of France?", "re: Capital of France?", "And Italy?", "re: And Italy?"]
        assert [s.config["configurable"]["checkpoint_id"] for s in graph.get_state_history(cfg("trip"))] == history
        assert graph.get_state(cfg("trip")).values["turns"] == 2
        say(graph, "trip", "And Spain?", "q3")
        assert graph.get_state(cfg("trip")).values["turns"] == 3
    with PFSaver(theirs) as saver:  # adopted once: opening again indexes nothing twice
        assert len(list(chat_graph(saver).get_state_history(cfg("trip")))) == len(history) + 3

    cli(theirs, "push", "origin", "langgraph/trip")
    cli(mine, "remote", "add", "origin", str(bare))
    cli(mine, "fetch")
    cli(mine, "branch", "-f", "langgraph/trip", "origin/langgraph/trip")
    with PFSaver(mine) as saver:
        graph = chat_graph(saver)
        assert texts(graph, "trip")[-2:] == ["And Spain?", "re: And Spain?"]
        assert len(list(graph.get_state_history(cfg("trip")))) == len(history) + 3


def test_a_copied_thread_is_adopted_under_its_own_name_and_a_deleted_one_stays_deleted(tmp_path: Path) -> None:
    """``copy_thread`` shares the source's snapshots: the copy's branch must be indexed as the copy (not as the thread
    its checkpoints were first written for); and a thread deleted with ``delete_thread`` has no branch left, so
    opening the store again never brings it back."""
    mine, bare, theirs = tmp_path / "mine", tmp_path / "shared.store", tmp_path / "theirs"
    with PFSaver(mine) as saver:
        graph = chat_graph(saver)
        say(graph, "a", "hello", "h1")
        saver.copy_thread("a", "b")
        say(graph, "gone", "bye", "g1")
        saver.delete_thread("gone")
    cli(mine, "push", str(bare), "langgraph/b")
    cli(tmp_path, "clone", str(bare), str(theirs))
    with PFSaver(theirs) as saver:
        graph = chat_graph(saver)
        assert texts(graph, "b") == ["hello", "re: hello"]
        assert graph.get_state(cfg("a")).values == {}
        assert saver.index.thread_ids() == ["b"]
    with PFSaver(mine) as saver:
        assert sorted(saver.index.thread_ids()) == ["a", "b"]
