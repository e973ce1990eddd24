"""Encryption at rest (AES-GCM, key outside the store) and signed snapshots (Ed25519)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from agentsnap_core import Repo
from agentsnap_core.errors import EncryptedObject, InvalidInput, ObjectCorrupt, UntrustedSnapshot
from agentsnap_core.format import objects
from agentsnap_core.operations import remote
from agentsnap_core.operations.remote import add_remote, push

crypto = pytest.importorskip("agentsnap_core.format.crypto")
SECRET_TEXT = b"the launch codes are 0000 " * 50


@pytest.fixture(autouse=True)
def _no_global_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(objects, "encrypted_opener", None)
    monkeypatch.delenv(crypto.KEY_ENV, raising=False)
    monkeypatch.delenv(crypto.KEY_FILE_ENV, raising=False)
    monkeypatch.setenv("AGENTSNAP_EFFECTS_KEY", "22" * 32)


def _all_stored(store_dir: Path) -> bytes:
    out = b""
    for dirpath, _dirs, files in os.walk(store_dir / "objects"):
        for f in files:
            out += Path(dirpath, f).read_bytes()
    return out


def _encrypted_repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, key: str) -> Repo:
    monkeypatch.setenv(crypto.KEY_ENV, key)
    repo = Repo.init(tmp_path / "work")
    crypto.enable_encryption(repo)
    return repo


def test_objects_on_disk_are_ciphertext_and_restore_is_exact(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = _encrypted_repo(tmp_path, monkeypatch, crypto.generate_key())
    (repo.root / "plan.txt").write_bytes(SECRET_TEXT)
    (repo.root / "big.bin").write_bytes(os.urandom(300_000))  # chunked
    snap = repo.snapshot("secret plan", layers={"state": {"codes": "0000-launch"}})
    stored = _all_stored(repo.store_dir)
    assert b"launch codes" not in stored and b"0000-launch" not in stored and b"secret plan" not in stored
    repo.close()
    with Repo.open(tmp_path / "work") as again:  # reopened: the key comes from the environment again
        again.restore(snap.id, to=tmp_path / "out")
        assert (tmp_path / "out" / "plan.txt").read_bytes() == SECRET_TEXT
        assert again.read_layer(snap.id, "state") == {"codes": "0000-launch"}
        assert again.verify()["ok"]


def test_dedup_is_kept_under_encryption(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = _encrypted_repo(tmp_path, monkeypatch, crypto.generate_key())
    (repo.root / "a.bin").write_bytes(os.urandom(500_000))
    repo.snapshot("one")
    count = len(list(repo.objects.iter_oids()))
    data = bytearray((repo.root / "a.bin").read_bytes())
    data[100:110] = b"0123456789"
    (repo.root / "a.bin").write_bytes(bytes(data))
    repo.snapshot("two")
    added = len(list(repo.objects.iter_oids())) - count
    assert added <= 8  # one changed chunk, its chunk list, the tree, trace, env, manifest... not the whole file
    repo.close()


def test_without_the_key_reads_fail_by_name_and_wrong_key_is_refused(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    repo = _encrypted_repo(tmp_path, monkeypatch, crypto.generate_key())
    (repo.root / "a.txt").write_text("x")
    repo.snapshot("s")
    repo.close()
    monkeypatch.delenv(crypto.KEY_ENV)
    monkeypatch.setattr(objects, "encrypted_opener", None)
    with pytest.raises(EncryptedObject, match="AGENTSNAP_ENCRYPTION_KEY"):
        Repo.open(tmp_path / "work")
    monkeypatch.setenv(crypto.KEY_ENV, crypto.generate_key())
    with pytest.raises(InvalidInput, match="not this store's key"):
        Repo.open(tmp_path / "work")


def test_tampered_ciphertext_fails_authentication(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    key = bytes.fromhex(crypto.generate_key())
    oid, stored = crypto.seal(key, objects.Kind.BLOB, SECRET_TEXT)
    assert crypto.open_sealed(key, oid, stored) == (objects.Kind.BLOB, SECRET_TEXT)
    bad = bytearray(stored)
    bad[-1] ^= 1
    with pytest.raises(ObjectCorrupt, match="authentication"):
        crypto.open_sealed(key, oid, bytes(bad))
    with pytest.raises(ObjectCorrupt, match="authentication"):
        crypto.open_sealed(os.urandom(32), oid, stored)
    assert crypto.seal(key, objects.Kind.BLOB, SECRET_TEXT)[1] == stored  # deterministic: idempotent writes


def test_push_carries_only_ciphertext_and_a_keyholder_clones(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    key = crypto.generate_key()
    repo = _encrypted_repo(tmp_path, monkeypatch, key)
    (repo.root / "plan.txt").write_bytes(SECRET_TEXT)
    snap = repo.snapshot("to share")
    add_remote(repo, "origin", str(tmp_path / "remote"))
    push(repo, "origin")
    repo.close()
    remote_bytes = _all_stored(tmp_path / "remote")
    assert remote_bytes and b"launch codes" not in remote_bytes and b"to share" not in remote_bytes
    from agentsnap_core.operations.remote import clone

    clone_repo, _ = clone(str(tmp_path / "remote"), tmp_path / "clone")  # the key is in this process's env
    assert (tmp_path / "clone" / "plan.txt").read_bytes() == SECRET_TEXT
    assert clone_repo.get("main").id == snap.id
    clone_repo.close()


# ---------------------------------------------------------------- signing


def _signing_repo(tmp_path: Path, name: str = "work") -> tuple[Repo, str]:
    repo = Repo.init(tmp_path / name)
    public = crypto.generate_signing_key(tmp_path / f"{name}.pem")
    assert crypto.enable_signing(repo, tmp_path / f"{name}.pem") == public
    return repo, public


def test_signed_snapshots_verify_and_forgeries_do_not(tmp_path: Path) -> None:
    repo, public = _signing_repo(tmp_path)
    (repo.root / "a.txt").write_text("a")
    first = repo.snapshot("one")
    (repo.root / "a.txt").write_text("b")
    second = repo.snapshot("two")
    assert first.manifest["meta"]["signature"]["key"] == public
    assert crypto.verify_signatures(repo) == {"ok": True, "signed": 2, "problems": []}
    assert repo.verify()["signatures"]["signed"] == 2 and repo.verify()["ok"]
    assert crypto.check_manifest(second.id, second.manifest, [public]) == public
    forged = {**second.manifest, "message": "rewritten history"}
    with pytest.raises(UntrustedSnapshot, match="forged or altered"):
        crypto.check_manifest(second.id, forged, [public])
    with pytest.raises(UntrustedSnapshot, match="untrusted key"):
        crypto.check_manifest(second.id, second.manifest, ["ab" * 32])
    repo.close()


def test_unsigned_history_is_reported(tmp_path: Path) -> None:
    repo = Repo.init(tmp_path / "work")
    (repo.root / "a.txt").write_text("a")
    unsigned = repo.snapshot("unsigned")
    crypto.generate_signing_key(tmp_path / "k.pem")
    public = crypto.enable_signing(repo, tmp_path / "k.pem")
    (repo.root / "a.txt").write_text("b")
    repo.snapshot("signed")
    report = crypto.verify_signatures(repo, [public])
    assert not report["ok"] and report["signed"] == 1
    assert report["problems"] == [{"id": unsigned.id, "error": "no signature"}]
    full = repo.verify()  # a repository that trusts keys checks signatures in verify
    assert not full["ok"] and any(p["kind"] == "signature" and p["id"] == unsigned.id for p in full["problems"])
    repo.close()


def test_clone_can_require_signatures(tmp_path: Path) -> None:
    repo, public = _signing_repo(tmp_path)
    (repo.root / "a.txt").write_text("a")
    repo.snapshot("signed")
    add_remote(repo, "origin", str(tmp_path / "remote"))
    push(repo, "origin")
    clone_repo, _ = remote.clone_verified(str(tmp_path / "remote"), tmp_path / "ok", [public])
    assert (tmp_path / "ok" / "a.txt").read_text() == "a"
    assert public in crypto.trusted_keys(clone_repo)
    clone_repo.close()
    with pytest.raises(UntrustedSnapshot, match="untrusted key"):
        remote.clone_verified(str(tmp_path / "remote"), tmp_path / "refused", ["cd" * 32])
    assert not (tmp_path / "refused").exists()  # nothing left behind
    repo.close()


def test_pull_can_require_signatures(tmp_path: Path) -> None:
    origin, public = _signing_repo(tmp_path, "origin")
    (origin.root / "a.txt").write_text("a")
    origin.snapshot("signed base")
    add_remote(origin, "origin", str(tmp_path / "remote"))
    push(origin, "origin")
    mine, _ = remote.clone_verified(str(tmp_path / "remote"), tmp_path / "mine", [public])
    intruder = Repo.init(tmp_path / "intruder")  # pushes an unsigned snapshot on top
    add_remote(intruder, "origin", str(tmp_path / "remote"))
    from agentsnap_core.operations.remote import pull

    pull(intruder, "origin")
    (intruder.root / "a.txt").write_text("evil")
    intruder.snapshot("unsigned change")
    push(intruder, "origin")
    before = mine.get("main").id
    with pytest.raises(UntrustedSnapshot, match="no signature"):
        remote.pull_verified(mine, "origin")
    assert mine.get("main").id == before and (tmp_path / "mine" / "a.txt").read_text() == "a"
    for r in (origin, mine, intruder):
        r.close()
