"""Checkpoints written behind: the call only queues; reads, kickoff's end and exit see every checkpoint; a crash loses
at most what is queued; a failed background commit is raised, never only logged."""

from __future__ import annotations

import json
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
    import json, sys
    from agentsnap_crewai import AgentsnapCheckpointProvider
    loc, n, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    provider = AgentsnapCheckpointProvider(max_pending=4)
    parent = None
    for i in range(n):
        data = json.dumps({"entities": [], "i": i, "pad": "y" * 2000, "trigger": "task_completed"})
        parent = provider.extract_id(provider.checkpoint(data, loc, parent_id=parent))
        print(parent, flush=True)
    if mode == "hang":
        import time
        time.sleep(600)
""")


def _child(loc: Path, n: int, mode: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", _CHILD, str(loc), str(n), mode], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def test_a_killed_process_loses_at_most_what_was_queued_and_the_store_stays_consistent(tmp_path: Path) -> None:
    loc = tmp_path / "repo"
    Repo.init(loc).close()
    child = _child(loc, 100_000, "run")
    returned = []
    assert child.stdout is not None
    while len(returned) < 40:
        line = child.stdout.readline()
        assert line, child.stderr.read() if child.stderr else ""
        returned.append(line.strip())
    child.send_signal(signal.SIGKILL)  # mid-run: the writer is committing, the queue holds more
    rest, _ = child.communicate(timeout=60)
    returned += rest.split()  # ids the child got back before it died
    repo = Repo.open(loc)
    assert repo.verify()["ok"]
    committed = _chain(repo)
    assert committed == returned[: len(committed)]  # in order, no gap, nothing foreign
    assert len(returned) - len(committed) <= 4  # max_pending: queued or being committed
    assert len(committed) >= len(returned) - 4 > 0
    for pos in (0, len(committed) - 1):  # every committed checkpoint is whole
        assert json.loads(checkpoint_data(repo, committed[pos]))["i"] == pos
    provider = AgentsnapCheckpointProvider()  # and the branch goes on from its head
    new = provider.extract_id(provider.checkpoint(_data(-1), str(loc), parent_id=committed[-1]))
    provider.flush()
    assert _chain(repo)[-2:] == [committed[-1], new]


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
