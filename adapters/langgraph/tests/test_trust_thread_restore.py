"""``repo.restore_into(LangGraphThread(...), spec)`` reads a snapshot from elsewhere as data: its bytes run nothing.

Reported (read in langgraph-checkpoint 4.3.2 ``serde/jsonplus.py`` and tried): the ``state`` layer of a
``LangGraphThread`` holds the checkpointer's serialized bytes, and its restore read them with the graph
checkpointer's ``serde``: LangGraph's default ``JsonPlusSerializer`` rebuilds any class - or calls any function - the
msgpack names (``('os', 'system', 'touch ...')`` calls ``os.system``) with only a warning. A snapshot travels (push,
clone): a teammate's or crafted one restored into a thread of an ``InMemorySaver`` graph ran the command (the first
test fails before the fix: the marker file is there). ``PFSaver`` already read adopted checkpoints strictly (session
25); this was the same hole on the plugin's path. Now a state this store did not capture (its digest is in the
store's local own list) is read with LangGraph's strict allowlist where the saver's serializer is the permissive
default; states captured here, and a serializer of the user's own, read as before.
"""

from __future__ import annotations

import enum
import subprocess
import sys
from pathlib import Path
from typing import Any

from agentsnap_core import Repo
from agentsnap_langgraph.plugin import LangGraphThread
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.graph import END, START, StateGraph
from typing_extensions import TypedDict


class Mode(enum.Enum):
    FAST = "fast"


class Work(TypedDict):
    mode: Any


def _thread(value: Any) -> LangGraphThread:
    builder = StateGraph(Work)
    builder.add_node("set", lambda state: {"mode": value})
    builder.add_edge(START, "set")
    builder.add_edge("set", END)
    return LangGraphThread(builder.compile(checkpointer=InMemorySaver()), {"configurable": {"thread_id": "t"}})


def _cli(root: Path, *args: str) -> None:
    out = subprocess.run([sys.executable, "-m", "agentsnap_core", *args], cwd=root, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr


def _captured(tmp_path: Path, value: Any, crafted: Any = None) -> Path:
    """A project (``mate``) whose HEAD snapshot holds a thread whose state is ``value`` (or, written by hand, the bytes
    LangGraph's serializer makes of ``crafted``: a real thread holding it would have run it in its author's process)."""
    mate = tmp_path / "mate"
    mate.mkdir()
    thread = _thread(value)
    thread.invoke({"mode": None})
    with Repo.init(mate) as repo:
        snap = repo.capture(thread, "a thread")
        if crafted is not None:
            state = repo.read_layer(snap, "state")
            state["channels"]["mode"] = list(JsonPlusSerializer().dumps_typed(crafted))
            repo.snapshot("crafted", layers={"state": state}, trace=[])
    return mate


def test_a_cloned_thread_state_that_names_a_function_does_not_run_it(tmp_path: Path) -> None:
    marker = tmp_path / "ran"

    class Crafted(enum.Enum):  # encoded as ('os', 'system', its value): what a crafted state holds
        CMD = f"touch {marker}"

    Crafted.__module__, Crafted.__name__ = "os", "system"
    mate = _captured(tmp_path, Mode.FAST, crafted=Crafted.CMD)
    _cli(mate, "push", f"file://{tmp_path / 'team'}", "main")
    _cli(tmp_path, "clone", f"file://{tmp_path / 'team'}", "mine")
    thread = _thread(None)
    with Repo.open(tmp_path / "mine") as repo:
        repo.restore_into(thread, "main")
    assert not marker.exists(), "the snapshot's bytes ran os.system"
    assert thread.state().values["mode"] == f"touch {marker}"  # (the raw value: os.system was not called)


def test_a_state_captured_here_reads_its_own_types(tmp_path: Path) -> None:
    mate = _captured(tmp_path, Mode.FAST)
    thread = _thread(None)
    with Repo.open(mate) as repo:
        repo.restore_into(thread, "HEAD")
    assert thread.state().values["mode"] is Mode.FAST
