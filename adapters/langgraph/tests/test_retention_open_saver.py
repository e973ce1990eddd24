"""``agentsnap prune`` + ``gc`` beside a saver that stays open (a server's): a pruned checkpoint is gone for it too.

README ("agentsnap prune / expire and LangGraph"): the checkpoints prune marks dead "leave the index when a saver opens
or lists, so get_state_history and replays see only checkpoints whose values agentsnap gc kept". Before, only ``list``
looked: ``get_state`` of a config taken before the prune (a UI's history) still gave the pruned checkpoint's state from
the saver's cache, a run from it stored checkpoints naming the values gc had reclaimed (``agentsnap verify``: "object
... is missing"), and ``fork_thread`` copied it. Now it is gone as from LangGraph's own savers after a delete:
``get_tuple`` gives None, a run from its config starts from an empty state, and it cannot be forked.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from agentsnap_core.errors import UnknownSnapshot
from agentsnap_langgraph import PFSaver
from langchain_core.messages import HumanMessage
from test_issue22_api import cfg, chat
from test_push_clone import cli


def test_a_checkpoint_pruned_while_the_saver_is_open_is_not_loaded_replayed_or_forked(store: Path) -> None:
    with PFSaver(store) as saver:
        graph = chat(saver)
        for i in range(4):
            graph.invoke({"messages": [HumanMessage(content=f"m{i}", id=f"h{i}")]}, cfg("a"))
        history = list(graph.get_state_history(cfg("a")))
        old = history[3]  # three turns back
        assert [m.content for m in graph.get_state(old.config).values["messages"]][-1] == "echo: m2"
        saver.flush()
        assert saver.release_idle_writer(0.0)  # (what an idle saver does after 2 s: gc may reclaim again)

        cli(store, "prune", "--keep-last", "1")
        cli(store, "gc", "--prune", "now")

        assert saver.get_tuple(old.config) is None  # was: the pruned checkpoint, from the saver's cache
        assert graph.get_state(old.config).values == {}
        with pytest.raises(UnknownSnapshot):
            saver.fork_thread(old.config, 1)
        assert saver.index.thread_ids() == ["a"]
        branched = graph.invoke({"messages": [HumanMessage(content="b", id="hb")]}, old.config)
        assert [m.content for m in branched["messages"]] == ["b", "echo: b"]  # as after LangGraph's own delete
        newest = graph.get_state(cfg("a"))
        assert [m.content for m in newest.values["messages"]] == ["b", "echo: b"]
        kept = [s.config for s in graph.get_state_history(cfg("a"))]
        assert old.config not in kept and history[0].config in kept
    cli(store, "verify")  # was: "object ... is missing from the store" (the run from the pruned checkpoint)
    with PFSaver(store) as saver:
        graph = chat(saver)
        assert [m.content for m in graph.get_state(history[0].config).values["messages"]][-1] == "echo: m3"
        for state in graph.get_state_history(cfg("a")):
            assert graph.get_state(state.config).values is not None
