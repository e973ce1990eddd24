"""Many processes on one store: no ref update is lost, the reflog accounts for each, verify is clean.

A short seeded run by default (CI); ``AGENTSNAP_LONG=1`` runs the full 16 processes x 50 operations.
``AGENTSNAP_CONCURRENCY_SEED`` picks the seed. Counts are printed (``pytest -s`` shows them).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from agentsnap_core import Repo
from agentsnap_core.testing.concurrency import check_workload, run_workload

LONG = os.environ.get("AGENTSNAP_LONG") == "1"
WORKERS, OPS = (16, 50) if LONG else (6, 8)
SEED = int(os.environ.get("AGENTSNAP_CONCURRENCY_SEED", "7"))


def _check(repo: Repo, report: dict) -> None:
    summary = check_workload(repo, report)
    print(f"\nconcurrency {WORKERS}x{OPS} seed={SEED}: {summary}")
    assert summary["lost"] == 0 and summary["phantom"] == 0
    assert summary["shared_chain"] == summary["shared_wins"]
    assert summary["updates"] == WORKERS * OPS  # every operation made exactly one ref update
    assert summary["verify_ok"], summary["problems"]


@pytest.mark.timeout(1800)
def test_many_writers_on_one_local_store(tmp_path: Path) -> None:
    Repo.init(tmp_path / "repo").close()
    report = run_workload(tmp_path / "repo", None, WORKERS, OPS, SEED)
    with Repo.open(tmp_path / "repo") as repo:
        _check(repo, report)


@pytest.mark.timeout(1800)
def test_many_writers_on_one_postgres_s3_store(tmp_path: Path, combined_url: str) -> None:
    report = run_workload(tmp_path, combined_url, WORKERS, OPS, SEED)
    with Repo.init(tmp_path / "checker", store_url=combined_url) as repo:
        _check(repo, report)


def _first_append(path: str, barrier) -> str:  # type: ignore[no-untyped-def]
    from agentsnap_core.stores.ledger import SqliteLedgerStore

    barrier.wait()
    try:
        store = SqliteLedgerStore(path)
        while not store.append(store.count(), os.urandom(16), os.urandom(16), b"seal"):
            pass  # another process took that index: the next one
        return "ok"
    except Exception as exc:  # noqa: BLE001 - reported to the test
        return f"{type(exc).__name__}: {exc}"


def test_processes_creating_a_store_database_at_once_all_open_it(tmp_path: Path) -> None:
    """Processes whose first write creates a store database at the same moment (a pool of agents forking from a
    fresh store: each appends the first effects-ledger entry) each switch it to WAL; SQLite answered all but one
    "database is locked" at once, without waiting, and the fork failed (seen in CI: test_crash_concurrent_gc). 60
    rounds of 6 processes: before the fix about one round in four failed."""
    import multiprocessing as mp

    from agentsnap_core.stores.ledger import SqliteLedgerStore

    ctx = mp.get_context("fork")
    with ctx.Manager() as manager, ctx.Pool(6) as pool:
        for round_no in range(60):
            path = str(tmp_path / f"ledger-{round_no}.sqlite")
            barrier = manager.Barrier(6)
            results = pool.starmap(_first_append, [(path, barrier)] * 6)
            assert results == ["ok"] * 6, f"round {round_no}: {results}"
            assert SqliteLedgerStore(path).count() == 6
