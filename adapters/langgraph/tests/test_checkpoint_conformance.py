"""LangGraph's own checkpointer conformance kit (langgraph-checkpoint-conformance), every capability."""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any

import pytest
from agentsnap_core import Repo
from agentsnap_core.testing.servers import need_module

need_module("langgraph.checkpoint.conformance")

from agentsnap_langgraph import PFSaver  # noqa: E402
from langgraph.checkpoint.base import BaseCheckpointSaver  # noqa: E402
from langgraph.checkpoint.conformance import checkpointer_test, validate  # noqa: E402
from langgraph.checkpoint.conformance.capabilities import ALL_CAPABILITIES  # noqa: E402

#: tests per capability in langgraph-checkpoint-conformance 0.0.2 (81 in all)
EXPECTED_TESTS = 81


class SyncPathShim(BaseCheckpointSaver):
    """Routes the kit's async calls to PFSaver's *sync* methods, so the sync path runs the kit too."""

    def __init__(self, inner: PFSaver) -> None:
        super().__init__(serde=inner.serde)
        self.inner = inner

    async def aget_tuple(self, config: Any) -> Any:
        return self.inner.get_tuple(config)

    async def alist(self, config: Any, **kw: Any) -> AsyncIterator[Any]:
        for item in self.inner.list(config, **kw):
            yield item

    async def aput(self, config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
        return self.inner.put(config, checkpoint, metadata, new_versions)

    async def aput_writes(self, config: Any, writes: Sequence[Any], task_id: str, task_path: str = "") -> None:
        self.inner.put_writes(config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        self.inner.delete_thread(thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        self.inner.delete_for_runs(run_ids)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        self.inner.copy_thread(source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        self.inner.prune(thread_ids, strategy=strategy)

    def get_next_version(self, current: Any, channel: Any = None) -> Any:
        return self.inner.get_next_version(current, channel)


def _run(name: str, wrap: bool) -> tuple[dict[str, Any], list[str]]:
    stores: list[str] = []

    @checkpointer_test(name=name)
    async def factory() -> AsyncIterator[BaseCheckpointSaver]:
        with tempfile.TemporaryDirectory(prefix="pfsaver-conformance-") as d:
            saver = PFSaver(d)
            try:
                yield SyncPathShim(saver) if wrap else saver
            finally:
                saver.close()
                rep = Repo.open(d).verify()
                if not rep["ok"]:
                    stores.append(str(rep["problems"][:3]))

    report = asyncio.run(validate(factory))
    return report.to_dict(), stores


def _assert_all_passed(result: dict[str, Any], problems: list[str]) -> None:
    caps = result["results"]
    assert set(caps) == {c.value for c in ALL_CAPABILITIES}
    failed = {c: r for c, r in caps.items() if not (r["detected"] and r["passed"])}
    assert not failed, f"capabilities not detected or failing: {failed}"
    total = sum(r["tests_passed"] for r in caps.values())
    assert total == EXPECTED_TESTS, f"{total} tests passed, expected {EXPECTED_TESTS}"
    assert not problems, f"store did not verify after a capability suite: {problems}"


def test_conformance_every_capability_async_methods() -> None:
    """PFSaver's own async methods pass all 81 tests, base and optional, and the store verifies."""
    _assert_all_passed(*_run("PFSaver", wrap=False))


def test_conformance_every_capability_sync_methods() -> None:
    """The same kit through a shim whose async methods call PFSaver's sync ones."""
    _assert_all_passed(*_run("PFSaver (sync path)", wrap=True))


@pytest.fixture
def _unused() -> Iterator[None]:
    yield
