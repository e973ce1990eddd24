"""``agentsnap expire --reflog`` and LangGraph's time travel: the tip a thread left behind when it was forked in place
(``update_state`` on an older checkpoint) is kept only by the reflog; once its entries expire, gc may reclaim it, and
LangGraph must then see the thread without those checkpoints - never a history that raises on them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from agentsnap_langgraph import PFSaver
from langchain_core.messages import HumanMessage
from lg_kit import cfg
from test_trust_edges import chat_graph, say


def cli(where: Path, *args: str) -> str:
    proc = subprocess.run([sys.executable, "-m", "agentsnap_core", *args], cwd=where, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, (args, proc.stdout, proc.stderr)
    return proc.stdout


def test_history_after_the_reflog_expired_and_gc_ran_lists_only_what_is_kept(store: Path) -> None:
    """Before: after ``agentsnap expire --reflog --older-than now`` and ``agentsnap gc --prune now``,
    ``get_state_history`` of a thread that had been time-travelled raised ``ObjectMissing`` on the abandoned
    branch's checkpoints (their snapshots were reclaimed, their index rows stayed). Now expiring the reflog marks
    the snapshots only those entries kept as expired, and the saver drops their rows, as after ``agentsnap
    prune``: the history is the thread's live line, and the thread goes on."""
    with PFSaver(store) as saver:
        graph = chat_graph(saver)
        say(graph, "t", "one", "h1")
        say(graph, "t", "two", "h2")
        say(graph, "t", "three", "h3")
        states = list(graph.get_state_history(cfg("t")))
        older = next(s for s in states if [m.content for m in s.values.get("messages", [])] == ["one", "re: one"])
        graph.update_state(older.config, {"messages": [HumanMessage("edited", id="e1")]})
        say(graph, "t", "after the edit", "h4")
        before = len(list(graph.get_state_history(cfg("t"))))
    cli(store, "expire", "--reflog", "--older-than", "now")
    cli(store, "gc", "--prune", "now")
    with PFSaver(store) as saver:
        graph = chat_graph(saver)
        history = list(graph.get_state_history(cfg("t")))
        assert 0 < len(history) < before
        for state in history:
            assert isinstance(state.values, dict)
        texts = [m.content for m in graph.get_state(cfg("t")).values["messages"]]
        assert texts == ["one", "re: one", "edited", "after the edit", "re: after the edit"]
        say(graph, "t", "and on", "h5")
        assert graph.get_state(cfg("t")).values["messages"][-1].content == "re: and on"
