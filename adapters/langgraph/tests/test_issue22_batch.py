"""A flush is one batch of core's packed commit (issue 22: files O(1) per flush, durable mode's cost).

Default mode: everything the puts wrote since the last flush (channel values, state documents, manifests) goes
into ONE pack file at the flush. Durable mode (``flush_interval=0``): each put costs one durability barrier and
one core SQLite transaction (index rows and ref moves together), where it cost a barrier plus two transactions.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

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


def test_durable_mode_costs_one_barrier_and_one_core_transaction_per_put(store: Path) -> None:
    with PFSaver(store, flush_interval=0) as saver:
        graph = chat(saver)
        turns(graph, "w", 1)
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
        before = _files(store)
        turns(graph, "w", 4)
        assert counts["put"] >= 8
        assert counts["barrier"] == counts["put"]
        assert counts["tx"] == counts["put"]  # index rows + ref moves in one transaction
        assert _files(store) - before <= counts["put"]  # one pack per put, however many objects it wrote
    with Repo.open(store) as repo:
        assert repo.verify()["ok"]
