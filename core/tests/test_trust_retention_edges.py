"""Retention and maintenance at the edges: ``gc``'s grace period, what ``gc`` says it kept, what ``verify`` names.

Each test runs the real CLI in a subprocess (what a user sees) on a store made by ``agentsnap init``.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest
from agentsnap_core import Repo
from agentsnap_core.errors import InvalidInput
from agentsnap_core.format.objects import Kind
from agentsnap_core.stores.base import ANY, RefUpdate
from trust_kit import cli, new_work, snapshots


def _orphan(root: Path) -> str:
    """An object no ref names yet, written just now (what a snapshot being written beside gc has stored so far)."""
    with Repo.open(root) as repo:
        return repo.objects.put(Kind.BLOB, b"written a moment ago by a snapshot still in progress\n")


def _has(root: Path, oid: str) -> bool:
    with Repo.open(root) as repo:
        return repo.objects.has(oid)


@pytest.mark.parametrize("grace", ["nan", "-3600", "-inf"])
def test_gc_refuses_a_grace_period_that_is_not_a_number_of_seconds(tmp_path: Path, grace: str) -> None:
    """``agentsnap gc --prune nan`` (a typo'd script variable, say) deleted an unreachable object written a second
    before - what the default grace of an hour exists to keep for a snapshot being written - and exited 0
    ("removed 1 objects"): NaN compares false, so nothing counted as young. ``--prune=-3600`` reached an hour
    past now (everything counted as old) and was accepted likewise. Now: exit 2, one line, nothing removed."""
    root = new_work(tmp_path, {"a.txt": "one\n"})
    snapshots(root, ["one"])
    orphan = _orphan(root)
    code, out, err = cli(root, "gc", f"--prune={grace}", "--json")
    assert code == 2, (out, err)
    assert out == "" and "grace period must be 0 or more seconds" in err and "Traceback" not in err, err
    assert _has(root, orphan)
    code, out, err = cli(root, "gc", "--json")  # the default grace keeps it, as before
    assert code == 0 and json.loads(out)["kept_recent"] == 1 and _has(root, orphan), (out, err)


def test_repo_gc_refuses_a_grace_that_is_not_seconds(tmp_path: Path) -> None:
    """``Repo.gc("60")`` raised a bare ``TypeError`` (str minus float) deep inside gc; ``Repo.gc(True)`` ran with a
    grace of one second. Now both are refused by name before anything is read or removed."""
    root = new_work(tmp_path, {"a.txt": "one\n"})
    snapshots(root, ["one"])
    with Repo.open(root) as repo:
        for bad in ("60", True, None, float("nan")):
            with pytest.raises(InvalidInput, match="grace period"):
                repo.gc(bad)  # type: ignore[arg-type]
        assert repo.gc(0)["removed"] == 0


def test_gc_after_prune_counts_what_it_kept_in_a_recently_used_pack(tmp_path: Path) -> None:
    """An agent snapshots every turn; yesterday's snapshots are packed. ``agentsnap prune --keep-last 1`` says
    "run 'agentsnap gc' to reclaim space"; ``agentsnap gc`` reported ``"removed": 0, "kept_recent": 0`` - as if
    there were nothing to reclaim - while ``du`` still said the pruned snapshots' bytes were reclaimable: the new
    turn re-used unchanged files from the pack, which made the whole pack "recent", so its garbage stays for the
    grace period. Now ``kept_recent`` counts those objects too, and ``gc --prune now`` then frees them."""
    root = new_work(tmp_path, {f"f{i}.txt": f"{i} unchanged\n" * 200 for i in range(5)})
    snapshots(root, ["one", "two", "three"])
    assert cli(root, "gc", "--prune", "now")[0] == 0
    pack_dir = root / ".agentsnap" / "objects" / "pack"
    old = time.time() - 3 * 86400
    for p in pack_dir.glob("pack-*.pack"):
        os.utime(p, (old, old))  # written days ago
    snapshots(root, ["four"])  # re-uses f0..f4 from the pack
    code, out, err = cli(root, "prune", "--keep-last", "1", "--json")
    assert code == 0 and len(json.loads(out)["pruned"]) == 3, (out, err)
    with Repo.open(root) as repo:
        from agentsnap_core.repository.maintenance import reachable

        garbage = set(repo.objects.iter_oids()) - reachable(repo)
    assert garbage
    code, out, err = cli(root, "gc", "--json")
    assert code == 0, err
    rep = json.loads(out)
    assert rep["removed"] == 0 and rep["kept_recent"] == len(garbage), rep
    code, out, err = cli(root, "gc", "--prune", "now", "--json")
    assert code == 0 and json.loads(out)["removed"] == len(garbage), (out, err)
    assert json.loads(cli(root, "du", "--json")[1])["reclaimable"] == 0


def test_verify_names_the_ref_that_points_at_nothing(tmp_path: Path) -> None:
    """A tag left pointing at an object the store does not have (a half-copied store, a hand-edited index):
    ``agentsnap verify`` exited 1 with ``problem: snapshot abababababab: object abab... is missing from the store;
    run 'agentsnap verify'`` - not which ref names it, so there was nothing to delete or fix. Now the line names
    the ref (``refs/tags/ghost``), for a branch naming a non-snapshot object too."""
    root = new_work(tmp_path, {"a.txt": "one\n"})
    snapshots(root, ["one"])
    blob = _orphan(root)
    with Repo.open(root) as repo:
        repo.refs.update_refs([RefUpdate("refs/tags/ghost", "ab" * 32, ANY),
                               RefUpdate("refs/heads/notsnap", blob, ANY)], "damaged")
    code, out, err = cli(root, "verify")
    assert code == 1, (out, err)
    assert "refs/tags/ghost" in err and "refs/heads/notsnap" in err, err
    code, out, err = cli(root, "verify", "--json")
    assert code == 1
    problems = json.loads(out)["problems"]
    assert {p["where"] for p in problems} == {"refs/tags/ghost", "refs/heads/notsnap"}, problems
    assert all(p["where"] in p["error"] for p in problems), problems


def test_prune_keeps_the_fork_point_a_merge_of_the_fork_needs(tmp_path: Path) -> None:
    """``agentsnap fork``, work on both sides, ``agentsnap prune --keep-last 1``, ``agentsnap gc``: the fork point
    was no branch's tip any more, so prune listed it ("pruned 269353ba2748") and gc reclaimed its layers; then
    ``agentsnap merge attempt-1`` failed: "snapshot 269353ba2748 was pruned; only its record is kept ... so it
    cannot be read" - the fork could never be merged back. Now the merge base of two branches is kept."""
    root = new_work(tmp_path, {"f.txt": "a\nb\nc\nd\ne\n"})
    (base,) = snapshots(root, ["a\nb\nc\nd\ne"], path="f.txt")
    assert cli(root, "fork", "-n", "1")[0] == 0
    snapshots(root, ["A\nb\nc\nd\ne"], path="f.txt")
    assert cli(root, "switch", "attempt-1")[0] == 0
    snapshots(root, ["a\nb\nc\nd\nE"], path="f.txt")
    assert cli(root, "switch", "main")[0] == 0
    code, out, err = cli(root, "prune", "--keep-last", "1", "--dry-run", "--json")
    assert code == 0 and base not in json.loads(out)["pruned"], (out, err)
    code, out, err = cli(root, "prune", "--keep-last", "1", "--json")
    assert code == 0 and base not in json.loads(out)["pruned"], (out, err)
    assert cli(root, "gc", "--prune", "now")[0] == 0
    code, out, err = cli(root, "merge", "attempt-1")
    assert code == 0, (out, err)
    assert (root / "f.txt").read_text() == "A\nb\nc\nd\nE\n"
    assert cli(root, "verify")[0] == 0


def test_gc_after_prune_frees_what_it_says_it_dropped(tmp_path: Path) -> None:
    """``prune --keep-last 1`` then ``gc --prune now``: gc said the objects were dropped, but a block whose first
    objects were dropped was copied whole for the live ones after it, dead bytes included (the pack stayed 3.25x
    its live content: 321 KB for 99 KB)."""
    root = new_work(tmp_path, {})
    for turn in range(8):
        for i in range(30):
            (root / f"f{i}.bin").write_bytes(os.urandom(3000))
        assert cli(root, "snapshot", "-m", f"turn {turn}")[0] == 0
    assert cli(root, "gc", "--prune", "now")[0] == 0
    assert cli(root, "prune", "--keep-last", "1")[0] == 0
    code, out, err = cli(root, "gc", "--prune", "now", "--json")
    assert code == 0, err
    with Repo.open(root) as repo:
        stored = sum(len(repo.objects.get_stored(o)) for o in repo.objects.iter_oids())
    on_disk = sum(p.stat().st_size for p in (root / ".agentsnap" / "objects").rglob("*") if p.is_file())
    assert on_disk < stored * 1.1 + 4096, (on_disk, stored, json.loads(out)["packs"])


def test_gc_prune_now_during_a_merge_keeps_the_merged_content(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Old: the merge wrote its planned content outside a writer session, so a ``gc --prune now`` in another shell
    between the plan and the merge snapshot deleted it: the merge failed "object ... is missing from the store"."""
    from agentsnap_core.operations import merge as merge_mod

    root = new_work(tmp_path, {"f.txt": "a\nb\nc\nd\ne\n"})
    snapshots(root, ["a\nb\nc\nd\ne"], path="f.txt")
    assert cli(root, "fork", "-n", "1")[0] == 0
    snapshots(root, ["A\nb\nc\nd\ne"], path="f.txt")
    assert cli(root, "switch", "attempt-1")[0] == 0
    snapshots(root, ["a\nb\nc\nd\nE"], path="f.txt")
    assert cli(root, "switch", "main")[0] == 0
    real = merge_mod.plan_merge

    def plan_then_gc(*a: Any, **k: Any) -> Any:
        plan = real(*a, **k)
        with Repo.open(root) as other:
            other.gc(0)
        return plan

    monkeypatch.setattr(merge_mod, "plan_merge", plan_then_gc)
    with Repo.open(root) as repo:
        merge_mod.merge(repo, "attempt-1")
        assert repo.verify()["ok"]
    assert (root / "f.txt").read_text() == "A\nb\nc\nd\nE\n"


def test_gc_prune_now_while_an_effect_result_is_recorded_keeps_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Old: a large tool result went to the object store, then into the ledger; a ``gc --prune now`` between the two
    deleted it, so the ledger named a missing object: verify failed and a replay could not return the result."""
    from agentsnap_core.layers import effects_ledger
    from agentsnap_core.layers.effects import Effects, effect

    root = new_work(tmp_path, {"a.txt": "x\n"})
    snapshots(root, ["x"])
    real = effects_ledger.Ledger.append

    def gc_then_append(self: Any, rec: dict[str, Any], *a: Any, **k: Any) -> Any:
        if rec.get("result_ref"):
            with Repo.open(root) as other:
                other.gc(0)
        return real(self, rec, *a, **k)

    monkeypatch.setattr(effects_ledger.Ledger, "append", gc_then_append)
    with Repo.open(root) as repo:
        fx = Effects(repo)

        @effect(session=fx)
        def send(n: int) -> dict[str, str]:
            return {"body": "y" * 200_000}

        with fx.step(0):
            send(1)
        monkeypatch.undo()
        report = repo.verify()
        assert report["ok"], report["problems"]


def test_prune_says_which_pruned_snapshots_a_tag_names(tmp_path: Path) -> None:
    """``tag v1 HEAD~4; prune --keep-last 2`` printed "pruned cb7dca5023ac" among the others and nothing more; then
    ``restore v1`` was refused ("snapshot ... was pruned"): the release the user had named was gone in silence. Now
    the line names the tags, a warning says what it means and how to keep them, ``--json`` has ``pruned_tagged``."""
    root = new_work(tmp_path, {"a.txt": "0\n"})
    ids = snapshots(root, [f"{i}\n" for i in range(1, 7)])
    for tag in ("v1", "rc1"):
        assert cli(root, "tag", tag, ids[1])[0] == 0
    code, out, err = cli(root, "prune", "--keep-last", "2", "--dry-run")
    assert code == 0 and f"would prune {ids[1][:12]} (tag rc1, v1)" in out, out
    assert "tagged (rc1, v1)" in err and "--keep-tagged" in err, err
    code, out, err = cli(root, "prune", "--keep-last", "2", "--json")
    assert code == 0, err
    assert json.loads(out)["pruned_tagged"] == {ids[1]: ["rc1", "v1"]}, out
    code, out, err = cli(root, "prune", "--keep-last", "2")  # nothing left to prune: nothing to say
    assert code == 0 and err == "", err
