"""A background flush that keeps failing is said at the next put, never swallowed.

The default mode commits each put's index row at once and leaves the pack, the snapshots and the thread refs to a
group commit every ``flush_interval`` seconds. That flush ran in a background thread whose errors were dropped until
``close()``: with the store's disk full (or its directory read-only) a long run went on for hours with no power-loss
durability, no thread refs moving and memory growing, and nothing said so. Now a put that follows a failed flush
first retries it; if it fails again, the put raises ``FlushFailed`` naming the cause and stores nothing new. Once the
store can be written again, the checkpoints kept meanwhile are flushed and nothing is lost. The flush of a saver left
open, run at interpreter exit, said nothing when it failed either; it now says so on stderr.
"""

from __future__ import annotations

import errno
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, TypedDict

import pytest
from agentsnap_langgraph import FlushFailed, PFSaver
from langgraph.graph import START, StateGraph


class Count(TypedDict):
    n: int


def _graph(saver: PFSaver) -> Any:
    builder = StateGraph(Count)
    builder.add_node("step", lambda s: {"n": s["n"] + 1})
    builder.add_edge(START, "step")
    return builder.compile(checkpointer=saver)


class DiskFull:
    """The store's object barrier (the pack's fsync) failing as on a full disk, until ``heal()``."""

    def __init__(self, objects: Any) -> None:
        self.objects, self.real = objects, objects.barrier
        self.failed = threading.Event()

    def __call__(self) -> None:
        self.failed.set()
        raise OSError(errno.ENOSPC, "No space left on device")

    def heal(self) -> None:
        self.objects.barrier = self.real


def _failed(saver: PFSaver) -> None:
    """Wait until the background flush has failed and recorded it (the loop retries every 0.05 s)."""
    deadline = time.monotonic() + 60
    while saver._s.flush_error is None:
        assert time.monotonic() < deadline, "the background flush never failed"
        time.sleep(0.01)


def test_a_flush_that_keeps_failing_is_raised_by_the_next_put_and_nothing_is_lost(store: Path) -> None:
    cfg = {"configurable": {"thread_id": "t"}}
    with PFSaver(store, flush_interval=0.05) as saver:
        graph = _graph(saver)
        graph.invoke({"n": 0}, cfg)  # flushed normally
        saver.flush()
        disk = DiskFull(saver.repo.objects)
        saver.repo.objects.barrier = disk
        graph.invoke({"n": 10}, cfg)  # its row is in the index; its background flush fails
        _failed(saver)
        with pytest.raises(FlushFailed, match="No space left on device") as raised:
            graph.invoke({"n": 20}, cfg)
        assert isinstance(raised.value.__cause__, OSError)
        disk.heal()
        assert graph.invoke({"n": 30}, cfg)["n"] == 31  # the retry at this put succeeds: the put goes on
    with PFSaver(store) as saver:
        counts = [t.checkpoint["channel_values"].get("n") for t in saver.list(cfg)]
    assert 11 in counts and 31 in counts and 1 in counts  # kept while the disk was full, then flushed
    assert 21 not in counts  # the put that raised stored nothing of its run's result
    cli = Path(sys.executable).with_name("agentsnap")
    verify = subprocess.run([str(cli), "-C", str(store), "verify"], capture_output=True, text=True, timeout=300)
    assert verify.returncode == 0, verify.stdout + verify.stderr


def test_a_transient_flush_failure_heals_without_an_error(store: Path) -> None:
    cfg = {"configurable": {"thread_id": "t"}}
    with PFSaver(store, flush_interval=0.05) as saver:
        graph = _graph(saver)
        disk = DiskFull(saver.repo.objects)
        saver.repo.objects.barrier = disk
        graph.invoke({"n": 0}, cfg)
        assert disk.failed.wait(60), "the background flush never ran"
        disk.heal()
        assert graph.invoke({"n": 5}, cfg)["n"] == 6  # the failed flush is retried first, and succeeds
    with PFSaver(store) as saver:
        counts = [t.checkpoint["channel_values"].get("n") for t in saver.list(cfg)]
    assert 1 in counts and 6 in counts


EXIT_CHILD = """
import errno, sys
from typing import TypedDict
from agentsnap_langgraph import PFSaver
from langgraph.graph import START, StateGraph

class Count(TypedDict):
    n: int

saver = PFSaver(sys.argv[1], flush_interval=3600)  # left open: its last flush runs at interpreter exit
builder = StateGraph(Count)
builder.add_node("step", lambda s: {"n": s["n"] + 1})
builder.add_edge(START, "step")
builder.compile(checkpointer=saver).invoke({"n": 40}, {"configurable": {"thread_id": "t"}})

def full(*a):
    raise OSError(errno.ENOSPC, "No space left on device")

saver.repo.objects.barrier = full
"""


def test_a_flush_that_fails_at_exit_is_said_and_the_next_open_writes_it(store: Path, tmp_path: Path) -> None:
    """The flush of a saver left open ran at interpreter exit and dropped any error: the user saw nothing."""
    script = tmp_path / "child.py"
    script.write_text(EXIT_CHILD)
    child = subprocess.run([sys.executable, str(script), str(store)], capture_output=True, text=True, timeout=300)
    assert child.returncode == 0, child.stderr
    assert "PFSaver could not flush" in child.stderr and "No space left on device" in child.stderr
    assert "written when the store is next opened" in child.stderr
    with PFSaver(store) as saver:
        counts = [t.checkpoint["channel_values"].get("n") for t in saver.list({"configurable": {"thread_id": "t"}})]
    assert 41 in counts
    cli = Path(sys.executable).with_name("agentsnap")
    log = subprocess.run([str(cli), "-C", str(store), "log", "--all"], capture_output=True, text=True, timeout=300)
    assert log.returncode == 0 and log.stdout.strip(), log.stdout + log.stderr  # written by that open: snapshots
