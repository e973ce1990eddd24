"""agentsnap's own retention keeps LangGraph history consistent (issue 22, item 4).

`agentsnap prune --keep-last 3 && agentsnap gc --prune now` (the real CLI, in a fresh process) on a store
PFSaver wrote: afterwards every checkpoint ``list()`` / ``get_state_history`` returns loads, and replaying
any of them works; the pruned ones are gone from the index too.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from agentsnap_langgraph import PFSaver
from langchain_core.messages import HumanMessage
from test_issue22_api import cfg, chat


def agentsnap(project: Path, *args: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "agentsnap_core", *args], cwd=project, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr


def test_prune_and_gc_keep_history_and_replay_working(store: Path) -> None:
    with PFSaver(store) as saver:
        graph = chat(saver)
        for t in ("a", "b"):
            for i in range(4):
                graph.invoke({"messages": [HumanMessage(content=f"{t}{i}", id=f"h{t}{i}")]}, cfg(t))
        before = {t: len(list(graph.get_state_history(cfg(t)))) for t in ("a", "b")}
    assert before == {"a": 12, "b": 12}

    agentsnap(store, "prune", "--keep-last", "3")
    agentsnap(store, "gc", "--prune", "now")
    agentsnap(store, "verify")

    with PFSaver(store) as saver:
        graph = chat(saver)
        for t in ("a", "b"):
            history = list(graph.get_state_history(cfg(t)))  # raised ObjectMissing
            assert history, "the thread's newest checkpoint is kept (its ref protects it)"
            assert len(history) < before[t]
            assert len(graph.get_state(cfg(t)).values["messages"]) == 8
            assert [s.config for s in history] == [s.config for s in graph.get_state_history(cfg(t))]
            for state in history:  # every listed checkpoint loads
                assert graph.get_state(state.config).values is not None
            oldest = history[-1]
            graph.invoke(None, oldest.config)  # replaying the oldest one left
            graph.invoke({"messages": [HumanMessage(content="again", id=f"again-{t}")]}, cfg(t))
            assert graph.get_state(cfg(t)).values["messages"][-1].content == "echo: again"
        rows = list(saver.list(None))
        assert all(graph.get_state(r.config).values is not None for r in rows)
