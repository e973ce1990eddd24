"""A pytest plugin that runs CrewAI's OWN tests with the agentsnap backends swapped in (``-p crewai_swap``).

CrewAI 1.15's default memory storage (``LanceDBStorage``) and default flow persistence (``SQLiteFlowPersistence``)
are replaced, where CrewAI and its tests look them up, by thin subclasses of :class:`AgentsnapStorage` and
:class:`AgentsnapFlowPersistence` that take the same constructor arguments. See the adapter README.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

os.environ.setdefault("CREWAI_DISABLE_TELEMETRY", "true")
os.environ.setdefault("OTEL_SDK_DISABLED", "true")
os.environ.setdefault("CREWAI_DISABLE_VERSION_CHECK", "true")

import crewai.flow.persistence as flow_persistence_pkg  # noqa: E402
import crewai.flow.persistence.sqlite as flow_sqlite  # noqa: E402
import crewai.memory.storage.lancedb_storage as lancedb_module  # noqa: E402
from agentsnap_crewai import AgentsnapFlowPersistence, AgentsnapStorage  # noqa: E402

#: how many swapped backends CrewAI's tests built (a run that built none proves nothing and fails)
BUILT = {"memory": 0, "flow": 0}


class SwappedMemoryStorage(AgentsnapStorage):
    """``LanceDBStorage(path, table_name, vector_dim, compact_every)`` answered by an AgentsnapStorage."""

    def __init__(self, path: str | Path | None = None, table_name: str = "memories", vector_dim: int | None = None,
                 compact_every: int = 100) -> None:
        base = Path(path) if path is not None else Path(os.environ.get("CREWAI_STORAGE_DIR") or tempfile.mkdtemp()) / "memory"
        super().__init__(base, branch=f"crewai/{table_name}", vector_dim=vector_dim)
        BUILT["memory"] += 1


class SwappedFlowPersistence(AgentsnapFlowPersistence):
    """``SQLiteFlowPersistence(db_path)`` answered by an AgentsnapFlowPersistence next to that path."""

    def __init__(self, db_path: str | None = None, **kwargs: Any) -> None:
        if db_path is None and "path" not in kwargs:
            db_path = str(Path(os.environ.get("CREWAI_STORAGE_DIR") or tempfile.mkdtemp()) / "flow_states.db")
        super().__init__(kwargs.pop("path", None) or f"{db_path}.agentsnap", **kwargs)
        BUILT["flow"] += 1


def pytest_configure(config: Any) -> None:
    lancedb_module.LanceDBStorage = SwappedMemoryStorage  # type: ignore[misc]
    flow_sqlite.SQLiteFlowPersistence = SwappedFlowPersistence  # type: ignore[misc]
    flow_persistence_pkg.SQLiteFlowPersistence = SwappedFlowPersistence  # type: ignore[misc]
    config.addinivalue_line("markers", "vcr: CrewAI's cassette marker (unused offline)")


def pytest_sessionfinish(session: Any, exitstatus: int) -> None:
    print(f"\ncrewai_swap: agentsnap backends built by CrewAI's tests: {BUILT}")
    if session.testscollected and not all(BUILT.values()):
        session.exitstatus = 1  # the swap did not take: these tests ran on CrewAI's own backends


def pytest_report_header(config: Any) -> str:
    return "crewai_swap: LanceDBStorage -> AgentsnapStorage, SQLiteFlowPersistence -> AgentsnapFlowPersistence"
