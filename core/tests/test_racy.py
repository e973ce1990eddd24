"""Git's "racily clean" case: a same-size rewrite within one timestamp tick must be captured."""

from __future__ import annotations

import pytest
from agentsnap_core import Repo
from agentsnap_core.layers import world


@pytest.fixture
def coarse_filesystem(monkeypatch: pytest.MonkeyPatch) -> None:
    """Simulate a filesystem whose timestamps never advance (every write lands in one tick)."""
    monkeypatch.setattr(world, "TIMESTAMP_GRANULARITY_NS", 10**18)


def _rewrite_same_size_same_tick(repo: Repo) -> tuple[str, str]:
    f = repo.root / "notes.txt"
    f.write_text("aaaa")
    first = repo.snapshot("one")
    f.write_text("bbbb")  # same size, same (coarse) mtime, same inode
    second = repo.snapshot("two")
    return first.layers["world"]["tree"], second.layers["world"]["tree"]


def test_racily_clean_rewrite_is_captured(repo: Repo, coarse_filesystem: None) -> None:
    a, b = _rewrite_same_size_same_tick(repo)
    assert a != b
    snap = repo.get("HEAD")
    entries = {e[0]: e for e in repo.world_entries(snap)}
    from agentsnap_core.format import content

    assert content.get_bytes(repo.objects, entries["notes.txt"][4]) == b"bbbb"


def test_without_the_racy_rule_the_rewrite_would_be_missed(
    repo: Repo, coarse_filesystem: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Control: proves the test above can fail — disabling the rule loses the rewrite."""
    monkeypatch.setattr(world, "RACY_WINDOW_NS", -(10**19))
    a, b = _rewrite_same_size_same_tick(repo)
    assert a == b
