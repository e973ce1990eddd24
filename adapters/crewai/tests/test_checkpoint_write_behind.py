"""Checkpoints written behind: the call queues and journals; reads, kickoff's end and exit see every checkpoint; a
SIGKILL loses none that a call returned (the journal is replayed by the next open, once); a failed background commit
is raised, never only logged.

The kill tests stall the background writer deterministically: their child processes replace
``agentsnap_crewai.checkpoint._commit_all`` (what the writer calls to commit) by a function that blocks forever, so
when the child is SIGKILLed right after its calls returned, nothing has been committed, and only the journal holds
the checkpoints (asserted before the store is reopened).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from agentsnap_core import Repo
from agentsnap_crewai import (
    AgentsnapCheckpointProvider,
    CheckpointFailed,
    CheckpointWriteFailed,
    checkpoint_failures,
    checkpoint_path,
    flush_all,
    resolve_checkpoint,
)
from agentsnap_crewai.checkpoint import checkpoint_data
from crewai import Agent, Crew, Task
from crewai.state.checkpoint_config import CheckpointConfig
from crewai_fakes import ScriptedLLM


def _data(i: int) -> str:
    return json.dumps({"entities": [], "i": i, "pad": "x" * 500, "trigger": "task_completed"})


def _chain(repo: Repo, branch: str = "crewai/main") -> list[str]:
    """The checkpoint ids (as CrewAI got them) on ``branch``, oldest first."""
    return [s.manifest["meta"]["crewai_id"] for s in repo.log(branch)][::-1]


def test_every_read_sees_every_checkpoint_taken(tmp_path: Path) -> None:
    """Read-your-writes: checkpoint_data / checkpoint_path / from_checkpoint / prune right after the calls."""
    provider = AgentsnapCheckpointProvider()
    loc, ids, parent = str(tmp_path / "repo"), [], None
    for i in range(12):
        parent = provider.extract_id(provider.checkpoint(_data(i), loc, parent_id=parent))
        ids.append(parent)
    repo = Repo.open(tmp_path / "repo")
    assert json.loads(checkpoint_data(repo, ids[-1]))["i"] == 11  # no flush in between
    assert json.loads(provider.from_checkpoint(checkpoint_path(repo, ids[5])))["i"] == 5
    assert _chain(repo) == ids  # in call order, each parented on the one before
    assert provider.prune(loc, 1) == 1  # the files checkpoint_path wrote, all but the newest
    assert [resolve_checkpoint(repo, i) for i in ids] == [s.id for s in repo.log("crewai/main")][::-1]


def test_kickoff_returns_with_every_checkpoint_committed(tmp_path: Path) -> None:
    """The end of kickoff() is a durability point: another process opening the store sees the whole run."""
    llm = ScriptedLLM(answers={"capital": "Poseidonia", "population": "12000"})
    agent = Agent(role="Researcher", goal="Answer", backstory="A scholar", llm=llm)
    tasks = [Task(description=q, expected_output="x", agent=agent) for q in ("The capital?", "The population?", "The capital again?")]
    crew = Crew(agents=[agent], tasks=tasks,
                checkpoint=CheckpointConfig(location=str(tmp_path / "repo"), provider=AgentsnapCheckpointProvider()))
    crew.kickoff()  # no crewai_event_bus.flush(), no provider flush
    out = subprocess.run([sys.executable, "-c", "import sys; from agentsnap_core import Repo; "
                          "print(len(list(Repo.open(sys.argv[1]).log('crewai/main'))))", str(tmp_path / "repo")],
                         capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "3", out.stderr


_CHILD = textwrap.dedent("""
    import json, sys, threading
    from agentsnap_crewai import AgentsnapCheckpointProvider
    loc, n, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    branch = sys.argv[4] if len(sys.argv) > 4 else "main"
    if mode == "stall":  # test hook: the background writer never commits (see the module docstring)
        import agentsnap_crewai.checkpoint as cp
        cp._commit_all = lambda *args: threading.Event().wait()
    provider = AgentsnapCheckpointProvider(max_pending=4 if mode != "stall" else n + 1)
    parent = None
    for i in range(n):
        data = json.dumps({"entities": [], "i": i, "pad": "y" * 2000, "trigger": "task_completed"})
        parent = provider.extract_id(provider.checkpoint(data, loc, parent_id=parent, branch=branch))
        print(parent, flush=True)
    if mode in ("hang", "stall"):
        import time
        time.sleep(600)
""")


def _child(loc: Path, n: int, mode: str, branch: str = "main") -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", _CHILD, str(loc), str(n), mode, branch], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _read_ids(child: subprocess.Popen[str], n: int) -> list[str]:
    assert child.stdout is not None
    out = []
    while len(out) < n:
        line = child.stdout.readline()
        assert line, child.stderr.read() if child.stderr else ""
        out.append(line.strip())
    return out


def _kill(child: subprocess.Popen[str]) -> list[str]:
    """SIGKILL ``child``; the ids it printed that were not read yet. Read through ``child.stdout`` itself, whose
    buffer :func:`_read_ids`'s ``readline`` may have filled ahead: ``communicate()`` reads the pipe's descriptor and
    missed those lines (seen once in CI under load: an id the child printed, absent from what the test read, so the
    committed chain looked out of step with the calls)."""
    child.send_signal(signal.SIGKILL)
    assert child.stdout is not None
    rest = child.stdout.read()  # (to EOF: the killed child's end of the pipe is closed)
    child.wait(timeout=60)
    child.stdout.close()
    if child.stderr is not None:
        child.stderr.close()
    return rest.split()


def _journals(loc: Path) -> list[Path]:
    """The journals other processes left in the store at ``loc`` (this live test process keeps its own)."""
    return sorted(p for p in (loc / ".agentsnap" / "crewai" / "journal").glob("*.journal")
                  if not p.name.startswith(f"{os.getpid()}-"))


def _core_cli(loc: Path, *args: str) -> subprocess.CompletedProcess[str]:
    out = subprocess.run([sys.executable, "-m", "agentsnap_core", *args], cwd=loc, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    return out


def _verify_cli(loc: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "agentsnap_core", "verify"], cwd=loc, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0 and "ok" in out.stdout, out.stdout + out.stderr


def _stalled_and_killed(loc: Path, n: int, branch: str = "main") -> list[str]:
    """A child made ``n`` checkpoints with its writer stalled and was SIGKILLed: their ids; nothing is committed."""
    child = _child(loc, n, "stall", branch)
    ids = _read_ids(child, n)
    assert _kill(child) == []
    return ids


def _no_checkpoint_committed(loc: Path) -> bool:
    repo = Repo.open(loc)
    return "refs/heads/crewai/main" not in repo.refs.list_refs("refs/heads/")


_CREW_CHILD = textwrap.dedent("""
    import sys, threading
    sys.path.insert(0, sys.argv[2])
    import agentsnap_crewai.checkpoint as cp
    from agentsnap_crewai import AgentsnapCheckpointProvider
    from crewai import Agent, Crew, Task
    from crewai.state.checkpoint_config import CheckpointConfig
    from crewai_fakes import ScriptedLLM

    cp._commit_all = lambda *args: threading.Event().wait()  # test hook: the background writer never commits

    class Printing(AgentsnapCheckpointProvider):
        def checkpoint(self, *args, **kwargs):
            location = super().checkpoint(*args, **kwargs)
            print(self.extract_id(location), flush=True)  # returned to CrewAI
            return location

    llm = ScriptedLLM(answers={"capital": "Poseidonia", "population": "12000", "harbour": "two"})
    agent = Agent(role="Researcher", goal="Answer", backstory="A scholar", llm=llm)
    tasks = [Task(description=q, expected_output="x", agent=agent) for q in ("The capital?", "The population?", "The harbour?")]
    crew = Crew(agents=[agent], tasks=tasks, checkpoint=CheckpointConfig(location=sys.argv[1], provider=Printing()))
    crew.kickoff()  # its end waits for the (stalled) writer: the parent kills the process there or before
""")


def test_a_killed_crew_loses_no_checkpoint_a_call_returned(tmp_path: Path) -> None:
    """CrewAI's real classes (model fake only): SIGKILL right after the 3 checkpoint calls returned, before any commit;
    the next process to open the store sees all 3, with their lineage, and the store verifies."""
    loc = tmp_path / "repo"
    Repo.init(loc).close()
    child = subprocess.Popen([sys.executable, "-c", _CREW_CHILD, str(loc), str(Path(__file__).parent)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    ids = _read_ids(child, 3)
    assert _kill(child) == []
    assert _no_checkpoint_committed(loc)  # the writer committed none: only the child's journal holds them
    left = _journals(loc)
    core_log = _core_cli(loc, "log", "--all")  # core alone does not replay: it says so, not silently less
    assert "write-behind journal(s) of a process that ended" in core_log.stderr and "agentsnap-crewai" in core_log.stderr
    out = subprocess.run([sys.executable, "-c", textwrap.dedent("""
        import json, sys
        from agentsnap_core import Repo
        from agentsnap_crewai.checkpoint import checkpoint_runtime
        repo = Repo.open(sys.argv[1])
        last = checkpoint_runtime(repo, sys.argv[2])  # a read through the adapter, in a fresh process
        print(json.dumps([t["output"]["raw"] if t["output"] else None for t in last["entities"][0]["tasks"]]))
    """), str(loc), ids[-1]], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == ["Poseidonia", "12000", "two"]
    repo = Repo.open(loc)
    assert _chain(repo) == ids  # all 3, in order, once
    snaps = [s for s in repo.log("crewai/main")][::-1]
    assert [s.parents for s in snaps] == [[], [snaps[0].id], [snaps[1].id]]
    assert [s.manifest["meta"]["crewai_parent"] for s in snaps] == [None, ids[0], ids[1]]
    assert json.loads(checkpoint_data(repo, ids[1]))["parent_id"] == ids[0]  # CrewAI's own lineage field
    assert len(left) == 1 and _journals(loc) == []  # the dead process's journal: replayed, then removed
    assert "write-behind journal" not in _core_cli(loc, "log", "--all").stderr
    _verify_cli(loc)


def test_a_killed_process_loses_nothing_returned_and_the_store_stays_consistent(tmp_path: Path) -> None:
    """Killed mid-run with its writer live (committing, queue full): every id a call returned is in the store once."""
    loc = tmp_path / "repo"
    Repo.init(loc).close()
    child = _child(loc, 100_000, "run")
    returned = _read_ids(child, 40)
    returned += _kill(child)  # ids the child got back before it died
    repo = Repo.open(loc)
    assert repo.verify()["ok"]
    assert _chain(repo) == returned[: len(_chain(repo))]  # what the writer committed: in order, no gap
    assert json.loads(checkpoint_data(repo, returned[-1]))["i"] == len(returned) - 1  # the read replays the journal
    chain = _chain(repo)
    assert chain[: len(returned)] == returned  # nothing returned lost, nothing twice
    assert len(chain) - len(returned) <= 1  # at most the one journaled whose id the child had no time to print
    for pos in (0, len(chain) - 1):  # every checkpoint is whole
        assert json.loads(checkpoint_data(repo, chain[pos]))["i"] == pos
    provider = AgentsnapCheckpointProvider()  # and the branch goes on from its head
    new = provider.extract_id(provider.checkpoint(_data(-1), str(loc), parent_id=chain[-1]))
    provider.flush()
    assert _chain(repo)[-2:] == [chain[-1], new]
    _verify_cli(loc)


def test_a_torn_journal_tail_is_dropped_and_nothing_else_is_lost(tmp_path: Path) -> None:
    loc = tmp_path / "repo"
    Repo.init(loc).close()
    ids = _stalled_and_killed(loc, 5)
    (journal,) = _journals(loc)
    size = journal.stat().st_size
    with journal.open("r+b") as f:  # the last entry cut short, then garbage (as a crash or power loss leaves it)
        f.truncate(size - 700)
        f.seek(0, os.SEEK_END)
        f.write(b"\0" * 300)
    repo = Repo.open(loc)
    assert json.loads(checkpoint_data(repo, ids[3]))["i"] == 3
    assert _chain(repo) == ids[:4]
    with pytest.raises(Exception, match=ids[4]):
        checkpoint_data(repo, ids[4])
    assert _journals(loc) == []
    _verify_cli(loc)


_REPLAY_CHILD = textwrap.dedent("""
    import os, signal, sys
    import agentsnap_crewai.checkpoint as cp
    from agentsnap_core import Repo
    original = cp._commit_all

    def commit_then_die(*args):  # test hook: killed right after the replay's commit, before the journal is removed
        if sys.argv[2] == "before":
            os.kill(os.getpid(), signal.SIGKILL)
        out = original(*args)
        os.kill(os.getpid(), signal.SIGKILL)
        return out

    cp._commit_all = commit_then_die
    cp.recover(Repo.open(sys.argv[1]))
""")


@pytest.mark.parametrize("when", ["before", "after"])
def test_a_replay_killed_midway_neither_loses_nor_duplicates(tmp_path: Path, when: str) -> None:
    loc = tmp_path / "repo"
    Repo.init(loc).close()
    ids = _stalled_and_killed(loc, 6)
    out = subprocess.run([sys.executable, "-c", _REPLAY_CHILD, str(loc), when], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == -signal.SIGKILL, out.stderr
    assert len(_journals(loc)) == 1  # the replaying process died holding it
    assert _chain(Repo.open(loc)) == ids if when == "after" else _no_checkpoint_committed(loc)
    repo = Repo.open(loc)
    assert resolve_checkpoint(repo, ids[-1])  # the next open replays it again
    assert _chain(repo) == ids  # each once
    assert _journals(loc) == []
    _verify_cli(loc)


def test_two_live_processes_keep_their_own_journals_and_lose_nothing(tmp_path: Path) -> None:
    """Each live process holds its own journal (flock): a third process opening the store replays neither; once both
    are SIGKILLed, the next open replays both."""
    loc = tmp_path / "repo"
    Repo.init(loc).close()
    children = {name: _child(loc, 5, "stall", name) for name in ("a", "b")}
    ids = {name: _read_ids(child, 5) for name, child in children.items()}
    live = _journals(loc)
    repo = Repo.open(loc)
    provider = AgentsnapCheckpointProvider()
    mine = provider.extract_id(provider.checkpoint(_data(0), str(loc), branch="c"))  # opens the store: replays none
    provider.flush()
    assert _chain(repo, "crewai/c") == [mine]
    assert set(repo.refs.list_refs("refs/heads/")) >= {"refs/heads/crewai/c"}
    assert not {"refs/heads/crewai/a", "refs/heads/crewai/b"} & set(repo.refs.list_refs("refs/heads/"))
    for child in children.values():
        assert _kill(child) == []
    assert json.loads(checkpoint_data(repo, ids["a"][-1]))["i"] == 4
    assert _chain(repo, "crewai/a") == ids["a"] and _chain(repo, "crewai/b") == ids["b"]
    assert len(live) == 2 and _journals(loc) == []  # one journal per process, both replayed and removed
    _verify_cli(loc)


def test_interpreter_exit_commits_what_is_queued(tmp_path: Path) -> None:
    loc = tmp_path / "repo"
    Repo.init(loc).close()
    out = subprocess.run([sys.executable, "-c", _CHILD, str(loc), "30", "exit"], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    assert _chain(Repo.open(loc)) == out.stdout.split()  # all 30, no flush() called: atexit did it


def test_a_failed_background_commit_is_raised_by_the_next_call_and_by_flush(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    provider = AgentsnapCheckpointProvider()
    loc = str(tmp_path / "repo")
    first = provider.extract_id(provider.checkpoint(_data(0), loc))
    repo = Repo.open(tmp_path / "repo")
    assert resolve_checkpoint(repo, first)
    original = Repo.snapshot

    def full_disk(self: Repo, *args: object, **kwargs: object) -> object:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Repo, "snapshot", full_disk)
    lost = provider.extract_id(provider.checkpoint(_data(1), loc, parent_id=first))  # queued: the call cannot know
    failures = checkpoint_failures(repo)  # waits for the writer: the failure is noted in the store
    assert len(failures) == 1 and "No space left on device" in failures[0]["error"]
    monkeypatch.setattr(Repo, "snapshot", original)
    with pytest.raises(CheckpointWriteFailed, match="No space left on device"):
        provider.checkpoint(_data(2), loc, parent_id=lost)  # the next call raises it (CrewAI reports it as failed)
    ok = provider.extract_id(provider.checkpoint(_data(3), loc, parent_id=lost))  # raised once; the store works
    provider.flush()
    assert _chain(repo) == [first, ok]  # the lost one's child is parented on the branch head
    with pytest.raises(Exception, match=lost):
        checkpoint_data(repo, lost)  # and reading it says why it is missing
    monkeypatch.setattr(Repo, "snapshot", full_disk)
    provider.checkpoint(_data(4), loc, parent_id=ok)
    with pytest.raises(CheckpointWriteFailed, match="No space left on device"):
        provider.flush()


def test_a_failed_background_commit_fails_the_kickoff(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def full_disk(self: Repo, *args: object, **kwargs: object) -> object:
        raise OSError(28, "No space left on device")

    Repo.init(tmp_path / "repo").close()
    monkeypatch.setattr(Repo, "snapshot", full_disk)
    agent = Agent(role="Researcher", goal="Answer", backstory="A scholar", llm=ScriptedLLM(answers={"capital": "P"}))
    crew = Crew(agents=[agent], tasks=[Task(description="The capital?", expected_output="x", agent=agent)],
                checkpoint=CheckpointConfig(location=str(tmp_path / "repo"), provider=AgentsnapCheckpointProvider()))
    with pytest.raises(CheckpointFailed, match="No space left on device") as err:
        crew.kickoff()
    assert err.value.output.raw == "P"


def test_prune_after_each_checkpoint_does_not_wait_for_the_writer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """CrewAI prunes after every checkpoint when max_checkpoints is set: that must not make checkpoints synchronous."""
    import threading

    provider = AgentsnapCheckpointProvider()
    loc = str(tmp_path / "repo")
    first = provider.extract_id(provider.checkpoint(_data(0), loc))
    checkpoint_path(Repo.open(loc), first)  # committed, with its file
    release = threading.Event()
    original = Repo.snapshot

    def slow(self: Repo, *args: object, **kwargs: object) -> object:
        release.wait(120)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Repo, "snapshot", slow)
    second = provider.extract_id(provider.checkpoint(_data(1), loc, parent_id=first))  # the writer holds it
    pruned: list[int] = []
    worker = threading.Thread(target=lambda: pruned.append(provider.prune(loc, 0)))
    worker.start()
    worker.join(60)
    alive = worker.is_alive()
    release.set()
    worker.join()
    assert not alive and pruned == [1]  # returned while the writer was still committing
    assert resolve_checkpoint(Repo.open(loc), second)


def test_checkpoints_queued_while_the_writer_is_busy_are_committed_together(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A writer that falls behind catches up in one batch (one barrier, one transaction), not one commit each."""
    import threading

    entered, release = threading.Event(), threading.Event()
    original, commits = Repo.snapshot, []

    def first_waits(self: Repo, *args: object, **kwargs: object) -> object:
        entered.set()
        release.wait(120)
        return original(self, *args, **kwargs)

    original_commit = Repo._commit_batch

    def counted(self: Repo, batch: object) -> None:
        commits.append(len(getattr(batch, "rows", [])))
        original_commit(self, batch)

    monkeypatch.setattr(Repo, "snapshot", first_waits)
    monkeypatch.setattr(Repo, "_commit_batch", counted)
    provider = AgentsnapCheckpointProvider()
    loc = str(tmp_path / "repo")
    ids = [provider.extract_id(provider.checkpoint(_data(0), loc))]
    assert entered.wait(120)  # the writer is committing the first one
    for i in range(1, 6):
        ids.append(provider.extract_id(provider.checkpoint(_data(i), loc, parent_id=ids[-1])))
    release.set()
    provider.flush()
    assert commits == [1, 5]  # six checkpoints, two commits
    assert _chain(Repo.open(loc)) == ids  # in order, each on the one before


def test_durable_mode_commits_in_the_call_and_returns_the_snapshot_id(tmp_path: Path) -> None:
    provider = AgentsnapCheckpointProvider(durable=True)
    loc = str(tmp_path / "repo")
    first = provider.extract_id(provider.checkpoint(_data(0), loc))
    second = provider.extract_id(provider.checkpoint(_data(1), loc, parent_id=first))
    out = subprocess.run([sys.executable, "-c", "import sys; from agentsnap_core import Repo; "
                          "print(*[s.id for s in Repo.open(sys.argv[1]).log('crewai/main')])", loc],
                         capture_output=True, text=True, timeout=120)
    assert out.stdout.split() == [second, first], out.stderr  # on disk when the call returned
    assert Repo.open(loc).get(second).parents == [first]


def test_threads_checkpointing_to_one_store_lose_nothing(tmp_path: Path) -> None:
    import threading

    loc = str(tmp_path / "repo")
    ids: dict[str, list[str]] = {}

    def run(name: str) -> None:
        provider, parent, mine = AgentsnapCheckpointProvider(), None, []
        for i in range(8):
            parent = provider.extract_id(provider.checkpoint(_data(i), loc, parent_id=parent, branch=name))
            mine.append(parent)
        ids[name] = mine

    threads = [threading.Thread(target=run, args=(f"t{n}",)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    flush_all()  # reading through core itself (repo.log) does not wait for the writer: flush first (README)
    repo = Repo.open(loc)
    assert all(_chain(repo, f"crewai/{name}") == mine for name, mine in ids.items())


def test_a_forked_child_writes_its_own_checkpoints_and_journal(tmp_path: Path) -> None:
    """A child forked after the parent's writer started has no writer thread of its own: it must start one (and a
    journal of its own) instead of queueing behind the parent's dead copy forever."""
    loc = str(tmp_path / "repo")
    parent_provider = AgentsnapCheckpointProvider()
    first = parent_provider.extract_id(parent_provider.checkpoint(_data(0), loc))  # this process's writer runs
    parent_provider.flush()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: exits through os._exit, never back into pytest
        code = 1
        try:
            os.close(read)
            provider = AgentsnapCheckpointProvider()
            mine = provider.extract_id(provider.checkpoint(_data(1), loc, parent_id=first, branch="child"))
            provider.flush()
            os.write(write, mine.encode())
            code = 0
        finally:
            os._exit(code)
    import select

    os.close(write)
    with os.fdopen(read) as f:
        ready = select.select([f], [], [], 120)[0]  # a child stuck behind the parent's writer never answers
        if not ready:
            os.kill(pid, signal.SIGKILL)
        mine = f.read() if ready else ""
    _, status = os.waitpid(pid, 0)
    assert ready and os.waitstatus_to_exitcode(status) == 0, "the forked child's checkpoint never completed"
    parent_provider.flush()
    repo = Repo.open(loc)
    assert _chain(repo, "crewai/child") == [first, mine] and _chain(repo) == [first]
    assert resolve_checkpoint(repo, mine) == repo.resolve("crewai/child")  # nothing replayed twice
    assert _journals(Path(loc)) == []  # the child's own (os._exit skipped its atexit): empty, removed by that read
