"""A checkpoint that came from elsewhere (clone, pull) is read as data: its bytes cannot have code run.

Reported (read in langgraph-checkpoint 4.3.2 ``serde/jsonplus.py`` and tried): LangGraph's default serializer, which
PFSaver used, rebuilds any class - or calls any function - that a checkpoint's msgpack names
(``EXT_CONSTRUCTOR_SINGLE_ARG``: ``('os', 'system', 'touch ...')`` calls ``os.system``), with only a warning unless
``LANGGRAPH_STRICT_MSGPACK`` is set. LangGraph warns that whoever can write the checkpoint database can run code; with
PFSaver the database travels: a teammate's (or a crafted) store pushed and cloned, then ``PFSaver(".")`` and
``graph.get_state(config)``, ran the command. Checkpoints this index adopted from elsewhere are now read with
LangGraph's strict allowlist (its safe types; a class outside it comes back as its raw value, with LangGraph's
warning naming the ``allowed_msgpack_modules`` entry); this store's own checkpoints read as before, and a ``serde``
the user passes reads everything (its allowlist is the user's).
"""

from __future__ import annotations

import enum
import subprocess
import sys
from pathlib import Path
from typing import Any

from agentsnap_langgraph import PFSaver
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.graph import END, START, StateGraph
from typing_extensions import TypedDict


class Mode(enum.Enum):
    FAST = "fast"


class Work(TypedDict):
    mode: Any


def _graph(saver: PFSaver, value: Any) -> Any:
    builder = StateGraph(Work)
    builder.add_node("set", lambda state: {"mode": value})
    builder.add_edge(START, "set")
    builder.add_edge("set", END)
    return builder.compile(checkpointer=saver)


CFG = {"configurable": {"thread_id": "t"}}


def _cli(root: Path, *args: str) -> None:
    out = subprocess.run([sys.executable, "-m", "agentsnap_core", *args], cwd=root, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr


def _teammates_store(tmp_path: Path, value: Any) -> Path:
    """A project whose thread ``t`` holds ``value``, pushed and cloned: the clone."""
    mate = tmp_path / "mate"
    mate.mkdir()
    with PFSaver(mate) as saver:
        _graph(saver, value).invoke({"mode": None}, CFG)  # (written only: never read back here)
    _cli(mate, "push", f"file://{tmp_path / 'team'}", "langgraph/t")
    _cli(tmp_path, "clone", f"file://{tmp_path / 'team'}", "mine")
    return tmp_path / "mine"


def crafted_clone(tmp_path: Path) -> tuple[Path, Path]:
    """(a clone of a teammate's thread whose checkpoint names ``os.system("touch MARKER")``, MARKER)."""
    marker = tmp_path / "ran"

    class Crafted(enum.Enum):  # encoded as ('os', 'system', its value): what a crafted checkpoint holds
        CMD = f"touch {marker}"

    Crafted.__module__, Crafted.__name__ = "os", "system"
    return _teammates_store(tmp_path, Crafted.CMD), marker


def test_a_cloned_checkpoint_that_names_a_function_does_not_run_it(tmp_path: Path) -> None:
    mine, marker = crafted_clone(tmp_path)
    with PFSaver(mine) as saver:
        state = _graph(saver, None).get_state(CFG)
        list(saver.list(CFG))
    assert not marker.exists(), "the checkpoint's bytes ran os.system"
    assert state.values["mode"] == f"touch {marker}"  # (the raw value: os.system was not called)


def test_your_own_checkpoints_and_a_serde_you_pass_read_your_types(tmp_path: Path) -> None:
    own = tmp_path / "own"
    own.mkdir()
    with PFSaver(own) as saver:
        graph = _graph(saver, Mode.FAST)
        graph.invoke({"mode": None}, CFG)
        assert graph.get_state(CFG).values["mode"] is Mode.FAST  # written here: read as before
    mine = _teammates_store(tmp_path, Mode.FAST)
    with PFSaver(mine) as saver:
        assert _graph(saver, None).get_state(CFG).values["mode"] == "fast"  # from elsewhere: LangGraph's safe types
    allow = JsonPlusSerializer(allowed_msgpack_modules=[(Mode.__module__, "Mode")])
    with PFSaver(mine, serde=allow) as saver:
        assert _graph(saver, None).get_state(CFG).values["mode"] is Mode.FAST  # the user's allowlist


def test_a_fork_or_copy_of_a_cloned_thread_is_still_read_as_from_elsewhere(tmp_path: Path) -> None:
    marker = tmp_path / "ran"

    class Crafted(enum.Enum):
        CMD = f"touch {marker}"

    Crafted.__module__, Crafted.__name__ = "os", "system"
    mine = _teammates_store(tmp_path, Crafted.CMD)
    with PFSaver(mine) as saver:
        graph = _graph(saver, None)
        fork, = saver.fork_thread(CFG, 1)
        saver.copy_thread("t", "copied")
        for config in (fork, {"configurable": {"thread_id": "copied"}}):
            assert graph.get_state(config).values["mode"] == f"touch {marker}"
    with PFSaver(mine) as saver:  # (a fresh open: what the index keeps)
        assert _graph(saver, None).get_state(fork).values["mode"] == f"touch {marker}"
    assert not marker.exists()
