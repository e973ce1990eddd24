"""The local secrets vault: files the secrets policy leaves out of a snapshot, kept encrypted in this store only.

A snapshot never carries ``.env``, private keys and other credential files (:func:`agentsnap_core.layers.world.
is_secret_file`), so without more ``rm .env`` could not be undone. When a snapshot leaves such files out, their
bytes and mode are sealed with the project's at-rest envelope (:func:`agentsnap_core.format.crypto.seal`,
AES-256-GCM, authenticated) under a key that lives **outside** the store and written to
``<store>/vault/<snapshot id>``: a side folder keyed by snapshot id, never part of the manifest or the objects,
so ``push``, ``clone`` and ``fetch`` never copy it and the snapshot id does not depend on the secret bytes.
``restore`` (in place or ``--to``) decrypts and verifies the entries before the tree is touched and writes them
back after the world; with the key missing or wrong it restores everything else and names the files it could not
bring back. ``gc`` drops the entries of snapshots that are gone (:func:`prune`).

The key: the file :data:`KEY_FILE_ENV` names, else ``$XDG_DATA_HOME/agentsnap/keys/<store id>`` (default
``~/.local/share``), 64 hex characters, created 0600 on first use. The store id is a random name kept in
``<store>/vault/id``. Deleting the project or copying the store to another account does not expose the secrets.
Turn it off per store with ``world.vault=off`` (the files are then left out as before). Needs the ``cryptography``
package (``agentsnap-core[crypto]``); without it the files are left out as before, and said so.

The sealed payload starts with 32 random bytes so that its id (the BLAKE3 of the plain payload, kept next to the
ciphertext as the envelope's associated data) cannot confirm a guessed ``.env``.
"""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentsnap_core.errors import AgentSnapError
from agentsnap_core.format.crypto import write_key_file
from agentsnap_core.format.encoding import pack, unpack
from agentsnap_core.format.objects import Kind
from agentsnap_core.layers import world
from agentsnap_core.layers.world import TEMP_PREFIX, name_in, name_out

if TYPE_CHECKING:
    from agentsnap_core.repository.repo import Repo

KEY_FILE_ENV = "AGENTSNAP_VAULT_KEY_FILE"
CONFIG = "world.vault"  #: "off" turns the vault off for the store
DIR = "vault"
#: a left-out file larger than this is not kept (credential files are a few KiB); it stays left out, named
MAX_FILE = 16 * 1024 * 1024
FORMAT = 1
SALT = 32


class VaultError(AgentSnapError):
    """The vault could not be read: missing or wrong key, damaged entry (one line, the reason)."""


def enabled(repo: Repo) -> bool:
    if (repo.refs.get_config(CONFIG) or "on").lower() in ("off", "false", "0", "no"):
        return False
    try:
        import cryptography  # noqa: F401
    except ImportError:
        return False
    return True


def _dir(repo: Repo) -> Path:
    return Path(repo.store_dir) / DIR


def _store_id(repo: Repo) -> str:
    path = _dir(repo) / "id"
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    write_key_file(path, os.urandom(16).hex() + "\n", 0o644)
    return path.read_text().strip()


def key_path(repo: Repo) -> Path:
    """Where this store's vault key lives (outside the store)."""
    if os.environ.get(KEY_FILE_ENV):
        return Path(os.environ[KEY_FILE_ENV]).expanduser()
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return Path(base) / "agentsnap" / "keys" / _store_id(repo)


def _key(repo: Repo, create: bool) -> bytes:
    """This store's vault key. Made on first use only: once the store has one (its fingerprint is kept in
    ``vault/key_id``) a missing or different key is refused, never replaced, so that putting the key file back
    makes every entry readable again."""
    from agentsnap_core.format import crypto

    path = key_path(repo)
    id_path = _dir(repo) / "key_id"
    try:
        want: str | None = id_path.read_text().strip()
    except FileNotFoundError:
        want = None
    try:
        key = crypto._parse(path.read_text(), str(path))
    except FileNotFoundError:
        if not create or want is not None:
            raise VaultError(f"the vault key {path} is missing (set {KEY_FILE_ENV} to the key file)") from None
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        write_key_file(path, crypto.generate_key() + "\n", 0o600)
        key = crypto._parse(path.read_text(), str(path))
    except (OSError, AgentSnapError) as exc:
        raise VaultError(f"the vault key {path} cannot be read ({exc})") from None
    if want is None and create:
        id_path.parent.mkdir(parents=True, exist_ok=True)
        write_key_file(id_path, crypto.key_id(key) + "\n", 0o644)
        want = id_path.read_text().strip()
    if want is not None and want != crypto.key_id(key):
        raise VaultError(f"the vault key {path} is not this store's vault key")
    return key


def key_problem(repo: Repo) -> str | None:
    """Why the vault cannot keep files now (None when it can, or is off): for the line ``snapshot`` prints."""
    if not enabled(repo):
        return None
    try:
        _key(repo, create=False)
    except VaultError as exc:
        return str(exc)
    return None


# ---------------------------------------------------------------- snapshot


def left_out(rec: dict[str, Any] | None) -> list[str]:
    """The names a world record says the secrets policy left out (non-UTF-8 ones as the os module spells them)."""
    return [name_in(n) for n in (rec or {}).get("left_out") or []]


def _signature(st: os.stat_result, start_ns: int) -> list[int] | None:
    """What tells that a kept file is unchanged since it was sealed: size, mode, inode, mtime and ctime (a write
    or ``chmod`` moves ctime even where mtime is set back). None when the file was changed so close to the seal
    that a later change in the same timestamp tick could not be told apart (racily clean: never reused)."""
    window = max(world.RACY_WINDOW_NS, 2 * world.TIMESTAMP_GRANULARITY_NS)
    if max(st.st_mtime_ns, st.st_ctime_ns) >= start_ns - window:
        return None
    return _fields(st)


def _fields(st: os.stat_result) -> list[int]:
    return [st.st_size, st.st_mode, st.st_ino, st.st_dev, st.st_mtime_ns, st.st_ctime_ns]


def _reuse(repo: Repo, snap_id: str, parent: str, names: list[str], root: Path) -> list[str] | None:
    """Give ``snap_id`` the vault entry of ``parent`` when it holds exactly these files, unchanged since it was
    sealed (:func:`_signature`, by ``lstat``: nothing is read or decrypted) and this store's key is there: the
    entry is linked, not written again. The names kept, or None when it cannot be reused (then it is sealed)."""
    kept = _unchanged(repo, parent, names, root)
    if kept is None:
        return None
    try:
        os.link(_dir(repo) / parent, _dir(repo) / snap_id)
    except OSError:
        return None
    return kept


def holds_as_they_are(repo: Repo, snap_id: str, rec: dict[str, Any] | None, root: Path) -> bool:
    """Whether the vault entry of snapshot ``snap_id`` holds the secret files the world record ``rec`` left out,
    exactly as they are in ``root`` now (or none are kept: the vault is off, or nothing was left out): a restore of
    ``snap_id`` then brings back these very files (restore's undo may be ``snap_id`` itself)."""
    names = left_out(rec)
    if not names or not enabled(repo):
        return True
    return _unchanged(repo, snap_id, names, root) is not None


def _unchanged(repo: Repo, parent: str, names: list[str], root: Path) -> list[str] | None:
    """The names of ``names`` kept, when the vault entry of ``parent`` holds exactly these files, unchanged since it
    was sealed, under this store's key; else None."""
    try:
        doc = _entry(repo, parent)
    except VaultError:
        return None
    sigs = doc.get("files_stat") if doc else None
    if not doc or not isinstance(sigs, list) or not isinstance(doc.get("names"), list):
        return None
    kept, now = [], []
    for rel in names:
        try:
            st = os.lstat(root / rel)
        except OSError:
            continue  # as keep: a vanished file is not kept
        if stat.S_ISREG(st.st_mode) and st.st_size <= MAX_FILE:
            kept.append(rel)
            now.append(_fields(st))
    if [name_out(n) for n in kept] != doc["names"] or now != sigs:  # (a None signature never equals)
        return None
    try:
        from agentsnap_core.format import crypto

        if doc.get("key_id") != crypto.key_id(_key(repo, create=False)):
            return None
    except (OSError, AgentSnapError):
        return None
    return kept


def keep(repo: Repo, snap_id: str, rec: dict[str, Any] | None, root: Path, parents: list[str] | None = None
         ) -> list[str]:
    """Seal the files ``rec`` (a world record) left out as secrets; return the names kept (none: vault off).

    Called once the snapshot ``snap_id`` is stored. Never fails the snapshot: a file that cannot be read (or a
    key that cannot be made) leaves the files out, as without the vault. When the first of ``parents`` has an
    entry for exactly these files, none changed since it was sealed, that entry serves this snapshot too
    (:func:`_reuse`): an unchanged ``.env`` is not read, encrypted and written again at every snapshot.
    """
    names = left_out(rec)
    if not names or not enabled(repo):
        return []
    if parents:
        reused = _reuse(repo, snap_id, parents[0], names, root)
        if reused is not None:
            return reused
    files = []
    sigs = []
    start_ns = time.time_ns()
    for rel in names:
        full = root / rel
        try:
            fd = os.open(full, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            continue  # a link or a vanished file: nothing to keep
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_FILE:
                continue
            data = f.read(MAX_FILE + 1)
            files.append([name_out(rel), stat.S_IMODE(st.st_mode), data])
            # what was read is what the signature says only if the file did not change while it was read
            after = os.fstat(fd)
            same = (after.st_size, after.st_mtime_ns, after.st_ctime_ns) == (len(data), st.st_mtime_ns, st.st_ctime_ns)
            sigs.append(_signature(st, start_ns) if same else None)
    if not files:
        return []
    from agentsnap_core.format import crypto

    try:
        key = _key(repo, create=True)
        payload = os.urandom(SALT) + pack({"v": FORMAT, "files": files})
        oid, sealed = crypto.seal(key, Kind.BLOB, payload)
        doc = {"v": FORMAT, "key_id": crypto.key_id(key), "names": [f[0] for f in files], "files_stat": sigs, "oid": oid,
               "sealed": sealed}
        d = _dir(repo)
        d.mkdir(parents=True, exist_ok=True)
        tmp = d / f".{snap_id}.{os.getpid()}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(pack(doc))
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, d / snap_id)
    except (OSError, AgentSnapError):
        return []
    return [name_in(f[0]) for f in files]


def kept(repo: Repo, snap_id: str) -> list[str]:
    """The names the vault keeps for ``snap_id`` (read without the key)."""
    doc = _entry(repo, snap_id)
    return [name_in(n) for n in doc.get("names") or []] if doc else []


def _entry(repo: Repo, snap_id: str) -> dict[str, Any] | None:
    try:
        doc = unpack((_dir(repo) / snap_id).read_bytes(), "vault entry")
    except (FileNotFoundError, NotADirectoryError):
        return None
    except (OSError, AgentSnapError) as exc:
        raise VaultError(f"the vault entry of {snap_id[:12]} cannot be read ({exc})") from None
    if not isinstance(doc, dict) or doc.get("v") != FORMAT:
        raise VaultError(f"the vault entry of {snap_id[:12]} is damaged")
    return doc


# ---------------------------------------------------------------- restore


def _under(path: str, paths: list[str] | None) -> bool:
    return paths is None or any(path == p or path.startswith(p.rstrip("/") + "/") for p in paths)


def open_for_restore(repo: Repo, snap_id: str, rec: dict[str, Any], dest: Path, paths: list[str] | None,
                     in_place: bool) -> tuple[list[tuple[str, int, bytes]], str | None]:
    """Decrypt and verify the files to put back before the tree is touched: ``(files, note)``.

    ``note`` is one line naming the secret files that cannot be brought back and why (None when all can, or
    when none is missing: in place, a left-out file still present is left as it is).
    """
    left = [n for n in left_out(rec) if _under(n, paths)]
    if not left:
        return [], None
    files: list[tuple[str, int, bytes]] = []
    why = ""
    try:
        doc = _entry(repo, snap_id)
        if doc is None:
            why = "left out of the snapshot and not in this store's vault"
        else:
            from agentsnap_core.format import crypto

            key = _key(repo, create=False)
            if doc.get("key_id") != crypto.key_id(key):
                raise VaultError(f"the vault key {key_path(repo)} is not the key they were kept with")
            try:
                _, payload = crypto.open_sealed(key, str(doc["oid"]), bytes(doc["sealed"]))
                body = unpack(payload[SALT:], "vault entry")
            except (AgentSnapError, KeyError, TypeError) as exc:
                raise VaultError(f"the vault entry of {snap_id[:12]} fails verification ({exc})") from None
            for name, mode, data in body["files"]:
                rel = name_in(name)
                if _under(rel, paths) and _safe_rel(rel):
                    files.append((rel, int(mode) & 0o7777, bytes(data)))
            why = "left out of the snapshot and not in this store's vault"
    except VaultError as exc:
        why = str(exc)
    back = {f[0] for f in files}
    missing = [n for n in left if n not in back and (not in_place or not os.path.lexists(dest / n))]
    if not missing:
        return files, None
    shown = ", ".join(missing[:5]) + (f", ... ({len(missing) - 5} more)" if len(missing) > 5 else "")
    return files, f"could not bring back {len(missing)} secret file(s): {shown}: {why}"


def _safe_rel(rel: str) -> bool:
    parts = rel.split("/")
    return bool(rel) and not rel.startswith("/") and ".." not in parts and "" not in parts and ".agentsnap" not in parts


def write_back(dest: Path, files: list[tuple[str, int, bytes]]) -> list[str]:
    """Write the decrypted files under ``dest``; return the names NOT written (a link or a directory in the way:
    never written through, never replaced), for :func:`report`. A file that already holds its bytes and mode is
    left as it is (not rewritten: its inode and times stay, so the next snapshot's vault entry is reused)."""
    root = os.path.realpath(dest)
    skipped = []
    for rel, mode, data in files:
        full = dest / rel
        if _holds(full, mode, data):
            continue
        parent = full.parent
        real = os.path.realpath(parent)
        if (real != root and not real.startswith(root + os.sep)) or full.is_symlink() or full.is_dir() or (
                parent.exists() and not parent.is_dir()):
            skipped.append(rel)  # a link leading out of the tree, or something else in the way
            continue
        parent.mkdir(parents=True, exist_ok=True)
        tmp = parent / f"{TEMP_PREFIX}vault-{os.getpid()}-{os.urandom(4).hex()}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.chmod(tmp, mode)
            os.replace(tmp, full)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
    return skipped


def _holds(full: Path, mode: int, data: bytes) -> bool:
    """Whether ``full`` is a regular file (not a link) with exactly ``data`` and permission bits ``mode``."""
    try:
        fd = os.open(full, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return False
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        return (stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == mode and st.st_size == len(data)
                and f.read(len(data) + 1) == data)


def report(files: list[tuple[str, int, bytes]], note: str | None, skipped: list[str] | None = None) -> dict[str, Any]:
    """What a restore's answer says about secret files: ``secrets_restored`` and ``secrets_note`` when any."""
    out: dict[str, Any] = {}
    done = sorted(f[0] for f in files if f[0] not in set(skipped or []))
    if done:
        out["secrets_restored"] = done
    if skipped:
        line = (f"did not write {len(skipped)} secret file(s) from the local vault: {', '.join(sorted(skipped)[:5])}: "
                "a link or a directory is in the way (never written through)")
        note = f"{note}; {line}" if note else line
    if note:
        out["secrets_note"] = note
    return out


# ---------------------------------------------------------------- gc


def prune(repo: Repo, older_than: float) -> int:
    """Drop the vault entries of snapshots that are gone from the store; return how many.

    Only entries written before ``older_than`` (gc's cutoff less its grace): a snapshot still being committed
    (its manifest in an open batch) keeps its entry."""
    d = _dir(repo)
    try:
        names = os.listdir(d)
    except FileNotFoundError:
        return 0
    dropped = 0
    for name in names:
        if name in ("id", "key_id") or name.startswith("."):
            continue
        try:
            if repo.objects.has(name) or os.stat(d / name).st_mtime > older_than:
                continue
        except (AgentSnapError, OSError):
            continue
        (d / name).unlink(missing_ok=True)
        dropped += 1
    return dropped
