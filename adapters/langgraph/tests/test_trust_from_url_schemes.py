"""``PFSaver.from_url`` reads a URL's scheme as RFC 3986 (and core's ``open_store``) do: in any case.

Reported (tried as a user, langgraph 1.2.22): ``PFSaver.from_url(os.environ["STORE_URL"], path=worker_dir)`` with
``STORE_URL=Postgresql://app@db/agents`` (or ``FILE:///srv/agents``, as a config tool had written it). The scheme
passed the check of known schemes (it compared in lower case), then the dispatch compared in the given case, so the
URL was taken for a relative *path*: each worker got its own new embedded store in a folder literally named
``Postgresql:/app@db/agents`` under its current directory - no thread shared, nothing said, exit 0 (the hazard
``tests/test_trust_edges.py::test_from_url_refuses_a_url_it_cannot_serve`` closed for unknown schemes). And
``file://`` with no path opened a store in the current directory, where core's ``open_store`` says "no path". Now the
scheme decides in any case, and a file URL without a path is refused.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from agentsnap_core.errors import AgentSnapError, InvalidInput
from agentsnap_langgraph import PFSaver


@pytest.mark.parametrize("scheme", ["FILE", "File"])
def test_a_file_url_in_upper_case_opens_the_store_it_names(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           scheme: str) -> None:
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    where = tmp_path / "store"
    with PFSaver.from_url(f"{scheme}://{where}") as saver:
        assert saver.repo.store_dir == where / ".agentsnap"
    assert (where / ".agentsnap" / "format.json").is_file()
    assert list(cwd.iterdir()) == []  # (was: cwd/FILE:/<tmp>/store/.agentsnap)


@pytest.mark.parametrize("url", ["Postgresql://app@127.0.0.1:1/agents", "POSTGRES://app@127.0.0.1:1/agents"])
def test_a_server_url_in_upper_case_is_a_server_store_not_a_local_folder(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch,
                                                                         url: str) -> None:
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    with pytest.raises(AgentSnapError):  # (no server listens on port 1: the store cannot be reached, and says so)
        PFSaver.from_url(url, path=tmp_path / "worker").close()
    assert not any(p.name.lower().startswith("postgres") for p in cwd.iterdir())


def test_a_file_url_without_a_path_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InvalidInput, match="no path"):
        PFSaver.from_url("file://")
    assert list(tmp_path.iterdir()) == []  # (was: a store in the current directory)
