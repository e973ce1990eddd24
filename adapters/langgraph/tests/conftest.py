from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from agentsnap_core.testing.servers import need_module


@pytest.fixture(autouse=True)
def _need_langgraph() -> None:
    need_module("langgraph.checkpoint.base")


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Path]:
    """A fresh project directory; the saver creates ``.agentsnap`` inside it."""
    old = os.environ.pop("AGENTSNAP_DIR", None)
    try:
        yield tmp_path / "project"
    finally:
        if old is not None:
            os.environ["AGENTSNAP_DIR"] = old
