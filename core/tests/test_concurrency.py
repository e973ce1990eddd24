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
