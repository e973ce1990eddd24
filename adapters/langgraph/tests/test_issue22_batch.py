"""A flush is one batch of core's packed commit (issue 22: files O(1) per flush, durable mode's cost).

Everything the puts wrote since the last flush (channel values, state documents, manifests) goes into ONE pack
file at the flush, made durable by one barrier, then one core SQLite transaction (index rows and ref moves
together). Durable mode (``flush_interval=0``) on the embedded store: each put commits its index row with the bytes
its snapshot needs durably (one fsync, as SqliteSaver's commit) and leaves the pack and the refs to the group
commit; a killed process's next open finishes them.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from agentsnap_core.repo import Repo
from agentsnap_langgraph import PFSaver
from test_issue22_api import chat, turns


def _files(store: Path) -> int:
    return sum(len(n) for _d, _s, n in os.walk(store / ".agentsnap" / "objects"))


def test_a_flush_adds_o1_files_not_one_per_object(store: Path) -> None:
    with PFSaver(store, flush_interval=3600) as saver:  # one flush for all of it, as between group commits
        graph = chat(saver)
        turns(graph, "t", 2)
        saver.flush()
        before = _files(store)
        turns(graph, "t", 15)  # ~45 checkpoints: new messages, state documents, manifests
        saver.flush()
        assert _files(store) - before <= 1
        assert graph.get_state({"configurable": {"thread_id": "t"}}).values["messages"][-1].content == "echo: m14"
    with Repo.open(store) as repo:
        assert repo.verify()["ok"]


def _counting(saver: PFSaver) -> dict[str, int]:
    counts = {"put": 0, "barrier": 0, "tx": 0}

    def counted(name: str, fn: Any) -> Any:
        def run(*a: Any, **kw: Any) -> Any:
            counts[name] += 1
            return fn(*a, **kw)

        return run

    saver.put = counted("put", saver.put)  # type: ignore[method-assign]
    objects, refs = saver.repo.objects, saver.repo.refs
    objects.barrier = counted("barrier", objects.barrier)
    for name in ("commit_snapshots", "update_refs", "index_snapshots", "index_snapshot"):
        if hasattr(refs, name):
            setattr(refs, name, counted("tx", getattr(refs, name)))
    return counts


def test_a_flush_is_one_barrier_and_one_core_transaction(store: Path) -> None:
    with PFSaver(store, flush_interval=3600) as saver:
        graph = chat(saver)
        turns(graph, "w", 1)
        saver.flush()
        counts = _counting(saver)
        turns(graph, "w", 4)
        saver.flush()
        assert counts["put"] >= 8
        assert counts["barrier"] == 1
        assert counts["tx"] == 1  # index rows + ref moves in one transaction


def test_durable_mode_commits_each_put_through_its_index_row_and_groups_the_rest(
    store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import agentsnap_langgraph.saver as savermod

    monkeypatch.setattr(savermod, "DURABLE_GROUP_INTERVAL", 3600.0)  # no group commit during the test
    with PFSaver(store, flush_interval=0) as saver:
        assert saver.index.db.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL: each commit fsyncs
        graph = chat(saver)
        counts = _counting(saver)
        turns(graph, "d", 3)
        assert counts["put"] >= 6 and counts["barrier"] == 0 and counts["tx"] == 0  # no per-put store fsyncs
        waiting = saver.index.unflushed()
        assert len(waiting) == counts["put"] and all(r[5] is not None and r[6] is not None for r in waiting)
        with saver.index.read() as db:  # the channel values they wrote wait beside them
            assert db.execute("SELECT count(*) FROM lg_pending_blobs").fetchone()[0] >= 3
    # close() ran the group commit: everything is in the store, one pack
    with Repo.open(store) as repo:
        assert repo.verify()["ok"]


CRASH = """
import os, sys
sys.path.insert(0, {here!r})
import agentsnap_langgraph.saver as savermod
savermod.DURABLE_GROUP_INTERVAL = 3600.0
from agentsnap_langgraph import PFSaver
from test_issue22_api import chat, turns
saver = PFSaver({store!r}, flush_interval=0)
turns(chat(saver), "k", 3)
os._exit(0)  # killed: no group commit, no close
"""


def test_durable_puts_survive_a_kill_before_any_group_commit(store: Path) -> None:
    here = str(Path(__file__).parent)
    proc = subprocess.run([sys.executable, "-c", CRASH.format(here=here, store=str(store))], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert not list((store / ".agentsnap" / "objects").glob("pack/pack-*.pack"))  # nothing reached the store
    with PFSaver(store) as saver:  # recovery writes the snapshots from the rows
        messages = chat(saver).get_state({"configurable": {"thread_id": "k"}}).values["messages"]
        assert [m.content for m in messages][-1] == "echo: m2"
    with Repo.open(store) as repo:
        assert repo.verify()["ok"]
