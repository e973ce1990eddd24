"""`agentsnap gc --prune now` beside a running saver never drops what the saver's next flush names.

A put re-uses a value the store already holds (content addressing: the same bytes, the same object) and names it
only at the next flush. If that object was unreachable (left by a deleted thread, an expired snapshot or another
process's abandoned write), a gc between the put and the flush saw garbage and deleted it: the flush then committed
a checkpoint whose value is gone, silently. The saver now holds a core writer session (the marker gc honours) from
its first put until a flush has named everything it wrote or re-used.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypedDict

from agentsnap_core.format import content
from agentsnap_core.repo import Repo
from agentsnap_langgraph import PFSaver
from langgraph.graph import START, StateGraph
from lg_kit import agentsnap_cli

BIG = "a value an agent computed once and again: " + "x" * 50_000


class Doc(TypedDict):
    doc: str


def _graph(saver: PFSaver) -> Any:
    builder = StateGraph(Doc)
    builder.add_node("write", lambda s: {"doc": BIG})
    builder.add_edge(START, "write")
    return builder.compile(checkpointer=saver)


def test_gc_prune_now_between_a_put_and_its_flush_keeps_the_reused_value(store: Path) -> None:
    with PFSaver(store, flush_interval=3600) as saver:  # the store exists; what is in it is named by nothing yet
        _, data = saver.serde.dumps_typed(BIG)
    with Repo.open(store) as repo:  # the value is in the store already, unreachable (garbage to gc)
        oid = content.put_bytes(repo.objects, data)
        repo.objects.barrier()
    with PFSaver(store, flush_interval=3600) as saver:  # no background flush: the put waits for flush()
        graph = _graph(saver)
        graph.invoke({"doc": "start"}, {"configurable": {"thread_id": "t"}})  # re-uses the stored value
        gc = agentsnap_cli(store, "gc", "--prune", "now")
        assert gc.returncode == 0, gc.stderr
        saver.flush()
    with Repo.open(store) as repo:
        assert repo.objects.has(oid), "gc deleted a value the saver's flush then named"
        report = repo.verify()
        assert report["ok"], report
    with PFSaver(store) as saver:
        assert _graph(saver).get_state({"configurable": {"thread_id": "t"}}).values["doc"] == BIG


def test_the_saver_lets_gc_collect_again_once_it_has_flushed_and_is_idle(store: Path) -> None:
    """The session is not held for the saver's whole life: after a flush and a quiet moment, gc collects garbage."""
    with PFSaver(store, flush_interval=3600) as saver:
        graph = _graph(saver)
        graph.invoke({"doc": "start"}, {"configurable": {"thread_id": "t"}})
        saver.flush()
        saver.release_idle_writer(0.0)  # what the background flush does once no put came for a while
        with Repo.open(store) as repo:
            junk = content.put_bytes(repo.objects, b"garbage nobody names" * 1000)
            repo.objects.barrier()
        gc = agentsnap_cli(store, "gc", "--prune", "now")
        assert gc.returncode == 0, gc.stderr
        with Repo.open(store) as repo:
            assert not repo.objects.has(junk)
        graph.invoke({"doc": "again"}, {"configurable": {"thread_id": "t"}})  # a new put holds a new session
    with PFSaver(store) as saver:
        assert _graph(saver).get_state({"configurable": {"thread_id": "t"}}).values["doc"] == BIG
