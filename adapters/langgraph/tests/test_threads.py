"""agentsnap verbs on LangGraph threads: fork, merge, files alongside checkpoints, crash recovery."""

from __future__ import annotations

import operator
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Annotated, Any

import pytest
from agentsnap_core import Repo
from agentsnap_core.errors import AgentSnapError
from agentsnap_langgraph import PFSaver, thread_ref
from agentsnap_langgraph._index import SqliteIndex
from agentsnap_langgraph._store import INDEX_FILE
from agentsnap_langgraph.merge import ThreadMergeConflict
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages
from typing_extensions import TypedDict

HERE = Path(__file__).parent


class Chat(TypedDict, total=False):
    messages: Annotated[list[AnyMessage], add_messages]
    notes: Annotated[list[str], operator.add]
    topic: str


def chat_graph(checkpointer: Any) -> Any:
    def echo(state: Chat) -> dict[str, Any]:
        last = state["messages"][-1]
        return {
            "messages": [AIMessage(content=f"echo: {last.content}", id=f"a-{last.id}")],
            "notes": [f"saw {last.id}"],
            "topic": str(last.content),
        }

    builder = StateGraph(Chat)
    builder.add_node("echo", echo)
    builder.add_edge(START, "echo")
    return builder.compile(checkpointer=checkpointer)


def say(graph: Any, thread: str, text: str, ident: str, **run: Any) -> dict[str, Any]:
    """One turn; ``run``: invoke's options (``durability="sync"``, which a saver with ``world_root`` needs)."""
    return graph.invoke({"messages": [HumanMessage(content=text, id=ident)]}, {"configurable": {"thread_id": thread}},
                        **run)


def cfg(thread: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread}}


def contents(graph: Any, thread: str) -> list[str]:
    return [m.content for m in graph.get_state(cfg(thread)).values["messages"]]


def test_fork_thread_copies_history_and_isolates(store: Path) -> None:
    with PFSaver(store) as saver:
        graph = chat_graph(saver)
        say(graph, "main", "hi", "h1")
        say(graph, "main", "more", "h2")
        # after the first turn (the turn's last checkpoint: a fork replays from it, so one taken mid-turn would rerun echo)
        first = next(s for s in reversed(list(graph.get_state_history(cfg("main")))) if s.values.get("messages") and not s.next)
        forks = saver.fork_thread(first.config, 2)
        assert [f["configurable"]["thread_id"] for f in forks] == ["main-fork-1", "main-fork-2"]
        for f in forks:
            assert contents(graph, f["configurable"]["thread_id"]) == ["hi", "echo: hi"]
            ids = [s.config["configurable"]["checkpoint_id"] for s in graph.get_state_history(f)]
            origin = [s.config["configurable"]["checkpoint_id"] for s in graph.get_state_history(cfg("main"))]
            assert ids == [i for i in origin if i <= first.config["configurable"]["checkpoint_id"]]
        point = first.config["configurable"]["checkpoint_id"]
        shared = saver.snapshot_id(first.config)
        assert saver.snapshot_id({"configurable": {"thread_id": "main-fork-2", "checkpoint_id": point}}) == shared
        say(graph, "main-fork-1", "A", "hA")
        fork_first_new = next(
            s for s in graph.get_state_history(cfg("main-fork-1")) if s.parent_config and s.parent_config["configurable"]["checkpoint_id"] == point
        )
        assert Repo.open(store).get(saver.snapshot_id(fork_first_new.config)).parents == [shared]
        assert contents(graph, "main-fork-2") == ["hi", "echo: hi"]
        assert contents(graph, "main") == ["hi", "echo: hi", "more", "echo: more"]
        assert saver.fork_thread(cfg("main"), 1)[0]["configurable"]["thread_id"] == "main-fork-3"
    repo = Repo.open(store)
    assert repo.verify()["ok"]
    fork_head = repo.get(thread_ref("main-fork-1"))
    assert fork_head.manifest["meta"]["thread_id"] == "main-fork-1"


def test_merge_thread_through_reducers(store: Path) -> None:
    with PFSaver(store) as saver:
        graph = chat_graph(saver)
        say(graph, "base", "hi", "h1")
        one, two = saver.fork_thread(cfg("base"), 2)
        say(graph, "base-fork-1", "A", "hA")
        say(graph, "base-fork-2", "B", "hB")
        with pytest.raises(ThreadMergeConflict, match="topic"):
            saver.merge_thread(graph, one, two, as_node="echo")
        before = saver.snapshot_id(one)
        source = saver.snapshot_id(two)
        saver.merge_thread(graph, one, two, as_node="echo", prefer="source")
        merged = graph.get_state(one).values
        assert [m.content for m in merged["messages"]] == ["hi", "echo: hi", "A", "echo: A", "B", "echo: B"]
        assert merged["notes"] == ["saw h1", "saw hA", "saw hB"]
        assert merged["topic"] == "B"
        assert contents(graph, "base-fork-2") == ["hi", "echo: hi", "B", "echo: B"]
        snap = Repo.open(store).get(saver.snapshot_id(one))
        assert snap.parents == [before, source]
        # merging again adds nothing new
        again = saver.merge_thread(graph, one, two, as_node="echo", prefer="source")
        assert again["configurable"]["checkpoint_id"] == graph.get_state(one).config["configurable"]["checkpoint_id"]


def test_merge_needs_a_common_checkpoint(store: Path) -> None:
    with PFSaver(store) as saver:
        graph = chat_graph(saver)
        say(graph, "x", "hi", "h1")
        say(graph, "y", "yo", "h2")
        with pytest.raises(AgentSnapError, match="share no checkpoint"):
            saver.merge_thread(graph, cfg("x"), cfg("y"))


def test_world_files_restored_only_on_request(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "notes.txt").write_text("v1\n")
    with PFSaver(project, world_root=project) as saver:
        graph = chat_graph(saver)
        say(graph, "w", "first", "h1", durability="sync")
        at_v1 = graph.get_state(cfg("w")).config
        (project / "notes.txt").write_text("v2\n")
        (project / "new.txt").write_text("later\n")
        say(graph, "w", "second", "h2", durability="sync")
        # reading history and old checkpoints never touches the files
        list(graph.get_state_history(cfg("w")))
        assert saver.get_tuple(at_v1) is not None
        assert graph.get_state(at_v1).values["topic"] == "first"
        assert (project / "notes.txt").read_text() == "v2\n"
        forks = saver.fork_thread(at_v1, 1, worktrees=tmp_path / "forks")
        fork_dir = tmp_path / "forks" / forks[0]["configurable"]["thread_id"]
        assert (fork_dir / "notes.txt").read_text() == "v1\n"
        assert not (fork_dir / "new.txt").exists()
        assert (project / "notes.txt").read_text() == "v2\n"
        saver.restore_world(at_v1)
        assert (project / "notes.txt").read_text() == "v1\n"
        assert not (project / "new.txt").exists()
        assert (project / ".agentsnap").is_dir()
        say(graph, "w", "third", "h3", durability="sync")  # the store still works after the restore
    assert Repo.open(project).verify()["ok"]


def test_restore_world_without_files_is_a_clear_error(store: Path) -> None:
    with PFSaver(store) as saver:
        graph = chat_graph(saver)
        say(graph, "t", "hi", "h1")
        with pytest.raises(AgentSnapError, match="world_root"):
            saver.restore_world(cfg("t"))


CRASH = """
import os, sys
sys.path.insert(0, {here!r})
from test_threads import chat_graph, say
from agentsnap_langgraph import PFSaver
saver = PFSaver({store!r}, flush_interval=3600)
graph = chat_graph(saver)
say(graph, "c", "one", "h1")
say(graph, "c", "two", "h2")
os._exit(0)  # no close(), no atexit: the refs were never moved
"""


def _crash(store: Path) -> None:
    proc = subprocess.run([sys.executable, "-c", CRASH.format(here=str(HERE), store=str(store))], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_crash_before_flush_is_recovered_on_open(store: Path) -> None:
    _crash(store)
    repo = Repo.open(store)
    assert repo.refs.get_ref(thread_ref("c")) is None
    with PFSaver(store) as saver:
        assert [m.content for m in chat_graph(saver).get_state(cfg("c")).values["messages"]][-1] == "echo: two"
        head = repo.refs.get_ref(thread_ref("c"))
        assert head == saver.snapshot_id(cfg("c"))
    assert repo.verify()["ok"]


def test_crash_with_lost_objects_drops_only_the_lost_checkpoints(store: Path) -> None:
    """After a crash, the rows carry their snapshots' bytes and recovery writes them; a row whose channel
    value never reached the disk (a power cut) is dropped, the older ones survive."""
    from agentsnap_core.encoding import unpack

    _crash(store)
    repo = Repo.open(store)
    index = SqliteIndex(repo.store_dir / INDEX_FILE)  # read the index without recovering it
    rows = index.unflushed()
    assert len(rows) == 6  # two turns: input, start, echo each
    index.close()
    assert not any(repo.objects.has(r[4]) for r in rows)  # the snapshots were still waiting for a flush

    def values(row: tuple) -> set[str]:
        return {v[2] for v in unpack(bytes(row[5]))["channels"].values() if v[2]}

    newest, previous = rows[-1], rows[-2]
    lost = sorted(values(newest) - values(previous))
    assert lost
    waiting = sqlite3.connect(repo.store_dir / INDEX_FILE)
    for oid in lost:  # as if the power failed before the last channel value reached the disk
        if os.path.exists(repo.objects._path(oid)):  # a loose object
            os.unlink(repo.objects._path(oid))
        waiting.execute("DELETE FROM lg_pending_blobs WHERE oid=?", (oid,))  # or one waiting for the flush's pack
    waiting.commit()
    waiting.close()
    with PFSaver(store) as saver:
        tup = saver.get_tuple(cfg("c"))
        assert tup is not None and tup.config["configurable"]["checkpoint_id"] == previous[3]
        tip = repo.refs.get_ref(thread_ref("c"))
        if tip != previous[4]:  # the crashed run's writes on that checkpoint, recorded on the branch (they travel)
            manifest = repo.manifest(tip)
            assert manifest["parents"][0] == previous[4] and manifest["meta"]["writes_of"] == previous[3], manifest
    assert repo.verify()["ok"]


def test_default_store_is_dot_agentsnap_or_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AGENTSNAP_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    with PFSaver() as saver:
        say(chat_graph(saver), "d", "hi", "h1")
    assert Repo.open(tmp_path).refs.get_ref(thread_ref("d"))
    elsewhere = tmp_path / "elsewhere" / "store"
    monkeypatch.setenv("AGENTSNAP_DIR", str(elsewhere))
    with PFSaver() as saver:
        say(chat_graph(saver), "e", "hi", "h1")
    assert (elsewhere / "format.json").exists()
    assert Repo(elsewhere.parent, elsewhere).refs.get_ref(thread_ref("e"))


def test_bad_arguments_are_refused(store: Path) -> None:
    from agentsnap_core.errors import InvalidInput

    with pytest.raises(InvalidInput, match="flush_interval"):
        PFSaver(store, flush_interval=-1)
    with pytest.raises(InvalidInput, match="world_root"):
        PFSaver(store, world_root=store / "missing")
    with PFSaver(store) as saver:
        with pytest.raises(InvalidInput, match="prune strategy"):
            saver.prune(["t"], strategy="sometimes")
        with pytest.raises(InvalidInput, match="fork count"):
            saver.fork_thread(cfg("t"), 0)
        with pytest.raises(AgentSnapError, match="unknown"):
            saver.fork_thread(cfg("nothing-here"), 1)


def test_unusual_thread_ids_get_valid_refs(store: Path) -> None:
    with PFSaver(store) as saver:
        graph = chat_graph(saver)
        for thread in ["user/42 session", "..", "-x", "a.lock"]:
            say(graph, thread, "hi", "h1")
    repo = Repo.open(store)
    names = [n for n in repo.refs.list_refs("refs/heads/langgraph/")]
    assert len(names) == 4
    assert all(n.split("/")[-1].startswith("@") for n in names)
    assert repo.verify()["ok"]


async def test_async_puts_capture_files_too(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "a.txt").write_text("async\n")
    with PFSaver(project, world_root=project) as saver:
        graph = chat_graph(saver)
        await graph.ainvoke({"messages": [HumanMessage(content="hi", id="h1")]}, cfg("aw"), durability="sync")
        snap = Repo.open(project).get(saver.snapshot_id(cfg("aw")))
        assert "a.txt" in [e[0] for e in Repo.open(project).world_entries(snap)]


WORKER = """
import sys
sys.path.insert(0, {here!r})
from test_threads import chat_graph, say
from agentsnap_langgraph import PFSaver
with PFSaver({store!r}, flush_interval=0.01) as saver:
    graph = chat_graph(saver)
    for turn in range(5):
        say(graph, {thread!r}, f"turn {{turn}}", f"h{{turn}}")
"""


def test_concurrent_processes_on_one_store_lose_nothing(store: Path) -> None:
    """Three processes write their own threads into one store at once: every checkpoint is indexed,
    every thread ref names its newest checkpoint, and every snapshot stays reachable."""
    from agentsnap_core.maintenance import reachable

    PFSaver(store).close()
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER.format(here=str(HERE), store=str(store), thread=f"w{i}")],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(3)
    ]
    for p in procs:
        _out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-2000:]
    repo = Repo.open(store)
    with PFSaver(store) as saver:
        for i in range(3):
            history = list(saver.list(cfg(f"w{i}")))
            assert len(history) == 15
            assert repo.refs.get_ref(thread_ref(f"w{i}")) == saver.snapshot_id(cfg(f"w{i}"))
        snaps = {row[4] for row in saver.index.iter_rows(None, None, None, None, None)}
    assert snaps <= reachable(repo)
    assert repo.verify()["ok"]


def test_a_project_whose_store_is_outside_it_keeps_its_threads_there(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A project made with ``agentsnap init --store-dir`` (the store outside the tree, a link file in it). Before,
    ``PFSaver(project)`` refused the link ("is a linked worktree file"), and once the link had gone with the files
    (``git clean -fdx``) it made a new, empty store inside the project in silence: the threads were not there. Now it
    follows the link, or finds the store the link named, and the threads go on."""
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    project, store = tmp_path / "project", tmp_path / "outside"
    project.mkdir()
    Repo.init(project, store_dir=store).close()
    with PFSaver(project) as saver:
        say(chat_graph(saver), "t", "hi", "h1")
    (project / ".agentsnap").unlink()  # (what git clean -fdx does to it)
    with PFSaver(project) as saver:
        assert contents(chat_graph(saver), "t") == ["hi", "echo: hi"]
    assert (project / ".agentsnap").is_file()  # the link, made again; no store inside the project
    with Repo.open(project) as repo:
        assert repo.store_dir == store.resolve() and repo.refs.get_ref(thread_ref("t"))
