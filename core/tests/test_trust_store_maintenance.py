"""The local store's maintenance verbs at the edges: ``gc``, ``verify``, the reflog.

Each test runs the real CLI in a subprocess (what a user sees) on a store made by ``agentsnap init``; the setup that
the CLI cannot make (a snapshot with a TTL, as ``agentsnap_core.Client.save(ttl=...)`` writes it) uses the Python API.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from agentsnap_core import Repo
from trust_kit import cli, new_work, snapshots


def _expired_on_a_deleted_branch(root: Path) -> str:
    """A snapshot with a TTL that has run out, on a branch since deleted: only the reflog names it now."""
    with Repo.open(root) as repo:
        base = repo.get("HEAD").id
        (root / "big.bin").write_bytes(os.urandom(200_000))
        snap = repo.snapshot("scratch work", ref="refs/heads/scratch", parents=[base], move_head=False,
                             meta={"expires_at": time.time() - 1})
    assert cli(root, "branch", "-d", "scratch")[0] == 0
    return snap.id


def test_gc_of_an_expired_snapshot_only_the_reflog_names_leaves_the_store_verifiable(tmp_path: Path) -> None:
    """A snapshot whose TTL ran out on a branch since deleted: the first ``gc --prune now`` reclaimed it whole,
    manifest too, but left the reflog entry that named it, with no mark saying it had expired. From then on
    ``agentsnap verify`` exited 1 ("problem: snapshot …: object … is missing from the store; run 'agentsnap verify'
    (named by reflog #3 of refs/heads/scratch)") and every ``gc`` was refused ("gc refused: the store has 1
    problem(s); run 'agentsnap verify'"), for good: nothing removes a reflog entry. Now gc marks such a snapshot
    expired before it reclaims it (as ``agentsnap expire`` would), so verify is ok, gc runs, and ``show`` of the id
    says it expired."""
    root = new_work(tmp_path, {"a.txt": "a\n"})
    snapshots(root, ["one"])
    gone = _expired_on_a_deleted_branch(root)
    code, out, err = cli(root, "gc", "--prune", "now", "--json")
    assert code == 0, err
    assert json.loads(out)["removed"] > 0  # the expired snapshot's files went
    code, out, err = cli(root, "verify")
    assert code == 0 and "ok" in out, (out, err)
    code, out, err = cli(root, "gc", "--prune", "now")
    assert code == 0, (out, err)
    code, out, err = cli(root, "show", gone)
    assert code == 2 and "expired" in err and "missing from the store" not in err, (out, err)
    assert cli(root, "restore", "HEAD")[0] == 0


def _on_side_branch(root: Path, files: dict[str, bytes], message: str) -> str:
    """A snapshot of ``files`` (with a.txt) on branch ``side``, made beside main (as a fork's worker does)."""
    with Repo.open(root) as repo:
        tip = repo.refs.get_ref("refs/heads/side") or repo.get("HEAD").id
        for name, data in files.items():
            (root / name).write_bytes(data)
        snap = repo.snapshot(message, ref="refs/heads/side", parents=[tip], move_head=False)
        for name in files:
            (root / name).unlink()
        return snap.id


def _lose(root: Path, oid: str) -> None:
    """The object's file is gone (a disk error, a user's rm in .agentsnap/objects)."""
    with Repo.open(root) as repo:
        repo.objects.delete(oid)
        assert not repo.objects.has(oid)


def test_a_lost_snapshot_the_reflog_names_can_be_let_go(tmp_path: Path) -> None:
    """A snapshot on a side branch was lost (its manifest's file gone). Deleting the branch did not help: its reflog
    entries still named the snapshot, ``verify`` kept exiting 1 ("… is missing from the store; run 'agentsnap
    verify' (named by reflog #4 of refs/heads/side)") and ``gc`` kept refusing ("gc refused: the store has 1
    problem(s)"), and nothing removed a reflog entry (``expire --reflog``: "No such option: --reflog"). Now
    ``agentsnap expire --reflog`` forgets ids of snapshots that are gone (at any age; -n says so first and changes
    nothing), the rest of the reflog stays, and verify and gc work again."""
    root = new_work(tmp_path, {"a.txt": "a\n"})
    snapshots(root, ["one"])
    lost = _on_side_branch(root, {"b.txt": b"side\n"}, "side work")
    keep = snapshots(root, ["two"])[0]
    _lose(root, lost)
    assert cli(root, "branch", "-d", "side")[0] == 0
    code, out, err = cli(root, "verify")
    assert code == 1 and "agentsnap expire --reflog" in err, (out, err)  # the way out, named
    code, out, err = cli(root, "expire", "--reflog", "-n")
    assert code == 0 and f"would forget 1 snapshot(s) the reflog named that are gone: {lost[:12]}" in out, (out, err)
    assert cli(root, "verify")[0] == 1  # (a dry run)
    code, out, err = cli(root, "expire", "--reflog", "--json")
    assert code == 0, err
    rep = json.loads(out)
    assert rep["stale"] == [lost] and rep["dropped"] >= 1 and rep["kept"] > 0, rep
    code, out, err = cli(root, "verify")
    assert code == 0 and "ok" in out, (out, err)
    assert cli(root, "gc", "--prune", "now")[0] == 0
    code, out, _ = cli(root, "log", "--json")
    assert [s["id"] for s in json.loads(out)][0] == keep


def test_expire_reflog_releases_what_a_deleted_branch_kept(tmp_path: Path) -> None:
    """``branch -d`` of a branch whose work is not wanted, then ``gc --prune now``: "removed 0 objects", for good -
    the reflog keeps every snapshot a ref ever named, nothing said so, and no verb expired it ("No such option:
    --reflog"). Now ``gc --json`` counts the snapshots only the reflog keeps (``kept_by_reflog``), ``agentsnap
    expire --reflog --older-than now`` drops the entries and the next gc reclaims the branch's files;
    what the branches still name is untouched, and a bad age is one line, exit 2, nothing dropped. The snapshots only
    the dropped entries kept are marked expired first (``show`` says so; indexes that name snapshots drop them)."""
    root = new_work(tmp_path, {"a.txt": "a\n"})
    snapshots(root, ["one"])
    side = _on_side_branch(root, {"big.bin": os.urandom(300_000)}, "side work")
    _on_side_branch(root, {"c.txt": b"c\n"}, "side: big.bin dropped")
    keep = snapshots(root, ["two"])[0]
    assert cli(root, "branch", "-d", "side")[0] == 0
    code, out, err = cli(root, "gc", "--prune", "now", "--json")
    assert code == 0 and json.loads(out)["kept_by_reflog"] == 2, (out, err)  # what keeps the space: said
    with Repo.open(root) as repo:
        assert repo.objects.has(side)  # the reflog keeps it: the undo point after 'branch -d'
    for bad in ("-1", "nan", "soon"):
        code, out, err = cli(root, "expire", "--reflog", "--older-than", bad)
        assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, (bad, out, err)
    code, out, err = cli(root, "expire", "--reflog", "--older-than", "now", "-n")
    assert code == 0 and "would mark 2 snapshot(s) only those entries kept as expired" in out, (out, err)
    code, out, err = cli(root, "expire", "--reflog", "--older-than", "now", "--json")
    assert code == 0 and len(json.loads(out)["expired"]) == 2 and side in json.loads(out)["expired"], (out, err)
    code, out, err = cli(root, "gc", "--prune", "now", "--json")
    assert code == 0 and json.loads(out)["removed"] > 0 and json.loads(out)["kept_by_reflog"] == 0, (out, err)
    with Repo.open(root) as repo:
        assert not repo.objects.has(side)
    code, out, err = cli(root, "show", side)
    assert code == 2 and "expired" in err, (out, err)  # marked before its entries went: said, never "unknown"
    code, out, err = cli(root, "verify")
    assert code == 0 and "ok" in out, (out, err)
    assert cli(root, "restore", keep)[0] == 0 and (root / "a.txt").read_text() == "two\n"


@pytest.mark.parametrize("how", ["deleted", "emptied"])
def test_a_store_whose_index_was_lost_keeps_its_snapshots(tmp_path: Path, how: str) -> None:
    """``rm .agentsnap/index.sqlite*`` (taken for a cache, or left out of a copy of the store), or the file emptied
    (``: > index.sqlite``, a copy that wrote nothing): the next command made a new, empty index in silence; ``agentsnap verify`` said "checked 12 objects, 0 refs: ok", and ``agentsnap gc
    --prune now`` said "removed 12 objects" - every snapshot, deleted as unreachable. Now the store indexes the
    snapshots it finds among its objects again and names each one no other has as a parent by a branch
    ``lost-found/<id>`` (said on stderr by the command that did it): log lists them, gc keeps them, restore brings
    their files back."""
    root = new_work(tmp_path, {"a.txt": "a\n"})
    (root / "big.bin").write_bytes(os.urandom(200_000))
    one, two = snapshots(root, ["one", "two"])
    assert cli(root, "branch", "side", one)[0] == 0
    assert cli(root, "switch", "side")[0] == 0
    three = snapshots(root, ["three"])[0]
    for name in os.listdir(root / ".agentsnap"):
        if name.startswith("index.sqlite"):
            os.unlink(root / ".agentsnap" / name)
    if how == "emptied":
        (root / ".agentsnap" / "index.sqlite").write_bytes(b"")
    code, out, err = cli(root, "branch")
    assert code == 0 and f"lost-found/{two[:12]}" in out and f"lost-found/{three[:12]}" in out, (out, err)
    assert "index.sqlite) was missing" in err and "lost-found/" in err, err  # said once, when it happened
    code, out, err = cli(root, "status")
    assert "was missing" not in err, err
    code, out, err = cli(root, "gc", "--prune", "now", "--json")
    assert code == 0 and json.loads(out)["removed"] == 0, (out, err)
    code, out, err = cli(root, "verify")
    assert code == 0 and "ok" in out, (out, err)
    code, out, _ = cli(root, "log", "--all", "--json")
    assert {s["id"] for s in json.loads(out)} == {one, two, three}, out
    assert cli(root, "restore", f"lost-found/{two[:12]}")[0] == 0
    assert (root / "a.txt").read_text() == "two\n" and (root / "big.bin").stat().st_size == 200_000


@pytest.mark.parametrize("key_at_recovery", [True, False], ids=["key-given", "no-key"])
def test_a_lost_index_of_an_encrypted_store_keeps_it_encrypted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                               key_at_recovery: bool) -> None:
    """The encryption setting and the key's fingerprint lived in ``index.sqlite``. After ``rm .agentsnap/index.sqlite*``
    the store was re-indexed, but as a plain store: the next ``snapshot`` wrote its files and manifest **in clear**
    (``agentsnap log`` and ``show`` then read it without any key), and a wrong key was no longer refused. Now the
    recovery sees the sealed objects and keeps the store encrypted: without the key every command is refused by
    name, with another key too, and what is written next is sealed."""
    crypto = pytest.importorskip("agentsnap_core.format.crypto")
    key, other = crypto.generate_key(), crypto.generate_key()
    monkeypatch.setenv(crypto.KEY_ENV, key)
    root = new_work(tmp_path, {"plan.txt": "the launch codes\n"})
    with Repo.open(root) as repo:
        crypto.enable_encryption(repo)
    one = snapshots(root, ["one"], "plan.txt")[0]
    for name in os.listdir(root / ".agentsnap"):
        if name.startswith("index.sqlite"):
            os.unlink(root / ".agentsnap" / name)
    if not key_at_recovery:
        monkeypatch.delenv(crypto.KEY_ENV)
        code, out, err = cli(root, "log", "--all")
        assert code != 0 and crypto.KEY_ENV in err, (code, out, err)
        assert "Traceback" not in err, err
        monkeypatch.setenv(crypto.KEY_ENV, key)
    (root / "plan.txt").write_text("the new launch codes\n")
    code, out, err = cli(root, "snapshot", "-m", "two")
    assert code == 0, err
    two = out.strip()

    monkeypatch.delenv(crypto.KEY_ENV)
    for args in (["log", "--all"], ["show", two]):
        code, out, err = cli(root, *args)
        assert code != 0 and crypto.KEY_ENV in err and "two" not in out, (args, code, out, err)
    monkeypatch.setenv(crypto.KEY_ENV, other)
    code, out, err = cli(root, "log", "--all")
    assert code != 0 and "not this store's key" in err, (code, out, err)
    monkeypatch.setenv(crypto.KEY_ENV, key)
    code, out, _ = cli(root, "log", "--all", "--json")
    assert code == 0 and {s["id"] for s in json.loads(out)} == {one, two}, out
    stored = b"".join(p.read_bytes() for p in (root / ".agentsnap" / "objects").rglob("*") if p.is_file())
    assert b"launch codes" not in stored and b"two" not in stored
    code, out, err = cli(root, "verify")
    assert code == 0 and "ok" in out, (out, err)


def _lose_index(store_dir: Path) -> None:
    for name in os.listdir(store_dir):
        if name.startswith("index.sqlite"):
            os.unlink(store_dir / name)


def test_a_lost_index_keeps_the_stores_settings(tmp_path: Path) -> None:
    """The store's settings lived only in ``index.sqlite``. After ``rm .agentsnap/index.sqlite*`` the snapshots came
    back (``lost-found/`` branches) but every setting was gone: ``world.include_git`` said false again, so the next
    snapshot left ``.git`` out and a restore could no longer bring git's history back; the remote ``team`` was
    unknown (``push team``: "no remote named 'team'"); the store stopped signing its snapshots. Now the settings are
    kept beside the index as well (``config.json``, written with each change) and a new index takes them back."""
    crypto = pytest.importorskip("agentsnap_core.format.crypto")
    root = new_work(tmp_path, {"a.txt": "a\n"})
    public = crypto.generate_signing_key(tmp_path / "sign.pem")
    for args in (["config", "world.include_git", "true"], ["config", "world.ignore", "*.log\nbuild/"],
                 ["remote", "add", "team", (tmp_path / "team").as_uri()]):
        assert cli(root, *args)[0] == 0
    with Repo.open(root) as repo:
        crypto.enable_signing(repo, tmp_path / "sign.pem")
    snapshots(root, ["one"])
    _lose_index(root / ".agentsnap")
    code, out, err = cli(root, "config", "world.include_git")
    assert code == 0 and out.strip().endswith("true"), (out, err)
    assert "settings" in err and "config.json" in err, err  # the recovery says what came back and from where
    code, out, err = cli(root, "config", "world.ignore")
    assert "*.log" in out and "build/" in out, (out, err)
    code, out, err = cli(root, "remote", "list")
    assert code == 0 and "team" in out, (out, err)
    two = snapshots(root, ["two"])[0]
    with Repo.open(root) as repo:
        assert crypto.check_manifest(two, repo.manifest(two), [public]) == public
    assert cli(root, "push", "team", "main")[0] == 0


def test_a_checkout_bound_to_a_shared_store_keeps_its_binding_when_its_index_is_lost(tmp_path: Path) -> None:
    """A directory whose snapshots live in a shared store (``Repo.init(store_url=...)``, the Claude Code plugin's
    ``store_url``) keeps only its binding and HEADs in its own ``index.sqlite``. With that file lost, the next command
    opened the directory's empty local store in silence: ``agentsnap log`` said "no snapshot yet on this branch" (the
    team's history gone, as far as the user could see) and the next ``snapshot`` wrote a parentless snapshot into the
    local directory, never reaching the shared store. Now the binding comes back with the settings; the command says
    so, log shows the shared history and the next snapshot lands on it."""
    shared = (tmp_path / "shared").as_uri()
    root = tmp_path / "work"
    root.mkdir()
    (root / "a.txt").write_text("one\n")
    with Repo.init(root, store_url=shared) as repo:
        one = repo.snapshot("one").id
    _lose_index(root / ".agentsnap")
    code, out, err = cli(root, "log", "--json")
    assert code == 0 and [s["id"] for s in json.loads(out)] == [one], (out, err)
    assert "index.sqlite" in err and "config.json" in err, err
    two = snapshots(root, ["two"])[0]
    with Repo.open(root) as repo:
        assert repo.get(two).parents == [one]
    with Repo.init(tmp_path / "elsewhere", store_url=shared) as other:  # a second checkout of the shared store
        assert other.get("main").id == two


def test_a_lost_index_of_an_encrypted_store_read_with_its_key_names_only_the_tip(tmp_path: Path,
                                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """An encrypted store whose index was lost, re-indexed by a command run with the key: the recovery could not read
    a sealed manifest, so it knew no snapshot's parents and gave every snapshot its own ``lost-found/`` branch (ten
    snapshots, ten branches to sort out by hand). Now it reads them with the key: one branch, at the tip."""
    crypto = pytest.importorskip("agentsnap_core.format.crypto")
    monkeypatch.setenv(crypto.KEY_ENV, crypto.generate_key())
    root = new_work(tmp_path, {"plan.txt": "v0\n"})
    with Repo.open(root) as repo:
        crypto.enable_encryption(repo)
    ids = snapshots(root, ["one", "two", "three"], "plan.txt")
    _lose_index(root / ".agentsnap")
    code, out, err = cli(root, "branch")
    assert code == 0, err
    assert [line.split()[-2] if line.startswith("*") else line.split()[0] for line in out.splitlines()] == [
        f"lost-found/{ids[-1][:12]}"], out
    code, out, _ = cli(root, "log", f"lost-found/{ids[-1][:12]}", "--json")
    assert [s["id"] for s in json.loads(out)] == ids[::-1], out
