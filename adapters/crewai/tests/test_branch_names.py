"""Branch names given to the adapter are validated by core's ref-name rules: a clear error, nothing written."""

from __future__ import annotations

from pathlib import Path

import pytest
from agentsnap_core import Repo
from agentsnap_core.errors import InvalidRefName
from agentsnap_crewai import AgentsnapCheckpointProvider, AgentsnapFlowPersistence, AgentsnapStorage
from crewai.memory.types import MemoryRecord

BAD = ["../../etc", "a..b", "x~1"]


def _refs(repo: Repo) -> list[str]:
    return sorted(repo.refs.list_refs("refs/"))


@pytest.mark.parametrize("name", BAD)
def test_memory_branch_names_are_validated(tmp_path: Path, name: str) -> None:
    with pytest.raises(InvalidRefName, match="invalid name"):
        AgentsnapStorage(tmp_path / "repo", branch=name)
    storage = AgentsnapStorage(tmp_path / "repo")
    storage.save([MemoryRecord(id="m1", content="fact", embedding=[1.0, 0.0])])
    storage.snapshot("one")
    before = _refs(storage.repo)
    with pytest.raises(InvalidRefName, match="invalid name"):
        storage.fork(name)
    assert _refs(storage.repo) == before
    assert not (tmp_path / "etc").exists()


@pytest.mark.parametrize("name", BAD)
def test_checkpoint_branch_names_are_validated(tmp_path: Path, name: str) -> None:
    repo = Repo.init(tmp_path / "repo")
    with pytest.raises(InvalidRefName, match="invalid name"):
        AgentsnapCheckpointProvider().checkpoint('{"entities": []}', str(tmp_path / "repo"), branch=name)
    with pytest.raises(InvalidRefName, match="invalid name"):
        AgentsnapCheckpointProvider(branch_prefix=name + "/")
    assert _refs(repo) == []


@pytest.mark.parametrize("name", BAD)
def test_flow_branch_names_are_validated(tmp_path: Path, name: str) -> None:
    with pytest.raises(InvalidRefName, match="invalid name"):
        AgentsnapFlowPersistence(tmp_path / "repo", branch_prefix=name)
    persistence = AgentsnapFlowPersistence(tmp_path / "repo")
    with pytest.raises(InvalidRefName, match="invalid name"):
        persistence.save_state(name, "step", {"id": name})
    assert _refs(persistence.repo) == []
