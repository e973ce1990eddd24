"""A pytest plugin that runs CrewAI's OWN checkpoint tests with the agentsnap provider swapped in (``-p crewai_swap_checkpoint``).

CrewAI 1.15's ``JsonProvider`` is replaced, wherever CrewAI and its tests look it up (the module attribute the tests
import, ``crewai.state``, the default provider of ``CheckpointConfig`` and of ``RuntimeState``, the CLI's
``detect_provider``), by a subclass of :class:`AgentsnapCheckpointProvider`: every checkpoint CrewAI's tests write
through "JsonProvider" becomes an agentsnap snapshot in a repository at the test's location. See the adapter README
for the procedure and the tests that cannot pass by design (they read JsonProvider's file layout).
"""

from __future__ import annotations

import os
import sqlite3
from typing import Any

import pytest

os.environ.setdefault("CREWAI_DISABLE_TELEMETRY", "true")
os.environ.setdefault("OTEL_SDK_DISABLED", "true")
os.environ.setdefault("CREWAI_DISABLE_VERSION_CHECK", "true")

import crewai.state as state_pkg  # noqa: E402
import crewai.state.checkpoint_config as config_module  # noqa: E402
import crewai.state.provider.json_provider as json_module  # noqa: E402
import crewai.state.runtime as runtime_module  # noqa: E402
from agentsnap_crewai import AgentsnapCheckpointProvider  # noqa: E402

_NO_FILE = "agentsnap writes no JSON file per checkpoint (issue 23 #6): the returned location names a file written on demand"
_LAYOUT = "JsonProvider's file layout (<location>/<branch>/<ts>_<uuid>_p-<parent>.json): agentsnap keeps snapshots on refs"
_PRUNE = ("prunes JSON files the test made itself in <location>/main; agentsnap's prune drops only the files it "
          "materialised and keeps every snapshot in the branch history")
_BRACKETS = "'[' is refused in branch names (agentsnap/git ref-name rules, issue 23 #5); and no file per checkpoint"
_CLI = "crewai-cli reads <location>/**/*.json only (no extension point for other stores, issue 23 #8)"
#: CrewAI's own tests that read JsonProvider's files directly: expected to fail with the agentsnap provider, by design.
#: Marked xfail(strict=True): each must still fail, so a change on either side shows up.
BY_DESIGN = {
    "tests/test_checkpoint.py::TestPrune::test_prune_treats_directory_and_branch_as_literal_paths": _BRACKETS,
    "tests/test_checkpoint.py::TestPrune::test_prune_keeps_newest": _PRUNE,
    "tests/test_checkpoint.py::TestPrune::test_prune_zero_removes_all": _PRUNE,
    "tests/test_checkpoint.py::TestJsonProviderFork::test_checkpoint_writes_to_branch_subdir": _LAYOUT,
    "tests/test_checkpoint.py::TestJsonProviderFork::test_checkpoint_fork_branch_subdir": _LAYOUT,
    "tests/test_checkpoint.py::TestJsonProviderFork::test_filename_encodes_parent_id": _LAYOUT,
    "tests/test_checkpoint.py::TestJsonProviderFork::test_extract_id": _LAYOUT,
    "tests/test_checkpoint.py::TestJsonProviderFork::test_prune_branch_aware": _LAYOUT,
    "tests/test_checkpoint.py::TestJsonProviderFork::test_checkpoint_uses_utf8_for_non_ascii_json": _NO_FILE,
    "tests/test_checkpoint.py::TestJsonProviderFork::test_acheckpoint_uses_utf8_for_non_ascii_json": _NO_FILE,
    "tests/test_checkpoint.py::TestJsonProviderFork::test_checkpoint_chaining": _NO_FILE,
    "tests/test_checkpoint.py::TestJsonProviderFork::test_acheckpoint_chaining": _NO_FILE,
    "tests/test_checkpoint_cli.py::TestNonAsciiJsonCheckpoint::test_info_json_file_reads_utf8": _CLI,
    "tests/test_checkpoint_cli.py::TestNonAsciiJsonCheckpoint::test_info_json_latest_reads_utf8": _CLI,
    "tests/test_checkpoint_cli.py::TestNonAsciiJsonCheckpoint::test_list_json_reads_utf8": _CLI,
}
#: CrewAI's tests of its SqliteProvider (not swapped) that store checkpoints with SQLite's jsonb(), which needs
#: SQLite >= 3.45: they fail the same way without the swap where Python's SQLite is older
_OLD_SQLITE = sqlite3.sqlite_version_info < (3, 45, 0)
NEEDS_JSONB = {
    "tests/test_checkpoint.py::TestSqliteProviderFork::test_checkpoint_stores_branch_and_parent",
    "tests/test_checkpoint.py::TestSqliteProviderFork::test_prune_branch_aware",
    "tests/test_checkpoint.py::TestSqliteProviderFork::test_checkpoint_chaining_sqlite",
    "tests/test_checkpoint_cli.py::TestResolveCheckpoint::test_sqlite_latest",
    "tests/test_checkpoint_cli.py::TestResolveCheckpoint::test_sqlite_by_id",
    "tests/test_checkpoint_cli.py::TestResolveCheckpoint::test_sqlite_partial_id",
    "tests/test_checkpoint_cli.py::TestPruneSqlite::test_keep_n",
    "tests/test_checkpoint_cli.py::TestPruneSqlite::test_older_than",
}

#: how many swapped providers wrote a checkpoint (a run that wrote none proves nothing and fails)
WRITES = {"checkpoints": 0}


class SwappedJsonProvider(AgentsnapCheckpointProvider):
    """``JsonProvider()`` answered by the agentsnap provider (``location`` becomes an agentsnap repository)."""

    def checkpoint(self, data: str, location: str, *, parent_id: str | None = None, branch: str = "main") -> str:
        out = super().checkpoint(data, location, parent_id=parent_id, branch=branch)
        WRITES["checkpoints"] += 1
        return out


def pytest_configure(config: Any) -> None:
    json_module.JsonProvider = SwappedJsonProvider  # type: ignore[misc]
    state_pkg.JsonProvider = SwappedJsonProvider  # type: ignore[attr-defined]
    config_module.JsonProvider = SwappedJsonProvider  # type: ignore[misc]
    runtime_module.JsonProvider = SwappedJsonProvider  # type: ignore[misc]
    config_module.CheckpointConfig.model_fields["provider"].default_factory = SwappedJsonProvider
    config_module.CheckpointConfig.model_rebuild(force=True)
    runtime_module.RuntimeState.__private_attributes__["_provider"].default_factory = SwappedJsonProvider
    config.addinivalue_line("markers", "vcr: CrewAI's cassette marker (unused offline)")


def pytest_collection_modifyitems(config: Any, items: list[Any]) -> None:
    for item in items:
        reason = BY_DESIGN.get(item.nodeid.split("[")[0])
        if reason:
            item.add_marker(pytest.mark.xfail(strict=True, reason=f"by design: {reason}"))
        elif _OLD_SQLITE and item.nodeid in NEEDS_JSONB:
            item.add_marker(pytest.mark.xfail(strict=True, raises=sqlite3.OperationalError,
                                              reason=f"CrewAI's SqliteProvider needs SQLite >= 3.45 (jsonb); this has {sqlite3.sqlite_version}"))


def pytest_sessionfinish(session: Any, exitstatus: int) -> None:
    print(f"\ncrewai_swap_checkpoint: checkpoints written through the agentsnap provider: {WRITES}")
    if session.testscollected and not WRITES["checkpoints"]:
        session.exitstatus = 1  # the swap did not take: these tests ran on CrewAI's own provider


def pytest_report_header(config: Any) -> str:
    return "crewai_swap_checkpoint: JsonProvider -> AgentsnapCheckpointProvider"
