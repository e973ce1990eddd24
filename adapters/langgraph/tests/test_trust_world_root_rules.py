"""``world_root``'s own ``.agentsnapignore`` decides what its checkpoints capture and what ``restore_world`` leaves.

Reported (tried as a user, langgraph 1.2.22): ``PFSaver("state", world_root="workspace")`` - the store beside the
files the agent works on, as the README's ``files`` row allows - with ``workspace/.agentsnapignore`` saying
``data/`` (a 2 GB dataset the agent reads and a cache it rebuilds). Every checkpoint captured ``data/`` all the same,
and ``restore_world`` to an earlier checkpoint rewrote the data the user had said to leave alone; nothing said so.
The cause: core built the ignore rules of the *store's* directory for every capture and restore, whatever directory
it was asked to capture, so ``workspace/.agentsnapignore`` was never read (and a line in the store directory's one,
meant for other paths, applied to the workspace). Now the rules are the captured directory's own, as they are for
``agentsnap snapshot`` in a tree.

And ``fork_thread(config, n, worktrees=DIR)`` with DIR inside ``world_root`` wrote each fork's files into the files the
saver captures: the next checkpoint of the main thread captured every fork, and a ``restore_world`` of the main thread
deleted the forks' files while their runs worked in them (the hazard ``agentsnap fork --worktrees`` refuses). It is
refused the same way, before any thread is made, naming a directory outside and the ignore line that makes DIR safe.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from agentsnap_core.errors import InvalidInput
from agentsnap_langgraph import PFSaver


def _cfg(thread: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread}}


def _checkpoint(saver: PFSaver, thread: str) -> dict[str, Any]:
    """One checkpoint of ``thread`` through LangGraph's own API (``update_state`` on a one-node graph)."""
    from langgraph.graph import END, START, StateGraph
    from typing_extensions import TypedDict

    class S(TypedDict):
        n: int

    builder = StateGraph(S)
    builder.add_node("step", lambda s: {"n": s["n"] + 1})
    builder.add_edge(START, "step")
    builder.add_edge("step", END)
    graph = builder.compile(checkpointer=saver)
    graph.invoke({"n": 0}, _cfg(thread), durability="sync")
    return dict(graph.get_state(_cfg(thread)).config)


def _names(saver: PFSaver, config: dict[str, Any]) -> list[str]:
    snap = saver.repo.get(saver.snapshot_id(config))
    return sorted(e[0] for e in saver.repo.world_entries(snap))


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "workspace"
    (root / "data").mkdir(parents=True)
    (root / "data" / "big.csv").write_text("dataset v1\n")
    (root / "notes.txt").write_text("mine\n")
    (root / ".agentsnapignore").write_text("data/\n")
    return root


def test_the_world_roots_own_ignore_file_leaves_its_paths_out_of_each_checkpoint(tmp_path: Path,
                                                                                workspace: Path) -> None:
    with PFSaver(tmp_path / "state", world_root=workspace) as saver:
        cfg = _checkpoint(saver, "t")
        assert _names(saver, cfg) == [".agentsnapignore", "notes.txt"]


def test_restore_world_leaves_what_the_world_roots_ignore_file_names(tmp_path: Path, workspace: Path) -> None:
    with PFSaver(tmp_path / "state", world_root=workspace) as saver:
        cfg = _checkpoint(saver, "t")
        (workspace / "data" / "big.csv").write_text("dataset v2, rebuilt\n")
        (workspace / "data" / "cache.bin").write_text("rebuilt cache\n")
        (workspace / "notes.txt").write_text("edited\n")
        saver.restore_world(cfg)
        assert (workspace / "notes.txt").read_text() == "mine\n"  # captured: rewound
        assert (workspace / "data" / "big.csv").read_text() == "dataset v2, rebuilt\n"  # ignored: left as it is
        assert (workspace / "data" / "cache.bin").read_text() == "rebuilt cache\n"


def test_the_store_directorys_ignore_file_does_not_apply_to_the_world_root(tmp_path: Path, workspace: Path) -> None:
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / ".agentsnapignore").write_text("notes.txt\n")  # about the state directory's own files
    with PFSaver(tmp_path / "state", world_root=workspace) as saver:
        cfg = _checkpoint(saver, "t")
        assert "notes.txt" in _names(saver, cfg)


def test_fork_thread_worktrees_inside_the_world_root_is_refused_before_any_thread_is_made(tmp_path: Path,
                                                                                         workspace: Path) -> None:
    with PFSaver(tmp_path / "state", world_root=workspace) as saver:
        cfg = _checkpoint(saver, "t")
        threads = sorted(saver.index.thread_ids())
        with pytest.raises(InvalidInput, match=r"inside this working tree .*choose a directory outside it") as err:
            saver.fork_thread(cfg, 2, worktrees=workspace / "forks")
        assert "'forks/' in .agentsnapignore" in str(err.value)
        assert sorted(saver.index.thread_ids()) == threads and not (workspace / "forks").exists()
        with pytest.raises(InvalidInput, match="this working tree"):
            saver.fork_thread(cfg, 1, worktrees=workspace)


def test_fork_thread_worktrees_outside_or_ignored_are_made(tmp_path: Path, workspace: Path) -> None:
    with PFSaver(tmp_path / "state", world_root=workspace) as saver:
        cfg = _checkpoint(saver, "t")
        outside, = saver.fork_thread(cfg, 1, worktrees=tmp_path / "forks")
        assert (tmp_path / "forks" / outside["configurable"]["thread_id"] / "notes.txt").read_text() == "mine\n"
        ignored, = saver.fork_thread(cfg, 1, worktrees=workspace / "data" / "forks")  # data/ is ignored
        assert (workspace / "data" / "forks" / ignored["configurable"]["thread_id"] / "notes.txt").is_file()
