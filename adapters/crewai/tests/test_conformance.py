"""The core conformance kit on CrewAI memory (AgentsnapStorage) and on a CrewAI Flow."""

from __future__ import annotations

import os
import tempfile
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from agentsnap_core.testing import AdapterCase, assert_conformance
from agentsnap_crewai import AgentsnapStorage
from crewai.flow.flow import Flow, FlowState, start
from crewai.memory.types import MemoryRecord

T0 = datetime(2026, 1, 1)


def _make_storage() -> AgentsnapStorage:
    # inside the run's scratch directory (conftest.py), removed when the run ends
    return AgentsnapStorage(tempfile.mkdtemp(prefix="agentsnap-crewai-", dir=os.environ.get("CREWAI_STORAGE_DIR")))


def _step(storage: AgentsnapStorage, i: int) -> None:
    at = T0 + timedelta(minutes=i)
    storage.save([MemoryRecord(id=f"m{i}", content=f"fact {i}", scope=f"/s{i % 2}", categories=[f"c{i}"],
                               embedding=[float(i), 1.0, -float(i)], created_at=at, last_accessed=at)])
    if i >= 2:
        storage.delete(record_ids=[f"m{i - 2}"])


def _observe(storage: AgentsnapStorage) -> Any:
    return [r.model_dump(mode="json") | {"embedding": r.embedding} for r in storage.list_records(limit=1000)]


def memory_case() -> AdapterCase:
    return AdapterCase(name="crewai memory (AgentsnapStorage)", make=_make_storage, step=_step, observe=_observe,
                       factory="test_conformance:memory_case", steps=3)


class TallyState(FlowState):
    tally: list[int] = []


class TallyFlow(Flow[TallyState]):
    @start()
    def add(self) -> None:
        self.state.tally.append(len(self.state.tally) * 3)


def flow_case() -> AdapterCase:
    return AdapterCase(name="crewai Flow", make=TallyFlow, step=lambda f, i: f.add(),
                       observe=lambda f: f.state.tally, factory="test_conformance:flow_case")


def test_memory_conformance(tmp_path: Path) -> None:
    assert_conformance(memory_case(), tmp_path)


def test_flow_conformance(tmp_path: Path) -> None:
    assert_conformance(flow_case(), tmp_path)
