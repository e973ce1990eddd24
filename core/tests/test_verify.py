"""verify catches flipped bytes in any object and refs to missing objects."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from agentsnap_core import ObjectCorrupt, Repo
from agentsnap_core.cli import main
from agentsnap_core.format.objects import Kind
from agentsnap_core.stores.base import RefUpdate
from click.testing import CliRunner


def _populated(repo: Repo) -> str:
    (repo.root / "small.txt").write_text("small file\n" * 10)
    (repo.root / "large.bin").write_bytes(os.urandom(400 * 1024))
    repo.append_message("user", "hi")
    return repo.snapshot("s").id


def _flip(repo: Repo, oid: str, offset_from_end: int = 1) -> None:
    path = Path(repo.objects.loose_copy(oid))  # a packed object: its loose copy, which reads take first
    os.chmod(path, 0o644)
    data = bytearray(path.read_bytes())
    data[-offset_from_end] ^= 0x01
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("kind", [Kind.BLOB, Kind.CHUNKS, Kind.MANIFEST])
def test_flipped_byte_in_any_object_kind_is_caught(repo: Repo, kind: int) -> None:
    _populated(repo)
    assert repo.verify()["ok"]
    victims = [o for o in repo.objects.iter_oids() if repo.objects.get(o)[0] == kind]
    assert victims
    for victim in victims[:3]:
        _flip(repo, victim)
        report = repo.verify()
        assert not report["ok"]
        assert victim in {p["id"] for p in report["problems"]}
        with pytest.raises(ObjectCorrupt) as info:
            repo.objects.get(victim)
        assert info.value.oid == victim
        _flip(repo, victim)  # flip back
    assert repo.verify()["ok"]


def test_every_single_object_flip_is_detected_through_the_cli(repo: Repo) -> None:
    _populated(repo)
    runner = CliRunner()
    for victim in list(repo.objects.iter_oids()):
        _flip(repo, victim, offset_from_end=3)
        res = runner.invoke(main, ["-C", str(repo.root), "verify", "--json"])
        assert res.exit_code == 1, victim
        _flip(repo, victim, offset_from_end=3)
    assert runner.invoke(main, ["-C", str(repo.root), "verify"]).exit_code == 0


def test_ref_to_missing_object_is_caught(repo: Repo) -> None:
    snap_id = _populated(repo)
    repo.objects.delete(snap_id)  # loose or packed
    report = repo.verify()
    assert not report["ok"]
    assert any(p["id"] == snap_id for p in report["problems"])
    res = CliRunner().invoke(main, ["-C", str(repo.root), "verify"])
    assert res.exit_code == 1


def test_refs_cannot_be_pointed_at_missing_objects(repo: Repo) -> None:
    _populated(repo)
    from agentsnap_core import AgentSnapError
    from agentsnap_core.format.objects import digest

    with pytest.raises(AgentSnapError, match="missing object"):
        repo.update_refs([RefUpdate("refs/heads/x", digest(Kind.MANIFEST, b"nope"), None)], "bad")


def test_gc_keeps_reachable_and_drops_unreachable(repo: Repo) -> None:
    _populated(repo)
    orphan = repo.objects.put(Kind.BLOB, b"nobody references me")
    assert repo.gc(grace_seconds=3600)["removed"] == 0  # young objects are protected
    report = repo.gc(grace_seconds=0)
    assert report["removed"] == 1 and not repo.objects.has(orphan)
    assert repo.verify()["ok"]
