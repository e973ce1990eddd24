"""Silent or misleading failures a user of PFSaver met on edge inputs (one test per defect)."""

from __future__ import annotations

import math
import operator
import os
import shutil
import time
from pathlib import Path
from typing import Annotated, Any

import pytest
from agentsnap_core.errors import AgentSnapError, InvalidInput
from agentsnap_core.repo import Repo
from agentsnap_langgraph import PFSaver, SaverClosed, StoreGone
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.graph.message import add_messages
from langgraph.types import Command
from lg_kit import cfg, one_node_graph
from typing_extensions import TypedDict


class Chat(TypedDict, total=False):
    messages: Annotated[list[AnyMessage], add_messages]
    turns: Annotated[int, operator.add]
    tags: Annotated[list[str], operator.add]


def chat_graph(checkpointer: Any) -> Any:
    def chat(state: Chat) -> dict[str, Any]:
        last = state["messages"][-1]
        return {"messages": [AIMessage(f"re: {last.content}", id=f"a-{last.id}")], "turns": 1, "tags": ["turn"]}

    return one_node_graph(checkpointer, Chat, chat)


def say(graph: Any, thread: str, text: str, ident: str, **run: Any) -> None:
    graph.invoke({"messages": [HumanMessage(text, id=ident)]}, cfg(thread), **run)


def test_merge_keeps_both_threads_turns_when_their_counters_end_equal(store: Path) -> None:
    """Before: a thread and its fork each ran one turn (turns 1 -> 2 on both); merge_thread saw source == target and
    kept 2, and the fork's appended tag was dropped as a duplicate: the merged thread said 2 turns, 2 tags, with 3
    turns' messages in it. Merging again must add nothing (the base is then the merged checkpoint)."""
    with PFSaver(store) as saver:
        graph = chat_graph(saver)
        say(graph, "trip", "Capital of France?", "q1")
        fork, = saver.fork_thread(cfg("trip"), 1)
        say(graph, fork["configurable"]["thread_id"], "And Italy?", "q2")
        say(graph, "trip", "And Switzerland?", "q3")
        saver.merge_thread(graph, cfg("trip"), fork, as_node="chat")
        merged = graph.get_state(cfg("trip")).values
        assert len(merged["messages"]) == 6
        assert merged["turns"] == 3
        assert merged["tags"] == ["turn"] * 3
        saver.merge_thread(graph, cfg("trip"), fork, as_node="chat")
        assert graph.get_state(cfg("trip")).values["turns"] == 3
        # and back the other way: the fork gets the main thread's turn only (its own came back through the merge)
        saver.merge_thread(graph, fork, cfg("trip"), as_node="chat")
        back = graph.get_state(fork).values
        assert back["turns"] == 3 and back["tags"] == ["turn"] * 3 and len(back["messages"]) == 6


def test_failed_merge_leaves_no_merge_parent_on_the_next_checkpoint(store: Path) -> None:
    """Before: merge_thread(as_node="typo") raised LangGraph's InvalidUpdateError, but the source's snapshot stayed
    queued as an extra parent, so the thread's next ordinary turn was recorded in the store as a merge of the
    source (wrong history in ``agentsnap log --graph``) although nothing was merged."""
    with PFSaver(store) as saver:
        graph = chat_graph(saver)
        say(graph, "main", "hi", "h1")
        fork, = saver.fork_thread(cfg("main"), 1)
        say(graph, fork["configurable"]["thread_id"], "fork turn", "h2")
        with pytest.raises(Exception, match="typo"):
            saver.merge_thread(graph, cfg("main"), fork, as_node="typo")
        say(graph, "main", "next", "h3")
        repo = Repo.open(store)
        for state in graph.get_state_history(cfg("main")):
            assert len(repo.get(saver.snapshot_id(state.config)).parents) <= 1, state.metadata


@pytest.mark.parametrize("url", ["sqlite:///checkpoints.db", "http://example.com/store", "redis://localhost:6379", ""])
def test_from_url_refuses_a_url_it_cannot_serve(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, url: str) -> None:
    """Before: ``PFSaver.from_url("sqlite:///checkpoints.db")`` (SqliteSaver's habit) or an http/redis URL returned a
    saver on a new store in a folder literally named ``sqlite:/checkpoints.db`` under the current directory, and
    ``""`` a store in the current directory: checkpoints went somewhere the user never named, exit 0."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InvalidInput):
        PFSaver.from_url(url)
    assert list(tmp_path.iterdir()) == []


def test_a_file_given_as_the_store_path_is_a_clear_error(tmp_path: Path) -> None:
    """Before: ``PFSaver("notes.txt")`` (or a path below a file) raised a raw ``NotADirectoryError`` traceback about
    ``notes.txt/.agentsnap/format.json``."""
    afile = tmp_path / "notes.txt"
    afile.write_text("x")
    for path in (afile, afile / "sub"):
        with pytest.raises(InvalidInput, match="notes.txt is a file"):
            PFSaver(path)
    assert afile.read_text() == "x"


def test_fork_with_worktrees_that_cannot_be_written_makes_no_forks(tmp_path: Path) -> None:
    """Before: ``fork_thread(cfg, 3, worktrees=dir)`` where ``dir/<thread>-fork-2`` was not empty (or on a saver
    without ``world_root``) raised after the first forks were made: threads ``-fork-1`` (with its worktree) and
    ``-fork-2`` (without one) were left behind, and the retry named its forks ``-fork-3``..."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "notes.txt").write_text("v1\n")
    busy = tmp_path / "wt" / "main-fork-2"
    busy.mkdir(parents=True)
    (busy / "junk").write_text("mine")
    with PFSaver(tmp_path / "store", world_root=project) as saver:
        graph = chat_graph(saver)
        say(graph, "main", "hi", "h1", durability="sync")
        with pytest.raises(AgentSnapError, match="not empty"):
            saver.fork_thread(cfg("main"), 3, worktrees=tmp_path / "wt")
        assert saver.index.thread_ids() == ["main"]
        assert sorted(os.listdir(tmp_path / "wt")) == ["main-fork-2"]
    with PFSaver(tmp_path / "plain") as saver:
        graph = chat_graph(saver)
        say(graph, "main", "hi", "h1")
        with pytest.raises(AgentSnapError, match="world_root"):
            saver.fork_thread(cfg("main"), 2, worktrees=tmp_path / "wt2")
        assert saver.index.thread_ids() == ["main"]


def test_fork_count_must_be_a_whole_number(store: Path) -> None:
    """Before: ``fork_thread(cfg, 1.5)`` made 2 forks, ``fork_thread(cfg, True)`` one, and ``fork_thread(cfg, "2")``
    raised a raw ``TypeError: '<' not supported``."""
    with PFSaver(store) as saver:
        graph = chat_graph(saver)
        say(graph, "main", "hi", "h1")
        for n in (1.5, True, "2"):
            with pytest.raises(InvalidInput, match="fork count"):
                saver.fork_thread(cfg("main"), n)  # type: ignore[arg-type]
        assert saver.index.thread_ids() == ["main"]


def test_flush_interval_that_is_not_a_usable_number(store: Path) -> None:
    """Before: ``flush_interval=float("nan")`` was accepted and silently started no background flush at all (refs
    and ``agentsnap log`` never moved until close); ``"0.5"`` raised a raw ``TypeError``; ``math.inf`` (or a huge
    number) killed the flush thread with an ``OverflowError`` traceback on stderr."""
    for bad in (math.nan, "0.5", True):
        with pytest.raises(InvalidInput, match="flush_interval"):
            PFSaver(store, flush_interval=bad)  # type: ignore[arg-type]
    saver = PFSaver(store, flush_interval=math.inf)
    try:
        time.sleep(0.2)
        assert saver._flusher is not None and saver._flusher.is_alive()
        graph = chat_graph(saver)
        say(graph, "main", "hi", "h1")
    finally:
        saver.close()
    assert saver._flusher is not None
    saver._flusher.join(5)
    assert not saver._flusher.is_alive()
    with PFSaver(store) as again:
        assert again.repo.refs.get_ref("refs/heads/langgraph/main") == again.snapshot_id(cfg("main"))


def test_fork_at_a_subgraph_checkpoint_says_so_instead_of_forking_something_else(store: Path) -> None:
    """Before: the config of a subgraph's state (``get_state(..., subgraphs=True)``, checkpoint_ns "sub:<task>") was
    looked up in the root namespace: with its checkpoint_id fork_thread said "unknown snapshot" for a checkpoint that
    exists; without one it forked the ROOT's latest checkpoint, silently. A fork is of a whole thread at a root
    checkpoint: a subgraph's config is refused by name, and the parent's config (what LangGraph replays from) works."""
    from test_issue22_fork import approval_graph

    with PFSaver(store) as saver:
        graph = approval_graph(saver)
        main = cfg("main")
        graph.invoke({"request": "deploy"}, main)  # waits in the subgraph
        sub_cfg = graph.get_state(main, subgraphs=True).tasks[0].state.config
        ns = sub_cfg["configurable"]["checkpoint_ns"]
        assert ns.startswith("sub:")
        no_id = {"configurable": {"thread_id": "main", "checkpoint_ns": ns}}
        before = set(saver.index.thread_ids())
        for config in (sub_cfg, no_id):
            with pytest.raises(InvalidInput, match="subgraph") as err:
                saver.fork_thread(config, 1)
            assert ns in str(err.value)
        assert set(saver.index.thread_ids()) == before  # nothing made
        fork, = saver.fork_thread(graph.get_state(main).config, 1)
        graph.invoke(Command(resume="no"), fork)
        assert graph.get_state(fork).values["done"] == "DEPLOY (no)"


def test_copy_thread_onto_a_thread_that_has_checkpoints_is_refused(store: Path) -> None:
    """Before: copy_thread("a", "b") with "b" already holding its own conversation wrote a's checkpoints beside b's:
    b's latest state became whichever checkpoint id sorted last (here a's, so b's own turns vanished from
    get_state, still listed in its history, interleaved with a's). The copy is refused and b is left as it was."""
    with PFSaver(store) as saver:
        graph = chat_graph(saver)
        say(graph, "b", "b's question", "qb")
        say(graph, "a", "a's question", "qa")
        b_before = graph.get_state(cfg("b")).values
        b_history = [s.config["configurable"]["checkpoint_id"] for s in graph.get_state_history(cfg("b"))]
        with pytest.raises(InvalidInput, match="'b' already has checkpoints"):
            saver.copy_thread("a", "b")
        assert graph.get_state(cfg("b")).values == b_before
        assert [s.config["configurable"]["checkpoint_id"] for s in graph.get_state_history(cfg("b"))] == b_history
        saver.delete_thread("b")
        saver.copy_thread("a", "b")
        assert graph.get_state(cfg("b")).values == graph.get_state(cfg("a")).values


def test_a_store_deleted_under_an_open_saver_is_an_error_not_a_silent_loss(store: Path) -> None:
    """Before: after ``rm -rf .agentsnap`` under an open saver, every later turn "succeeded": its put went into the
    deleted index file, ``flush()`` and ``close()`` returned, and the next PFSaver on that path opened an empty new
    store: the turns were gone without a word. A store replaced by a new one at the same path (another PFSaver made
    it) was the same: the old saver went on writing into the deleted files while the new store saw nothing."""
    saver = PFSaver(store)
    graph = chat_graph(saver)
    say(graph, "main", "hi", "h1")
    saver.flush()
    shutil.rmtree(store / ".agentsnap")
    with pytest.raises(StoreGone, match="deleted or replaced"):
        say(graph, "main", "after the rm", "h2")
    with pytest.raises(StoreGone, match="deleted or replaced"):
        saver.flush()
    with pytest.raises(StoreGone, match="deleted or replaced"):
        saver.close()
    saver.close()  # released all the same: a second close is a no-op

    old = PFSaver(store)
    old_graph = chat_graph(old)
    say(old_graph, "main", "hi", "h1")
    old.flush()
    shutil.rmtree(store / ".agentsnap")
    with PFSaver(store) as new:  # a new store where the old one was
        say(chat_graph(new), "other", "hello", "o1")
        with pytest.raises(StoreGone):
            say(old_graph, "main", "into the deleted files", "h2")
        assert new.index.thread_ids() == ["other"]
    with pytest.raises(StoreGone):
        old.close()


def test_a_saver_used_after_its_with_block_says_it_is_closed(store: Path) -> None:
    """Before: a graph compiled inside ``with PFSaver() as saver:`` and invoked after the block raised sqlite3's
    ``ProgrammingError: Cannot operate on a closed database.`` (which database? the user never opened one), as did
    ``get_state`` and the thread verbs."""
    with PFSaver(store) as saver:
        graph = chat_graph(saver)
        say(graph, "main", "hi", "h1")
    for use in (
        lambda: say(graph, "main", "again", "h2"),
        lambda: graph.get_state(cfg("main")),
        lambda: list(graph.get_state_history(cfg("main"))),
        lambda: saver.fork_thread(cfg("main"), 1),
        lambda: saver.delete_thread("main"),
    ):
        with pytest.raises(SaverClosed, match="PFSaver .* is closed"):
            use()
    with PFSaver(store) as again:
        assert [m.content for m in chat_graph(again).get_state(cfg("main")).values["messages"]] == ["hi", "re: hi"]


def test_list_with_a_config_that_names_no_thread_is_refused(store: Path) -> None:
    """Before: ``saver.list({"thread_id": "a"})`` (a flat config, without ``configurable``) listed the checkpoints of
    EVERY thread, silently (LangGraph's savers raise KeyError there); ``get_tuple`` of it raised a raw
    ``KeyError: 'configurable'``. A ``limit`` of 1.5 raised sqlite3's ``IntegrityError: datatype mismatch``, "2" a
    raw ``TypeError``, ``True`` listed 1, and ``filter="loop"`` an ``AttributeError``."""
    with PFSaver(store) as saver:
        graph = chat_graph(saver)
        say(graph, "a", "a's question", "qa")
        say(graph, "b", "b's question", "qb")
        for flat in ({"thread_id": "a"}, {"configurable": "a"}):
            with pytest.raises(InvalidInput, match="configurable"):
                list(saver.list(flat))  # type: ignore[arg-type]
            with pytest.raises(InvalidInput, match="configurable"):
                saver.get_tuple(flat)  # type: ignore[arg-type]
        for limit in (1.5, "2", True):
            with pytest.raises(InvalidInput, match="limit"):
                list(saver.list(cfg("a"), limit=limit))  # type: ignore[arg-type]
        with pytest.raises(InvalidInput, match="filter"):
            list(saver.list(cfg("a"), filter="loop"))  # type: ignore[arg-type]
        assert {t.config["configurable"]["thread_id"] for t in saver.list(cfg("a"))} == {"a"}
        assert {t.config["configurable"]["thread_id"] for t in saver.list(None)} == {"a", "b"}
        assert len(list(saver.list(cfg("a"), limit=1))) == 1


def test_cache_bytes_that_is_not_a_number_is_refused_when_the_saver_opens(store: Path) -> None:
    """Before: ``PFSaver(cache_bytes="64MB")`` (or None) opened, and every ``put`` then raised a raw ``TypeError: '>'
    not supported between instances of 'int' and 'str'`` from inside ``graph.invoke``."""
    for bad in ("64MB", None, -1, math.nan, True):
        with pytest.raises(InvalidInput, match="cache_bytes"):
            PFSaver(store, cache_bytes=bad)  # type: ignore[arg-type]
    with PFSaver(store, cache_bytes=0) as saver:
        graph = chat_graph(saver)
        say(graph, "main", "hi", "h1")
        assert len(graph.get_state(cfg("main")).values["messages"]) == 2


def test_copy_thread_of_a_thread_with_no_checkpoints_says_so(store: Path) -> None:
    """Before: ``copy_thread("mian", "b")`` (a mistyped source) returned as if it had copied: "b" stayed empty and
    nothing said why (LangGraph's conformance kit accepts either a no-op or an error here; a silent no-op hides
    the typo). Now ``InvalidInput`` names the thread, and nothing is written."""
    with PFSaver(store) as saver:
        graph = chat_graph(saver)
        say(graph, "main", "hi", "h1")
        with pytest.raises(InvalidInput, match="thread 'mian' has no checkpoints to copy"):
            saver.copy_thread("mian", "b")
        assert list(saver.list(cfg("b"))) == []
        saver.copy_thread("main", "b")
        assert graph.get_state(cfg("b")).values == graph.get_state(cfg("main")).values
