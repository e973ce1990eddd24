"""PFSaver on a PostgreSQL store (a real server): LangGraph's conformance kit, and two workers sharing threads."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tempfile
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from agentsnap_core import Repo
from agentsnap_core.testing.servers import need_module

need_module("psycopg_pool")
need_module("langgraph.checkpoint.conformance")

import lg_script  # noqa: E402
from agentsnap_langgraph import PFSaver, thread_ref  # noqa: E402
from langgraph.checkpoint.base import BaseCheckpointSaver  # noqa: E402
from langgraph.checkpoint.conformance import checkpointer_test, validate  # noqa: E402
from langgraph.checkpoint.memory import InMemorySaver  # noqa: E402
from test_checkpoint_conformance import SyncPathShim, _assert_all_passed  # noqa: E402
from test_issue22_api import chat  # noqa: E402

HERE = Path(__file__).parent


def _url(server: Any) -> str:
    return f"{server.url}?schema=lg_{uuid.uuid4().hex[:12]}"


@pytest.mark.parametrize("wrap", [False, True], ids=["async-methods", "sync-methods"])
def test_conformance_every_capability_on_postgres(postgres_server: Any, wrap: bool) -> None:
    problems: list[str] = []

    @checkpointer_test(name=f"PFSaver postgres {wrap}")
    async def factory() -> AsyncIterator[BaseCheckpointSaver]:
        with tempfile.TemporaryDirectory(prefix="pfsaver-pg-") as d:
            saver = PFSaver.from_url(_url(postgres_server), path=d)
            try:
                yield SyncPathShim(saver) if wrap else saver
            finally:
                saver.close()
                with Repo.open(d) as repo:
                    rep = repo.verify()
                if not rep["ok"]:
                    problems.append(str(rep["problems"][:3]))

    report = asyncio.run(validate(factory))
    _assert_all_passed(report.to_dict(), problems)


def test_two_workers_share_threads_through_postgres(postgres_server: Any, tmp_path: Path) -> None:
    """Worker A runs until the interrupt, worker B (another process, another directory) resumes and
    time-travels; the history equals InMemorySaver's and the shared store verifies."""
    reference_graph = lg_script.build(InMemorySaver())
    lg_script.phase1(reference_graph)
    lg_script.phase2(reference_graph)
    reference = lg_script.normalize(reference_graph)

    url = _url(postgres_server)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), *sys.path])}
    for phase, worker in (("1", "worker-a"), ("2", "worker-b")):
        proc = subprocess.run(
            [sys.executable, str(HERE / "lg_script.py"), phase, url, str(tmp_path / worker)],
            capture_output=True, text=True, env=env, timeout=300,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-2000:]
    with PFSaver.from_url(url, path=tmp_path / "worker-c") as saver:
        assert lg_script.normalize(lg_script.build(saver)) == reference
        head = saver.snapshot_id(lg_script.THREAD)
    with Repo.open(tmp_path / "worker-a") as repo:
        assert repo.refs.get_ref(thread_ref("script")) == head  # refs are shared, not per worker
        assert repo.verify()["ok"]


def test_worker_dir_bound_elsewhere_is_refused(postgres_server: Any, tmp_path: Path) -> None:
    from agentsnap_core.errors import InvalidInput

    PFSaver.from_url(_url(postgres_server), path=tmp_path).close()
    with pytest.raises(InvalidInput, match="bound to"):
        PFSaver.from_url(_url(postgres_server), path=tmp_path)


def test_s3_only_store_is_refused_clearly(s3_url: str, tmp_path: Path) -> None:
    """An S3 store alone has no SQL for the checkpoint index: a clear error, no saver."""
    from agentsnap_core.errors import AgentSnapError

    with pytest.raises(AgentSnapError, match="checkpoint index in SQL"):
        PFSaver.from_url(s3_url, path=tmp_path)


PG_DURABLE_KILL = """
import os, sys
sys.path.insert(0, {here!r})
import agentsnap_langgraph.saver as savermod
savermod.DURABLE_GROUP_INTERVAL = 3600.0
from agentsnap_langgraph import PFSaver
from test_issue22_api import chat, turns
flushes = []
real = PFSaver.flush
PFSaver.flush = lambda self: (flushes.append(1), real(self))[1]
saver = PFSaver.from_url({url!r}, path={path!r}, flush_interval=0)
flushes.clear()  # the open's own
turns(chat(saver), "k", 3)
print("flushes during the puts:", len(flushes), flush=True)
os._exit(0)  # killed: no group commit, no close
"""


def test_durable_mode_on_postgres_is_durable_at_each_put_without_a_flush_in_it(postgres_server: Any, tmp_path: Path) -> None:
    """Durable mode (flush_interval=0) on a PostgreSQL store flushed inside every put (snapshot objects, core
    transaction, marking rows flushed: ~1.5x AsyncPostgresSaver per step), though the put's row, with the bytes its
    snapshot needs, is already committed on the server and its values are in the store's objects table. Now the
    group commit runs beside the puts there too, and a process killed before any group commit loses nothing."""
    url, path = _url(postgres_server), str(tmp_path / "worker")
    proc = subprocess.run([sys.executable, "-c", PG_DURABLE_KILL.format(here=str(HERE), url=url, path=path)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "flushes during the puts: 0" in proc.stdout
    with PFSaver.from_url(url, path=path) as saver:  # the next open writes the snapshots from the rows
        messages = chat(saver).get_state({"configurable": {"thread_id": "k"}}).values["messages"]
        assert [m.content for m in messages][-1] == "echo: m2"
    with Repo.open(path) as repo:
        assert repo.verify()["ok"]


def test_the_flushes_leave_no_dead_rows_behind_on_postgres(postgres_server: Any, tmp_path: Path) -> None:
    """Every checkpoint's state document and manifest wait in ``lg_pending`` until the flush deletes them, and its
    row is updated once: PostgreSQL keeps the old versions until a vacuum (autovacuum wakes once a minute), so after
    the 600-checkpoint benchmark run those tables held 3.7 MB of dead rows, more than PostgresSaver's whole schema."""
    import psycopg
    from langchain_core.messages import HumanMessage

    url = _url(postgres_server)
    schema = url.rsplit("schema=", 1)[1]
    with PFSaver.from_url(url, path=tmp_path / "worker", flush_interval=0.05) as saver:
        graph = chat(saver)
        for i in range(40):
            graph.invoke({"messages": [HumanMessage(content=f"m{i} " + "words " * 200, id=f"h{i}")]},
                         {"configurable": {"thread_id": "t"}})
        assert [m.content for m in graph.get_state({"configurable": {"thread_id": "t"}}).values["messages"]][-1] \
            .startswith("echo: m39")
    with psycopg.connect(postgres_server.url, autocommit=True) as conn:
        conn.execute("CHECKPOINT")
        [(pending,)] = conn.execute(f"SELECT pg_relation_size('{schema}.lg_pending')").fetchall()
        [(rows,)] = conn.execute(f"SELECT count(*) FROM {schema}.lg_pending").fetchall()
    assert rows == 0
    assert pending <= 2 * 8192, f"lg_pending holds {pending} bytes of pages for no row"
    with PFSaver.from_url(url, path=tmp_path / "worker") as again:
        assert len(list(again.list({"configurable": {"thread_id": "t"}}))) == 120


def test_a_vacuum_that_fails_says_so_once(postgres_server: Any, tmp_path: Path) -> None:
    """The flush's VACUUM failing (here: the connection lost, injected) is said once, as a warning, and the saver
    goes on (autovacuum reclaims the space later); it was silent before."""
    import warnings

    import psycopg

    url = _url(postgres_server)
    with PFSaver.from_url(url, path=tmp_path / "worker", flush_interval=0.05) as saver:
        index = saver.index
        real = index.pool.connection

        def connection(*a: Any, **k: Any) -> Any:
            raise psycopg.OperationalError("server closed the connection unexpectedly")

        index.pool.connection = connection  # type: ignore[method-assign]
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            index._vacuum(force=True)
            index._vacuum(force=True)
        index.pool.connection = real  # type: ignore[method-assign]
        said = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
        assert len(said) == 1 and "VACUUM of the checkpoint index failed" in said[0], said
