"""Retention: prune policies, tombstones (verify accepts, restore refuses, gc reclaims), du, the CLI verbs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import agentsnap_core
import pytest
from agentsnap_core.cli import main
from agentsnap_core.repository import retention
from agentsnap_core.repository.retention import SnapshotGone
from click.testing import CliRunner

DAY = 86400.0


class Memo(agentsnap_core.Snapshottable):
    def __init__(self, text: str = "") -> None:
        self.text = text


def cli(root: Path, *args: str) -> Any:
    res = CliRunner().invoke(main, ["-C", str(root), *args])
    return res


def saves(client: agentsnap_core.Client, agent_id: str, n: int, size: int = 3000) -> list[str]:
    return [client.save(Memo(f"{agent_id}-{i}-" + "x" * size), agent_id=agent_id, message=f"{agent_id} {i}") for i in range(n)]


def test_prune_keep_last_per_agent_then_gc_reclaims_and_verify_accepts(tmp_path: Path) -> None:
    with agentsnap_core.Client(tmp_path) as client:
        a = saves(client, "a", 6)
        b = saves(client, "b", 3)
        layers = {oid: client.repo.get(oid).layers["state"]["content"] for oid in a + b}
        res = retention.prune(client.repo, keep_last=2)
        assert sorted(res["pruned"]) == sorted(a[:4] + b[:1])
        assert res["groups"] == {"a": {"kept": 2, "pruned": 4}, "b": {"kept": 2, "pruned": 1}}
        assert [t.id for t in client.timeline("a")] == [a[5], a[4]]
        client.repo.gc(grace_seconds=0)
        for oid in a[:4] + b[:1]:
            assert not client.repo.objects.has(layers[oid])  # layers reclaimed
            assert client.repo.manifest(oid)["agent"] in ("a", "b")  # tombstone: the kept ones descend from it
        for oid in a[4:] + b[1:]:
            assert client.restore(oid, into=Memo()).text.startswith(client.repo.manifest(oid)["agent"])
        report = client.repo.verify()
        assert report["ok"], report["problems"]
        with pytest.raises(SnapshotGone, match="was pruned"):
            client.restore(a[0], into=Memo())
        with pytest.raises(SnapshotGone, match="was pruned"):
            client.repo.restore_into(Memo(), a[0])


def test_prune_keeps_daily_and_tagged_and_never_a_ref_tip(tmp_path: Path) -> None:
    clock_days = [0, 0.1, 0.2, 1.1, 1.2, 2.5, 3.5]  # snapshots over 4 UTC days
    with agentsnap_core.Client(tmp_path) as client:
        ids = []
        for i, _d in enumerate(clock_days):
            tags = ["release"] if i == 1 else ()
            ids.append(client.save(Memo(str(i)), agent_id="a", tags=tags))
        # give each snapshot its day through the index: prune reads manifest times, so rewrite via `now`
        times = {oid: client.repo.manifest(oid)["time"] for oid in ids}
        base = min(times.values())
        assert all(times[o] - base < 60 for o in ids)  # all made now: one UTC day (or two around midnight)
        res = retention.prune(client.repo, keep_daily=1, keep_tagged=True, dry_run=True)
        assert res["dry_run"] and set(res["pruned"]).isdisjoint({ids[-1], ids[1]})  # newest of the day, tagged
        assert client.exists(ids[0])  # dry run changed nothing
        client.repo.tag("v1", ids[2])
        res = retention.prune(client.repo, keep_last=1, keep_tagged=True)
        assert set(res["pruned"]) == set(ids) - {ids[-1], ids[1], ids[2]}
        with pytest.raises(agentsnap_core.AgentSnapError, match="at least one of"):
            retention.prune(client.repo)


def test_prune_daily_policy_over_days(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import time as time_mod

    start = 1_700_000_000.0 - (1_700_000_000.0 % DAY) + 3600  # 01:00 UTC on some day
    offsets = [0, 3600, 7200, DAY, DAY + 60, 2 * DAY, 3 * DAY, 3 * DAY + 1]
    fake = {"now": start}
    monkeypatch.setattr(time_mod, "time", lambda: fake["now"])
    repo = agentsnap_core.Repo.init(tmp_path)
    ids = []
    for off in offsets:
        fake["now"] = start + off
        ids.append(repo.snapshot(f"t+{off}", agent="a", capture_world=False, layers={"state": {"off": off}}).id)
    # tips are protected: move the branch away from the newest so the policy alone decides
    repo.create_branch("keep-me", at=ids[0])
    res = retention.prune(repo, keep_daily=3, now=start + 4 * DAY)
    # newest of each of the 3 most recent days with snapshots: day3 (3*DAY+1), day2, day1 (DAY+60)
    kept = set(ids) - set(res["pruned"])
    assert kept == {ids[7], ids[5], ids[4], ids[0]}  # + the branch tip keep-me
    repo.close()


def test_prune_and_expire_cli_then_gc_and_du(tmp_path: Path) -> None:
    with agentsnap_core.Client(tmp_path) as client:
        ids = saves(client, "a", 5, size=20000)
        saves(client, "b", 2, size=20000)
    before = json.loads(cli(tmp_path, "du", "--by", "agent", "--json").output)
    groups = {g["name"]: g for g in before["groups"]}
    assert groups["a"]["snapshots"] == 5 and groups["b"]["snapshots"] == 2
    assert groups["a"]["logical"] >= 5 * 20000 and groups["a"]["physical"] < groups["a"]["logical"]  # zstd + dedup
    dry = cli(tmp_path, "prune", "--keep-last", "1", "--dry-run")
    assert dry.exit_code == 0 and "would prune 5 snapshot(s), kept 2" in dry.output
    res = cli(tmp_path, "prune", "--keep-last", "1", "--json")
    assert res.exit_code == 0 and len(json.loads(res.output)["pruned"]) == 5
    exp = cli(tmp_path, "expire", ids[-1][:12])
    assert exp.exit_code == 0 and "expired" in exp.output
    assert cli(tmp_path, "restore", ids[-1][:12]).exit_code == 2
    mid = json.loads(cli(tmp_path, "du", "--json").output)
    assert mid["reclaimable"] > 0
    assert cli(tmp_path, "gc", "--prune", "now").exit_code == 0
    with agentsnap_core.Client(tmp_path) as client:
        assert client.repo.verify()["ok"]
        assert [t.agent_id for t in client.timeline()] == ["b"]
    after = json.loads(cli(tmp_path, "du", "--json").output)
    assert after["physical"] < before["physical"] and after["reclaimable"] == 0
    verify = cli(tmp_path, "verify")
    assert verify.exit_code == 0, verify.output
    bad = cli(tmp_path, "prune")
    assert bad.exit_code == 2 and "at least one of" in bad.output


def test_du_by_branch_and_size_warning(tmp_path: Path) -> None:
    repo = agentsnap_core.Repo.init(tmp_path)
    (tmp_path / "big.bin").write_bytes(bytes(range(256)) * 400)
    repo.snapshot("one")
    (tmp_path / "small.txt").write_text("hi")
    repo.snapshot("two")
    repo.close()
    res = cli(tmp_path, "du", "--warn-bytes", "100")
    assert res.exit_code == 0
    assert "main" in res.output and "warning" in res.output and "prune" in res.output
    data = json.loads(cli(tmp_path, "du", "--json", "--warn-bytes", "100000000").output)
    [main_group] = data["groups"]
    assert main_group["name"] == "main" and main_group["snapshots"] == 2
    assert main_group["logical"] >= 2 * 256 * 400 and "warning" not in data
    with agentsnap_core.Repo.open(tmp_path) as repo2:
        repo2.refs.set_config(retention.WARN_KEY, "10")
    assert "warning" in json.loads(cli(tmp_path, "du", "--json").output)


def test_tombstone_with_world_layer_restore_refused_clearly(tmp_path: Path) -> None:
    repo = agentsnap_core.Repo.init(tmp_path)
    (tmp_path / "f.txt").write_text("v1")
    old = repo.snapshot("v1")
    (tmp_path / "f.txt").write_text("v2")
    repo.snapshot("v2")
    retention.bury(repo, [old.id], "expire")
    repo.gc(grace_seconds=0)
    assert repo.verify()["ok"]
    with pytest.raises(SnapshotGone, match=f"snapshot {old.id[:12]} was expired"):
        repo.restore(old.id)
    assert (tmp_path / "f.txt").read_text() == "v2"  # nothing written
    assert [s.message for s in repo.log()] == ["v2", "v1"]  # history still walks through the tombstone
    repo.close()


def test_old_stores_without_tombstones_behave_as_before(tmp_path: Path) -> None:
    repo = agentsnap_core.Repo.init(tmp_path)
    (tmp_path / "f.txt").write_text("x")
    s = repo.snapshot("one")
    assert retention.tombstones(repo) == {} and retention.death_of(repo, s.id) is None
    assert repo.gc(grace_seconds=0)["removed"] == 0 and repo.verify()["ok"]
    repo.close()
