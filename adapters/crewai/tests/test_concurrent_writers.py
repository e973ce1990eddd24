"""Several writers on one memory branch (processes and threads): every write survives every snapshot."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
from datetime import datetime, timedelta
from pathlib import Path

from agentsnap_core import Repo
from agentsnap_crewai import AgentsnapStorage, register_memory_storage
from crewai.memory.types import MemoryRecord
from crewai.memory.unified_memory import Memory
from crewai_fakes import ScriptedLLM, embed

T0 = datetime(2026, 1, 1)
N = 12


def _record(writer: str, i: int) -> MemoryRecord:
    at = T0 + timedelta(seconds=i)
    return MemoryRecord(id=f"{writer}-{i}", content=f"{writer} fact {i}", scope=f"/{writer}",
                        embedding=[float(i), 1.0, 0.0], created_at=at, last_accessed=at)


def _write_many(storage: AgentsnapStorage, writer: str, start: threading.Barrier | None = None) -> None:
    if start is not None:
        start.wait()
    for i in range(N):
        storage.save([_record(writer, i)])
        if i % 3 == 2:
            storage.snapshot(f"{writer} at {i}")
    storage.snapshot(f"{writer} done")


def _ids_on_branch(repo_path: Path) -> set[str]:
    repo = Repo.open(repo_path)
    try:
        return set(repo.read_layer("crewai/memory", "state")["records"])
    finally:
        repo.close()


def _expected(*writers: str) -> set[str]:
    return {f"{w}-{i}" for w in writers for i in range(N)}


def test_two_storages_in_threads_lose_nothing(tmp_path: Path) -> None:
    repo_path = tmp_path / "repo"
    Repo.init(repo_path).close()
    first, second = AgentsnapStorage(repo_path), AgentsnapStorage(repo_path)
    start = threading.Barrier(2)
    errors: list[BaseException] = []

    def run(storage: AgentsnapStorage, writer: str) -> None:
        try:
            _write_many(storage, writer, start)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(s, w)) for s, w in ((first, "a"), (second, "b"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert _ids_on_branch(repo_path) == _expected("a", "b")
    # each writer also sees the other's records (one branch, one memory)
    assert {r.id for r in first.list_records(limit=1000)} == _expected("a", "b")
    assert AgentsnapStorage(repo_path).count() == 2 * N


def test_two_memories_from_one_storage_string_lose_nothing(tmp_path: Path) -> None:
    """What ``Memory(storage="agentsnap:<path>")`` twice in one process does: two writers on one branch."""
    register_memory_storage()
    spec = f"agentsnap:{tmp_path / 'repo'}"
    one = Memory(llm=ScriptedLLM(), storage=spec, embedder=embed)
    two = Memory(llm=ScriptedLLM(), storage=spec, embedder=embed)
    one.remember("Poseidonia is the capital", scope="/facts", categories=["geo"], importance=0.5)
    two.remember("Atlantis has 12000 souls", scope="/facts", categories=["geo"], importance=0.5)
    one._storage.snapshot("one")
    two._storage.snapshot("two")
    one.remember("Atlantis sank", scope="/facts", categories=["geo"], importance=0.5)
    one._storage.snapshot("one again")
    contents = {r["content"] for r in Repo.open(tmp_path / "repo").read_layer("crewai/memory", "state")["records"].values()}
    assert contents == {"Poseidonia is the capital", "Atlantis has 12000 souls", "Atlantis sank"}


WRITER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    import conftest  # offline environment
    from agentsnap_crewai import AgentsnapStorage
    from test_concurrent_writers import _write_many

    storage = AgentsnapStorage(sys.argv[1])  # both open the branch before either writes
    Path(sys.argv[1], "ready-" + sys.argv[2]).touch()
    while len(list(Path(sys.argv[1]).glob("ready-*"))) < 2:
        time.sleep(0.01)
    _write_many(storage, sys.argv[2])
    """
)


def test_two_processes_lose_nothing(tmp_path: Path) -> None:
    repo_path = tmp_path / "repo"
    Repo.init(repo_path).close()
    here = Path(__file__).parent
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(repo_path), w], cwd=here, stderr=subprocess.PIPE, text=True)
             for w in ("p", "q")]
    results = [(p.wait(timeout=300), p.stderr.read() if p.stderr else "") for p in procs]
    assert [rc for rc, _ in results] == [0, 0], results
    assert _ids_on_branch(repo_path) == _expected("p", "q")
    assert AgentsnapStorage(repo_path).count() == 2 * N
