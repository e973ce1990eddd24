"""The resident process keeps each tree's stat cache in memory (layers/world.py, "stat caches kept in memory"): its
children inherit it at the fork instead of decoding the file (~70 ms for 100k files), and hand back only what they
changed instead of writing it whole (~30 ms), which the parent applies and writes while the next child runs.

A stat cache is only a cache, but a wrong one means a wrong snapshot: these tests drive the real resident process
(``AGENTSNAP_RESIDENT=1``) through random changes, commands run without it in between (another writer of the file),
and a store deleted and made again under it, and check every snapshot against a full walk of the tree. Behaviour
only; the time saved is benchmarks/scale_bench.py's."""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from agentsnap_core.layers import world
from test_cli_resident import env  # noqa: F401 - the resident process in the test's own folder
from test_journal import OPS, _mutate, _truth, build_tree

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the journal is inotify's, the resident "
                                "process forks")


def run(root: Path, e: dict[str, str], *args: str, resident: bool = True) -> str:
    proc = subprocess.run([sys.executable, "-m", "agentsnap_core", *args], cwd=root, capture_output=True, text=True,
                          env=dict(e, AGENTSNAP_RESIDENT="1" if resident else "0"), timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def handed_over(e: dict[str, str]) -> list[dict]:
    """What the last resident commands handed their parent (taken when the next command is forked)."""
    out = []
    for f in Path(e["AGENTSNAP_RESIDENT_DIR"]).glob("statcache-*.req"):
        out += world._docs(f.read_bytes())
    return out


def tree_of(root: Path, snap_id: str) -> list[world.Entry]:
    from agentsnap_core import Repo

    with Repo.open(root) as repo:
        return repo.world_entries(repo.get(snap_id))


@pytest.mark.parametrize("seed", range(int(os.environ.get("JSEEDS", 3))))
def test_every_snapshot_of_a_child_that_used_the_kept_cache_equals_a_full_walk(
    tmp_path: Path, env: dict, seed: int  # noqa: F811 - the fixture imported above
) -> None:
    root = tmp_path / "tree"
    build_tree(root)
    run(root, env, "init", resident=False)
    rng = random.Random(seed)
    ops = [op for op in OPS if op not in ("move_in", "out_and_back")]  # (they make a sibling of the tree)
    deltas = 0
    for n in range(30):
        if n > 2:
            _mutate(root, rng, n, ops)
        resident = not (n > 5 and rng.random() < 0.15)  # now and then a command without it: another writer
        snap = json.loads(run(root, env, "snapshot", "-m", f"s{n}", "--json", resident=resident))
        entries, left_out, special, git_dirs = _truth(root)
        assert tree_of(root, snap["id"]) == entries, f"seed {seed}, round {n}"
        assert (snap["world"]["left_out"], snap["world"]["not_captured"], snap["world"]["git_not_captured"]) == (
            left_out, special, git_dirs), f"seed {seed}, round {n}"
        deltas += sum(1 for d in handed_over(env) if "base" in d)
        status = json.loads(run(root, env, "status", "--json", resident=rng.random() < 0.8))
        assert status["clean"] and status["world"] == {"added": [], "modified": [], "deleted": [], "mode": []}, n
    assert deltas >= 10  # the children did use the kept cache (they handed over changes, not whole files)
    run(root, env, "resident", "stop", resident=False)  # its last changes written before it ends
    assert "ok" in run(root, env, "verify", resident=False)
    snap = json.loads(run(root, env, "snapshot", "-m", "after", "--json", resident=False))
    assert tree_of(root, snap["id"]) == _truth(root)[0]  # from the stat cache file it left


def test_a_store_deleted_and_made_again_under_the_resident_process_gets_no_kept_cache(
    tmp_path: Path, env: dict  # noqa: F811 - the fixture imported above
) -> None:
    root = tmp_path / "tree"
    build_tree(root)
    run(root, env, "init", resident=False)
    for n in range(4):  # the resident process keeps the cache from the second command on
        (root / "top.txt").write_text(f"top {n}")
        run(root, env, "snapshot", "-m", f"s{n}")
    assert any("base" in d for d in handed_over(env))
    shutil.rmtree(root / ".agentsnap")  # (git clean -fdx): its objects are gone; the kept cache names them
    run(root, env, "init", resident=False)
    for n in range(3):
        (root / "top.txt").write_text(f"again {n}")
        snap = json.loads(run(root, env, "snapshot", "-m", f"again {n}", "--json"))
        assert tree_of(root, snap["id"]) == _truth(root)[0]
        if n == 0:  # nothing of the cache kept for the deleted store: every file read and stored again
            assert snap["world"]["hashed"] == snap["world"]["files"] == 41, snap
            assert json.loads(run(root, env, "verify", "--json", resident=False))["ok"]  # every object named is there
    (root / "top.txt").write_text("last")
    run(root, env, "snapshot", "-m", "last")  # its change is handed over, to be written after the next fork
    shutil.rmtree(root / ".agentsnap")
    other = tmp_path / "other"
    other.mkdir()
    run(other, env, "init", resident=False)
    run(other, env, "status")  # the next fork: the parent takes that change, then would write the cache it keeps
    run(root, env, "resident", "stop", resident=False)
    assert not (root / ".agentsnap").exists()  # never: its folder is gone


def test_a_garbled_or_foreign_hand_over_is_ignored(tmp_path: Path) -> None:
    path = tmp_path / "statcache.msgpack"
    cache = world.StatCache({"a": [1, 2, 3, 4, 0o100644, "0" * 64, False]}, dirty=True)
    cache._write(path)
    world.KEPT.clear()
    try:
        (tmp_path / "statcache.msgpack.kept").write_text("tok")
        world.KEPT[str(path)] = world._Kept("tok", "g1", world.StatCache._read(path))
        for data in (b"\xc1garbage", world.pack_plain({"v": 1, "path": str(path), "base": "other", "gen": "g2",
                                                        "e": {"b": [1, 2, 3, 4, 0o100644, "1" * 64, False]}, "r": []})):
            (tmp_path / "h.req").write_bytes(data)
            world.take_handoff(str(tmp_path / "h.req"))
            assert world.KEPT[str(path)].gen == "g1" and list(world.KEPT[str(path)].cache.entries) == ["a"]
        (tmp_path / "h.req").write_bytes(world.pack_plain({"v": 1, "path": str(path), "base": "g1", "gen": "g2",
                                                           "e": {"b": [1, 2, 3, 4, 0o100644, "1" * 64, False]},
                                                           "r": ["a"], "t": None, "j": None}))
        world.take_handoff(str(tmp_path / "h.req"))
        kept = world.KEPT[str(path)]
        assert kept.gen == "g2" and list(kept.cache.entries) == ["b"] and kept.unwritten
        world.flush_kept()
        assert list(world.StatCache._read(path).entries) == ["b"]
        (tmp_path / "statcache.msgpack.kept").unlink()  # (its store deleted): dropped, the file left as it is
        kept.unwritten = True
        world.flush_kept()
        assert str(path) not in world.KEPT
    finally:
        world.KEPT.clear()
