from __future__ import annotations

from pathlib import Path

import pytest
from agentsnap_core.testing.servers import need_module

need_module("autogen_agentchat")
need_module("autogen_ext.models.replay")

from agentsnap_core import Repo  # noqa: E402


@pytest.fixture
def repo(tmp_path: Path) -> Repo:
    r = Repo.init(tmp_path / "repo")
    yield r
    r.close()
