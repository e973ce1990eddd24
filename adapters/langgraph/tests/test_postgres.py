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
