"""The local secrets vault (issue 18): files the secrets policy leaves out are kept encrypted in the local store,
with a key outside it, never pushed, so that ``rm .env`` is undoable too. Everything through the real CLI."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest
from trust_kit import cli, new_work

pytest.importorskip("cryptography")

SECRET = b"OPENAI_API_KEY=sk-vaultsecretvaluexxxxxxxxxxxxxxxx\n"
NESTED = b"DB_PASSWORD=hunter2-nested-secret\n"
PRIVATE = b"-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAvaultkeybytes\n-----END RSA PRIVATE KEY-----\n"
TREE: dict[str, str | bytes] = {".env": SECRET, "svc/api/.env.local": NESTED, "tls/server.key": PRIVATE,
                                "app.py": "print('hi')\n"}
SECRETS = [".env", "svc/api/.env.local", "tls/server.key"]


@pytest.fixture
def work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("AGENTSNAP_VAULT_KEY_FILE", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))  # the key lives outside the store (and the home)
    root = new_work(tmp_path, TREE)
    os.chmod(root / ".env", 0o640)
    os.chmod(root / "tls/server.key", 0o600)
    return root


def _snapshot(work: Path, *args: str) -> tuple[str, str]:
    code, out, err = cli(work, "snapshot", "-m", "s", *args)
    assert code == 0, err
    return out.strip(), err


def _files(root: Path) -> dict[str, tuple[int, bytes]]:
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != ".agentsnap"]
        for name in filenames:
            full = os.path.join(dirpath, name)
            with open(full, "rb") as f:
                out[os.path.relpath(full, root)] = (stat.S_IMODE(os.lstat(full).st_mode), f.read())
    return out


def _all_bytes(folder: Path) -> bytes:
    return b"".join(p.read_bytes() for p in folder.rglob("*") if p.is_file())


def test_rm_env_then_restore_head_brings_it_back_byte_identical_with_its_mode(work: Path) -> None:
    before = _files(work)
    _, err = _snapshot(work)
    assert "kept 3 secret file(s) encrypted in the local store" in err and "never pushed" in err, err
    assert all(s in err for s in SECRETS)
    for rel in SECRETS:
        (work / rel).unlink()
    code, _, err = cli(work, "restore", "HEAD")
    assert code == 0 and "warning" not in err, err
    assert _files(work) == before


def test_restore_one_path_and_restore_to_bring_secrets_back(work: Path, tmp_path: Path) -> None:
    before = _files(work)
    _snapshot(work)
    (work / ".env").unlink()
    code, _, err = cli(work, "restore", "HEAD", "--", ".env")
    assert code == 0 and "warning" not in err, err
    assert (work / ".env").read_bytes() == SECRET and stat.S_IMODE((work / ".env").stat().st_mode) == 0o640
    code, out, err = cli(work, "restore", "HEAD", "--to", str(tmp_path / "copy"), "--json")
    assert code == 0, err
    assert json.loads(out)["secrets_restored"] == SECRETS
    assert _files(tmp_path / "copy") == before


def test_vault_on_disk_and_its_key_never_hold_the_secret_in_clear(work: Path, tmp_path: Path) -> None:
    snap, _ = _snapshot(work)
    entry = work / ".agentsnap" / "vault" / snap
    assert entry.is_file() and stat.S_IMODE(entry.stat().st_mode) == 0o600
    store = _all_bytes(work / ".agentsnap")
    for secret in (SECRET, NESTED, PRIVATE, b"vaultsecretvalue", b"hunter2"):
        assert secret not in store
    keys = list((tmp_path / "xdg" / "agentsnap" / "keys").iterdir())
    assert len(keys) == 1 and stat.S_IMODE(keys[0].stat().st_mode) == 0o600
    assert keys[0].read_bytes() not in store  # the key is not in the store


def test_snapshot_id_does_not_depend_on_the_secret_bytes(work: Path) -> None:
    from agentsnap_core import Repo

    first, _ = _snapshot(work)
    (work / ".env").write_bytes(b"OPENAI_API_KEY=sk-another-value-entirely-xxxxxxxxx\n")
    second, _ = _snapshot(work)
    with Repo.open(work) as repo:
        a, b = repo.manifest(first), repo.manifest(second)
    wa, wb = a["layers"]["world"], b["layers"]["world"]
    assert set(wa) == set(wb) and (wa["tree"], wa["left_out"]) == (wb["tree"], wb["left_out"])  # names, never bytes
    assert "vault" not in json.dumps(a, default=str)


def test_push_and_clone_carry_no_secret(work: Path, tmp_path: Path) -> None:
    _snapshot(work)
    remote = tmp_path / "remote-store"
    assert cli(work, "remote", "add", "origin", remote.as_uri())[0] == 0
    code, _, err = cli(work, "push", "origin")
    assert code == 0, err
    remote_bytes = _all_bytes(remote)
    for secret in (SECRET, NESTED, PRIVATE, b"vaultsecretvalue"):
        assert secret not in remote_bytes
    assert not any(p.name == "vault" for p in remote.rglob("*"))
    code, _, err = cli(tmp_path, "clone", remote.as_uri(), "b")
    assert code == 0, err
    clone = tmp_path / "b"
    assert not any((clone / s).exists() for s in SECRETS)
    assert not (clone / ".agentsnap" / "vault").exists() or not any(
        p.name != "id" for p in (clone / ".agentsnap" / "vault").iterdir())
    code, _, err = cli(clone, "restore", "HEAD", "--to", str(tmp_path / "elsewhere"))
    assert code == 0, err
    assert "could not bring back 3 secret file(s)" in err and "left out of the snapshot" in err, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


@pytest.mark.parametrize("how", ["missing", "wrong"])
def test_key_missing_or_wrong_one_line_and_everything_else_restored(work: Path, tmp_path: Path, how: str,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    _snapshot(work)
    (work / "app.py").write_text("changed\n")
    (work / ".env").unlink()
    key_dir = tmp_path / "xdg" / "agentsnap" / "keys"
    if how == "missing":
        for k in key_dir.iterdir():
            k.rename(tmp_path / "saved-key")
    else:
        other = tmp_path / "other-key"
        other.write_text("ab" * 32 + "\n")
        monkeypatch.setenv("AGENTSNAP_VAULT_KEY_FILE", str(other))
    code, out, err = cli(work, "restore", "HEAD")
    assert code == 0, err
    assert (work / "app.py").read_text() == "print('hi')\n"  # the rest is restored
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert "could not bring back 1 secret file(s): .env" in lines[0]
    assert ("is missing" if how == "missing" else "is not this store's vault key") in lines[0]
    assert not (work / ".env").exists()
    if how == "missing":  # a missing key is never replaced: putting it back makes the vault readable again
        assert not any(key_dir.iterdir())
        for k in [tmp_path / "saved-key"]:
            k.rename(key_dir / (work / ".agentsnap" / "vault" / "id").read_text().strip())
        code, _, err = cli(work, "restore", "HEAD")
        assert code == 0 and "warning" not in err, err
        assert (work / ".env").read_bytes() == SECRET


def test_tampered_vault_entry_is_refused_before_the_tree_is_touched(work: Path) -> None:
    snap, _ = _snapshot(work)
    entry = work / ".agentsnap" / "vault" / snap
    data = bytearray(entry.read_bytes())
    data[-20] ^= 0xFF  # inside the ciphertext / tag
    entry.write_bytes(bytes(data))
    (work / ".env").unlink()
    code, _, err = cli(work, "restore", "HEAD")
    assert code == 0 and "could not bring back 1 secret file(s): .env" in err and "Traceback" not in err, err
    assert not (work / ".env").exists()


def test_gc_drops_vault_entries_of_pruned_snapshots(work: Path) -> None:
    from agentsnap_core import Repo

    kept, _ = _snapshot(work)
    (work / ".env").write_bytes(b"X=2\n")
    with Repo.open(work) as repo:  # a snapshot no ref, HEAD or reflog names: gc prunes it
        gone = repo.snapshot("dangling", move_head=False).id
    vault = work / ".agentsnap" / "vault"
    assert (vault / kept).is_file() and (vault / gone).is_file()
    code, out, err = cli(work, "gc", "--prune", "now", "--json")
    assert code == 0, err
    assert json.loads(out)["vault_dropped"] == 1
    assert (vault / kept).is_file() and not (vault / gone).exists()
    (work / ".env").unlink()
    code, _, err = cli(work, "restore", kept)
    assert code == 0 and (work / ".env").read_bytes() == SECRET, err


@pytest.mark.skipif(sys.platform == "darwin", reason="macOS refuses non-UTF-8 file names")
def test_non_utf8_and_nested_paths_round_trip(work: Path) -> None:
    raw = os.fsencode(str(work)) + b"/d\xff\xfe/.env"
    os.makedirs(os.path.dirname(raw), exist_ok=True)
    with open(raw, "wb") as f:
        f.write(b"K=\xff\x00binary\n")
    os.chmod(raw, 0o604)
    before = _files(work)
    _, err = _snapshot(work)
    assert "kept 4 secret file(s)" in err, err
    os.unlink(raw)
    (work / "svc/api/.env.local").unlink()
    code, _, err = cli(work, "restore", "HEAD")
    assert code == 0 and "warning" not in err, err
    assert _files(work) == before


def test_include_secrets_unchanged_and_the_vault_switch(work: Path, tmp_path: Path) -> None:
    snap, err = _snapshot(work, "--include-secrets")
    assert "secret file" not in err and not (work / ".agentsnap" / "vault" / snap).exists()
    from agentsnap_core import Repo

    with Repo.open(work) as repo:
        repo.refs.set_config("world.vault", "off")
    snap, err = _snapshot(work)
    assert "left out 3 secret file(s)" in err and "kept" not in err, err
    assert not (work / ".agentsnap" / "vault" / snap).exists()
    (work / ".env").unlink()
    code, _, err = cli(work, "restore", "HEAD")
    assert code == 0 and "could not bring back 1 secret file(s): .env" in err, err


def test_a_link_in_place_of_a_secret_is_never_written_through(work: Path, tmp_path: Path) -> None:
    _snapshot(work)
    outside = tmp_path / "outside"
    outside.write_bytes(b"untouched\n")
    (work / ".env").unlink()
    (work / ".env").symlink_to(outside)
    code, _, err = cli(work, "restore", "HEAD")
    assert code == 0, err
    assert outside.read_bytes() == b"untouched\n" and (work / ".env").is_symlink()
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "did not write 1 secret file(s) from the local vault: .env" in lines[0], err
    assert (work / "svc/api/.env.local").read_bytes() == NESTED


def test_fork_worktrees_get_the_secret_files_back_like_restore_to(work: Path, tmp_path: Path) -> None:
    """An agent forked into worktrees needs its .env there too (its API key): each worktree gets the kept
    secret files, byte-identical with their modes, as `restore --to` gives them; without the key, one line."""
    before = _files(work)
    _snapshot(work)
    code, out, err = cli(work, "fork", "-n", "2", "--worktrees", str(tmp_path / "wt"), "--json")
    assert code == 0 and "warning" not in err, err
    forks = json.loads(out)["forks"]
    assert [f["secrets_restored"] for f in forks] == [SECRETS, SECRETS]
    for f in forks:
        got = _files(Path(f["path"]))
        got.pop(".agentsnap")  # the worktree's pointer to its store
        assert got == before, sorted(set(got) ^ set(before))

    key_dir = tmp_path / "xdg" / "agentsnap" / "keys"
    for k in key_dir.iterdir():
        k.rename(tmp_path / "saved-key")
    code, out, err = cli(work, "fork", "-n", "1", "--worktrees", str(tmp_path / "wt2"))
    assert code == 0, err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "could not bring back 3 secret file(s)" in lines[0] and "is missing" in lines[0], err
    (path,) = [Path(ln.split()[-1]) for ln in out.splitlines()]
    assert (path / "app.py").exists() and not (path / ".env").exists()


def test_status_says_a_kept_secret_file_is_gone_and_how_to_get_it_back(work: Path) -> None:
    """`rm .env` is not a change of the snapshot's tree (the file is not in it), but the user should hear of it:
    status names it and the command that brings it back; the command works."""
    _snapshot(work)
    code, out, err = cli(work, "status")
    assert code == 0 and "gone from the tree" not in err, err
    (work / ".env").unlink()
    (work / "svc/api/.env.local").unlink()
    code, out, err = cli(work, "status")
    assert code == 0, err
    lines = [ln for ln in err.splitlines() if "gone from the tree" in ln]
    assert len(lines) == 1 and ".env, svc/api/.env.local" in lines[0], err
    code, out, _ = cli(work, "status", "--json")
    assert json.loads(out)["secrets_missing"] == [".env", "svc/api/.env.local"]
    cmd = lines[0].split("'")[1].split()
    assert cmd[:2] == ["agentsnap", "restore"]
    code, _, err = cli(work, *cmd[1:])
    assert code == 0 and "warning" not in err, err
    assert (work / ".env").read_bytes() == SECRET and (work / "svc/api/.env.local").read_bytes() == NESTED
    code, out, err = cli(work, "status", "--json")
    assert "secrets_missing" not in json.loads(out), out


def test_status_says_so_when_the_vault_entry_of_head_cannot_be_read(work: Path) -> None:
    """A damaged vault entry was silence: `rm .env` then `status` said nothing, and the user trusted the vault."""
    snap_id, _ = _snapshot(work)
    entry = work / ".agentsnap" / "vault" / snap_id
    assert entry.is_file()
    entry.write_bytes(b"not a vault entry")
    code, _, err = cli(work, "status")
    assert code == 0 and "cannot be read" not in err, err  # nothing gone yet: nothing to say
    (work / ".env").unlink()
    code, _, err = cli(work, "status")
    assert code == 0, err
    [line] = [ln for ln in err.splitlines() if "vault entry" in ln]
    assert line.startswith("warning: ") and snap_id[:12] in line and ".env" in line and "may not come back" in line, err
    code, out, _ = cli(work, "status", "--json")
    doc = json.loads(out)
    assert doc["secrets_unreadable"]["paths"] == [".env"] and "secrets_missing" not in doc


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _entry_inode(work: Path, snap: str) -> int:
    return (work / ".agentsnap" / "vault" / snap).stat().st_ino


def _past_racy_window() -> None:
    """Wait until what was just written is older than the racy window (100 ms): the vault trusts the signature
    (size, mode, inode, mtime, ctime) of a file only then."""
    import time

    time.sleep(0.25)


def test_an_unchanged_secret_file_is_not_sealed_again_and_every_snapshot_brings_it_back(work: Path) -> None:
    """The speed property (an unchanged .env is not read, encrypted and fsynced again at every snapshot: the next
    snapshot shares its parent's vault entry) and what the user sees: each snapshot restores its own bytes."""
    _past_racy_window()
    first, _ = _snapshot(work)
    (work / "app.py").write_text("v2\n")
    second, err = _snapshot(work)
    assert "kept 3 secret file(s)" in err, err
    assert _entry_inode(work, second) == _entry_inode(work, first)  # linked, not sealed again
    for rel in SECRETS:
        (work / rel).unlink()
    code, _, err = cli(work, "restore", second)
    assert code == 0 and "warning" not in err, err
    assert (work / ".env").read_bytes() == SECRET and stat.S_IMODE((work / ".env").stat().st_mode) == 0o640
    assert (work / "tls/server.key").read_bytes() == PRIVATE


@pytest.mark.parametrize("change", ["same size, mtime set back", "chmod", "replaced by a new file", "removed",
                                    "a new secret file"])
def test_a_changed_secret_file_is_sealed_again_however_it_changed(work: Path, change: str) -> None:
    """A change the file's size and mtime do not show (same length, mtime put back, as ``touch -r`` or an editor
    keeping times does) must still be sealed anew: restoring the second snapshot gives the second bytes."""
    _past_racy_window()
    first, _ = _snapshot(work)
    env = work / ".env"
    st = env.stat()
    want: bytes | None = SECRET
    if change == "same size, mtime set back":
        want = SECRET.replace(b"sk-vault", b"sk-VAULT")
        env.write_bytes(want)
        os.utime(env, ns=(st.st_atime_ns, st.st_mtime_ns))
        assert env.stat().st_size == st.st_size and env.stat().st_mtime_ns == st.st_mtime_ns
    elif change == "chmod":
        os.chmod(env, 0o600)
    elif change == "replaced by a new file":
        want = b"OPENAI_API_KEY=sk-replacedxxxxxxxxxxxxxxxxxxxxxxxxxx\n"
        tmp = work / "new.tmp"
        tmp.write_bytes(want)
        os.replace(tmp, env)
    elif change == "removed":
        env.unlink()
        want = None
    else:
        (work / ".env.prod").write_bytes(b"PASSWORD=another\n")
    _past_racy_window()
    second, _ = _snapshot(work)
    assert _entry_inode(work, second) != _entry_inode(work, first)
    if env.exists():
        env.unlink()
    code, _, err = cli(work, "restore", second)
    assert code == 0 and "warning" not in err, err
    if want is None:
        assert not env.exists()
    else:
        assert env.read_bytes() == want
        mode = {"chmod": 0o600, "replaced by a new file": 0o666 & ~_umask()}.get(change, stat.S_IMODE(st.st_mode))
        assert stat.S_IMODE(env.stat().st_mode) == mode
    code, _, err = cli(work, "restore", first)  # and the first snapshot still has the first bytes
    assert code == 0 and env.read_bytes() == SECRET, err


def test_a_secret_file_written_just_before_a_snapshot_is_never_trusted_unchanged(
        work: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Racily clean: a file changed within the timestamp window of its sealing gets no signature, so the next
    snapshot seals it again even when size, mtime and ctime look the same (a coarse filesystem clock could hide a
    change made right after it was read). The window is widened to 60 s so that the write is surely inside it."""
    from agentsnap_core import Repo
    from agentsnap_core.layers import world

    monkeypatch.setattr(world, "RACY_WINDOW_NS", 60_000_000_000)
    (work / ".env").write_bytes(SECRET)  # just now
    with Repo.open(work) as repo:
        first = repo.snapshot("s").id
        second = repo.snapshot("s").id
    assert _entry_inode(work, second) != _entry_inode(work, first)


def test_restore_leaves_a_secret_file_that_already_holds_its_bytes_as_it_is(work: Path) -> None:
    """In place, a kept file that already has its bytes and mode is not written again (same inode, same ctime:
    the undo snapshot and the next one reuse the vault entry); one that differs is put back."""
    _past_racy_window()
    snap, _ = _snapshot(work)
    key, env = work / "tls/server.key", work / ".env"
    before = key.stat()
    env.write_bytes(b"OPENAI_API_KEY=changed\n")
    (work / "app.py").write_text("changed\n")
    code, out, err = cli(work, "restore", snap, "--json")
    assert code == 0, err
    assert json.loads(out)["secrets_restored"] == SECRETS
    after = key.stat()
    assert (after.st_ino, after.st_ctime_ns) == (before.st_ino, before.st_ctime_ns)
    assert env.read_bytes() == SECRET and key.read_bytes() == PRIVATE
