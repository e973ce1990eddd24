"""An unchanged working tree is not chunked and stored again on every snapshot (issue 19): the stat cache remembers
the digest of the last tree stored from it and that tree's id. The memo is only a shortcut: the tree id is the one a
full store gives, a missing tree object is stored again, and a stat cache without the memo still loads."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from agentsnap_core import Repo
from agentsnap_core.format import content, objects
from agentsnap_core.format.encoding import pack_plain
from agentsnap_core.layers import world


@pytest.fixture
def repo(tmp_path: Path) -> Repo:
    root = tmp_path / "work"
    root.mkdir()
    for i in range(1500):  # a tree over objects.SMALL_FILE once encoded: it is chunked
        (root / f"file-with-a-longish-name-{i:05}.txt").write_text(f"{i}\n")
    return Repo.init(root)


def _tree(repo: Repo, snap_id: str) -> str:
    return str(repo.get(snap_id).layers["world"]["tree"])


def test_an_unchanged_tree_is_not_chunked_again(repo: Repo, monkeypatch: pytest.MonkeyPatch) -> None:
    first = repo.snapshot("first").id
    cuts: list[int] = []
    real_cut = objects.cut
    monkeypatch.setattr(objects, "cut", lambda data: cuts.append(len(data)) or real_cut(data))
    second = repo.snapshot("same").id
    assert _tree(repo, second) == _tree(repo, first)
    assert not cuts, "the unchanged tree was chunked and stored again"
    (repo.root / "file-with-a-longish-name-00007.txt").write_text("changed\n")
    third = repo.snapshot("changed").id
    assert cuts and _tree(repo, third) != _tree(repo, first)
    raw = pack_plain({"entries": [world._stored(e) for e in repo.world_entries(third)], "v": world.TREE_FORMAT})
    assert content.put_bytes(None, raw) == _tree(repo, third)  # the id a full store gives


def test_a_missing_tree_object_is_stored_again(repo: Repo) -> None:
    first = repo.snapshot("first").id
    tree = _tree(repo, first)
    # the memo names a tree the store no longer has (as after gc of a dropped branch): the snapshot stores it again
    cache_path = repo.wt_dir / "statcache.msgpack"
    cache = world.StatCache.load(cache_path)
    assert cache.tree is not None and cache.tree[1] == tree
    fake = "0" * 64
    cache.tree, cache.dirty = (cache.tree[0], fake), True
    cache.save(cache_path)
    second = repo.snapshot("again").id
    assert _tree(repo, second) == tree and repo.objects.has(tree)
    assert world.StatCache.load(cache_path).tree == (cache.tree[0], tree)


def test_a_stat_cache_without_the_memo_loads(repo: Repo) -> None:
    repo.snapshot("first")
    path = repo.wt_dir / "statcache.msgpack"
    cache = world.StatCache.load(path)
    os.replace(path, path.with_suffix(".old"))
    path.write_bytes(pack_plain({"v": 1, "e": {world.name_out(k): v for k, v in cache.entries.items()}}))
    old = world.StatCache.load(path)
    assert old.tree is None and old.entries == cache.entries and not old.dirty
    assert _tree(repo, repo.snapshot("second").id) == cache.tree[1]  # type: ignore[index]


def test_status_of_an_unchanged_tree_needs_no_tree_load_and_still_sees_changes(
    repo: Repo, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = repo.snapshot("first").id
    loads: list[str] = []
    real_load = world.load_tree
    monkeypatch.setattr(world, "load_tree", lambda store, oid, **kw: loads.append(oid) or real_load(store, oid, **kw))
    st = repo.status()
    assert st["clean"] and st["world"] == {"added": [], "modified": [], "deleted": [], "mode": []} and not loads
    (repo.root / "file-with-a-longish-name-00003.txt").write_text("changed\n")
    (repo.root / "new.txt").write_text("new\n")
    st = repo.status()
    assert st["world"]["modified"] == ["file-with-a-longish-name-00003.txt"] and st["world"]["added"] == ["new.txt"]
    assert loads == [_tree(repo, first)]
    repo.snapshot("second")
    repo.restore(first)  # HEAD is now a tree other than the last one stored from here: compared the long way
    loads.clear()
    repo._trees.clear()  # (this Repo keeps the trees it validated; a new process would read it)
    st = repo.status()
    assert st["clean"] and loads == [_tree(repo, first)]
