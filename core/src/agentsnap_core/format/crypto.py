"""Encryption at rest (AES-256-GCM) and signed snapshots (Ed25519). Needs ``pip install agentsnap-core[crypto]``.

**Encryption.** With ``enable_encryption(repo)`` every object the repository writes from then on is
stored as ``header | nonce (12) | AES-GCM(inner codec byte + payload)``: the 15-byte header (kind,
codec 2, plain length) stays readable so stores can check sizes, everything else is ciphertext bound
to its id and kind (associated data). The key lives outside the store: ``AGENTSNAP_ENCRYPTION_KEY``
(64 hex characters) or the file ``AGENTSNAP_ENCRYPTION_KEY_FILE``; the store keeps only the key's
fingerprint so a wrong key is refused by name. Object ids stay the BLAKE3 of the plain content, so
dedup across snapshots and forks is unchanged, and ``push`` copies the stored (encrypted) bytes: a
remote receives only ciphertext and cannot read it without the key.

The nonce is derived from the key and the id (``HMAC-SHA256(key, id)[:12]``): the same content
always encrypts to the same bytes (a nonce is reused only with the same plaintext, which GCM
tolerates), so concurrent writers and repeated pushes stay idempotent. Trade-off (docs/SECURITY.md):
ids are hashes of the plain content, so someone holding the store can test whether it contains a
file they already know (confirmation of a file); a per-store key keeps stores unlinkable by
ciphertext but not by id. Use per-store keys for isolation, a shared team key for cross-store reads.

**Signing.** With ``enable_signing(repo, private_key_path)`` every snapshot manifest carries
``meta.signature = {"alg": "ed25519", "key": <public hex>, "sig": <hex>}`` over the canonical
msgpack of the manifest without that field, so the id covers the signature. ``verify_signatures``
checks every reachable snapshot against trusted public keys; ``clone_verified`` and
``pull_verified`` refuse (and undo) a transfer whose snapshots are not signed by a trusted key.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentsnap_core.errors import AgentSnapError, EncryptedObject, InvalidInput, ObjectCorrupt, UntrustedSnapshot
from agentsnap_core.format import objects
from agentsnap_core.format.encoding import pack
from agentsnap_core.format.objects import CODEC_ENCRYPTED, HEADER, MAGIC, OBJECT_FORMAT

if TYPE_CHECKING:
    from agentsnap_core.repository.repo import Repo

KEY_ENV = "AGENTSNAP_ENCRYPTION_KEY"
KEY_FILE_ENV = "AGENTSNAP_ENCRYPTION_KEY_FILE"
CONFIG_ENCRYPT = "crypto.encrypt"
CONFIG_KEY_ID = "crypto.key_id"
CONFIG_SIGNING_KEY = "crypto.signing_key"  #: path of the Ed25519 private key (PEM), outside the store
CONFIG_TRUSTED = "crypto.trusted_keys"  #: comma-separated public keys (hex) that verify accepts
NONCE = 12


def _aesgcm() -> Any:
    try:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    except ImportError:  # pragma: no cover - exercised only without the extra
        raise AgentSnapError("encryption needs the 'cryptography' package: pip install 'agentsnap-core[crypto]'") from None
    return AESGCM


# ---------------------------------------------------------------- keys


def generate_key() -> str:
    """A new random 256-bit key, as 64 hex characters (keep it outside the store)."""
    return os.urandom(32).hex()


def _parse(text: str, where: str) -> bytes:
    try:
        key = bytes.fromhex(text.strip())
    except ValueError:
        raise InvalidInput(f"{where} must be 64 hex characters (a 256-bit key)") from None
    if len(key) != 32:
        raise InvalidInput(f"{where} must be 64 hex characters (a 256-bit key), not {len(key) * 2}")
    return key


def load_key() -> bytes | None:
    """The encryption key from the environment or the key file it names, or None."""
    if os.environ.get(KEY_ENV):
        return _parse(os.environ[KEY_ENV], KEY_ENV)
    path = os.environ.get(KEY_FILE_ENV)
    if path:
        try:
            return _parse(Path(path).read_text(), path)
        except FileNotFoundError:
            raise InvalidInput(f"{KEY_FILE_ENV} names {path!r}, which does not exist") from None
    return None


def key_id(key: bytes) -> str:
    """A public fingerprint of the key (reveals nothing about it)."""
    return hmac.new(key, b"agentsnap-encryption-key-id", hashlib.sha256).hexdigest()[:16]


# ---------------------------------------------------------------- the envelope


def seal(key: bytes, kind: int, raw: bytes | memoryview) -> tuple[str, bytes]:
    """Encrypt one object: ``(oid of the plain content, stored bytes)``."""
    oid, plain = objects.encode(kind, raw)
    header = HEADER.pack(MAGIC, OBJECT_FORMAT, kind, CODEC_ENCRYPTED, len(raw))
    nonce = hmac.new(key, b"nonce" + oid.encode(), hashlib.sha256).digest()[:NONCE]
    inner = plain[5:6] + plain[HEADER.size :]  # inner codec byte + payload (compressed when it helps)
    return oid, header + nonce + _aesgcm()(key).encrypt(nonce, inner, header + oid.encode())


def open_sealed(key: bytes, oid: str, stored: bytes) -> tuple[int, bytes]:
    """Decrypt and verify one stored object (any tampering raises :class:`ObjectCorrupt`)."""
    if len(stored) < HEADER.size + NONCE + 16:
        raise ObjectCorrupt(oid, oid, "?", "truncated encrypted object")
    header = stored[: HEADER.size]
    magic, version, kind, codec, length = HEADER.unpack(header)
    nonce = stored[HEADER.size : HEADER.size + NONCE]
    try:
        inner = _aesgcm()(key).decrypt(nonce, stored[HEADER.size + NONCE :], header + oid.encode())
    except Exception:  # cryptography raises InvalidTag; anything else is damage too
        raise ObjectCorrupt(oid, oid, "?", "encrypted object fails authentication (wrong key or tampered)") from None
    plain = HEADER.pack(magic, version, kind, inner[0], length) + inner[1:]
    return objects.decode(oid, plain)


def install_key(key: bytes) -> None:
    """Let every store in this process read encrypted objects (remotes and clones included)."""
    objects.encrypted_opener = lambda oid, stored: open_sealed(key, oid, stored)


class EncryptedObjects:
    """An :class:`~agentsnap_core.stores.base.ObjectStore` that encrypts what it writes and decrypts what it reads."""

    def __init__(self, inner: Any, key: bytes, encrypt_writes: bool = True) -> None:
        self.inner, self.key, self.encrypt_writes = inner, key, encrypt_writes

    def __getattr__(self, name: str) -> Any:  # has, missing, iter_oids, age, delete, barrier, temp_files, ...
        return getattr(self.inner, name)

    def get(self, oid: str) -> tuple[int, bytes]:
        stored = self.inner.get_stored(oid)
        if objects.is_sealed(stored):
            return open_sealed(self.key, oid, stored)
        return objects.decode(oid, stored)  # objects written before encryption was enabled

    def get_stored(self, oid: str) -> bytes:
        return self.inner.get_stored(oid)  # type: ignore[no-any-return]

    def put(self, kind: int, raw: bytes | memoryview) -> str:
        if not self.encrypt_writes:
            return self.inner.put(kind, raw)  # type: ignore[no-any-return]
        oid = objects.digest(kind, raw)
        if self.inner.has(oid):
            self.inner.put(kind, raw)  # refreshes the existing object's mtime (gc grace) without re-encrypting
            return oid
        _, stored = seal(self.key, kind, raw)
        self.inner.put_stored(oid, stored)
        return oid

    def put_stored(self, oid: str, stored: bytes) -> None:
        """Copy an object in as it is stored elsewhere (push, fetch); in clear there (a store that does not encrypt,
        or written before it did), it is sealed on the way: an encrypted store never receives plain text."""
        if self.encrypt_writes and not objects.is_sealed(stored):
            _, stored = seal(self.key, *objects.decode(oid, stored))
        self.inner.put_stored(oid, stored)


def encryption_wrapper(inner: Any, refs: Any) -> Any:
    """Wrap ``inner`` when the store is encrypted or a key is given; else return it unchanged."""
    want = refs.get_config(CONFIG_ENCRYPT) == "aes-gcm"
    key = load_key()
    if key is None:
        if want:
            raise EncryptedObject("store")
        return inner
    expected = refs.get_config(CONFIG_KEY_ID)
    if want and not expected:  # an index rebuilt from the objects (stores/local.py): learn the key's fingerprint
        expected = _learn_key_id(inner, refs, key)
    if want and expected and expected != key_id(key):
        raise InvalidInput(f"{KEY_ENV} is not this store's key (fingerprint {key_id(key)}, the store wants {expected})")
    install_key(key)
    return EncryptedObjects(inner, key, encrypt_writes=want)


def _learn_key_id(inner: Any, refs: Any, key: bytes) -> str | None:
    """The fingerprint of ``key`` when it opens the store's first sealed object (then recorded, so another key is
    refused by name from now on); :class:`InvalidInput` when it does not; None when nothing is sealed yet."""
    for oid in inner.iter_oids():
        try:
            stored = inner.get_stored(oid)
        except AgentSnapError:
            continue
        if not objects.is_sealed(stored):
            continue
        try:
            open_sealed(key, oid, stored)
        except ObjectCorrupt:
            raise InvalidInput(f"{KEY_ENV} is not this store's key (fingerprint {key_id(key)}): it does not open the "
                               f"store's objects") from None
        try:
            refs.set_config(CONFIG_KEY_ID, key_id(key))
        except Exception:  # (a read-only open: learnt again next time)
            pass
        return key_id(key)
    return None


def enable_encryption(repo: Repo) -> str:
    """Encrypt every object this repository writes from now on; returns the key's fingerprint.

    The key must be in the environment (:data:`KEY_ENV` or :data:`KEY_FILE_ENV`). Objects already
    written stay readable as they are.
    """
    key = load_key()
    if key is None:
        raise InvalidInput(f"set {KEY_ENV} (64 hex characters, e.g. from agentsnap_core.format.crypto.generate_key()) first")
    repo.refs.set_config(CONFIG_KEY_ID, key_id(key))
    repo.refs.set_config(CONFIG_ENCRYPT, "aes-gcm")
    install_key(key)
    repo.objects = EncryptedObjects(repo.store.objects, key)
    try:
        repo.store.objects = repo.objects
    except AttributeError:  # pragma: no cover - a store without a settable objects attribute
        pass
    return key_id(key)


# ---------------------------------------------------------------- signing


def _ed25519() -> Any:
    try:
        from cryptography.hazmat.primitives.asymmetric import ed25519
    except ImportError:  # pragma: no cover
        raise AgentSnapError("signing needs the 'cryptography' package: pip install 'agentsnap-core[crypto]'") from None
    return ed25519


def write_key_file(path: Path, text: str, mode: int) -> None:
    """Create the key file ``path`` holding ``text``, whole or not at all: written and flushed beside it, then linked
    into place. A concurrent creator wins and its content stays; a reader never finds the file half-written (one
    made empty by O_EXCL and written after was read as "" by a second process: test_effects_key_race.py)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass
    finally:
        tmp.unlink(missing_ok=True)


def generate_signing_key(path: str | os.PathLike[str]) -> str:
    """Write a new Ed25519 private key (PEM, mode 0600) to ``path``; return its public key (hex)."""
    from cryptography.hazmat.primitives import serialization

    key = _ed25519().Ed25519PrivateKey.generate()
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption())
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(pem)
    return public_key_hex(key)


def public_key_hex(private: Any) -> str:
    from cryptography.hazmat.primitives import serialization

    raw = private.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return bytes(raw).hex()


def load_signing_key(path: str | os.PathLike[str]) -> Any:
    from cryptography.hazmat.primitives import serialization

    try:
        key = serialization.load_pem_private_key(Path(path).read_bytes(), password=None)
    except FileNotFoundError:
        raise InvalidInput(f"signing key {str(path)!r} does not exist") from None
    except ValueError as exc:
        raise InvalidInput(f"signing key {str(path)!r} is not a PEM private key ({exc})") from None
    if not isinstance(key, _ed25519().Ed25519PrivateKey):
        raise InvalidInput(f"signing key {str(path)!r} is not an Ed25519 key")
    return key


def _unsigned(manifest: dict[str, Any]) -> bytes:
    meta = dict(manifest.get("meta") or {})
    meta.pop("signature", None)
    return pack({**manifest, "meta": meta})


def sign_manifest(manifest: dict[str, Any], private: Any) -> dict[str, Any]:
    """Return ``manifest`` with ``meta.signature`` set (the caller stores the result)."""
    sig = private.sign(b"agentsnap-manifest-v1\0" + _unsigned(manifest))
    meta = dict(manifest.get("meta") or {})
    meta["signature"] = {"alg": "ed25519", "key": public_key_hex(private), "sig": sig.hex()}
    return {**manifest, "meta": meta}


def check_manifest(oid: str, manifest: dict[str, Any], trusted: Iterable[str]) -> str:
    """The signing key of a snapshot; raises :class:`UntrustedSnapshot` if unsigned, untrusted or forged."""
    meta = manifest.get("meta")
    sig = meta.get("signature") if isinstance(meta, dict) else None
    if not isinstance(sig, dict) or sig.get("alg") != "ed25519":
        raise UntrustedSnapshot(oid, "no signature")
    key_hex, sig_hex = sig.get("key"), sig.get("sig")
    if not isinstance(key_hex, str) or key_hex.lower() not in {k.lower() for k in trusted}:
        raise UntrustedSnapshot(oid, f"signed by an untrusted key {str(key_hex)[:16]}")
    try:
        public = _ed25519().Ed25519PublicKey.from_public_bytes(bytes.fromhex(key_hex))
        public.verify(bytes.fromhex(str(sig_hex)), b"agentsnap-manifest-v1\0" + _unsigned(manifest))
    except Exception:
        raise UntrustedSnapshot(oid, "the signature does not match the snapshot (forged or altered)") from None
    return key_hex


def enable_signing(repo: Repo, private_key_path: str | os.PathLike[str]) -> str:
    """Sign every snapshot this repository makes from now on; returns the public key (hex), now trusted."""
    public = public_key_hex(load_signing_key(private_key_path))
    repo.refs.set_config(CONFIG_SIGNING_KEY, str(Path(private_key_path).resolve()))
    trust(repo, public)
    return public


def trust(repo: Repo, public_key_hex_: str) -> None:
    """Add a public key to the keys :func:`verify_signatures` accepts."""
    _ed25519().Ed25519PublicKey.from_public_bytes(bytes.fromhex(public_key_hex_))  # validates
    keys = trusted_keys(repo)
    if public_key_hex_ not in keys:
        repo.refs.set_config(CONFIG_TRUSTED, ",".join([*keys, public_key_hex_]))


def trusted_keys(repo: Repo) -> list[str]:
    raw = repo.refs.get_config(CONFIG_TRUSTED) or ""
    return [k for k in raw.split(",") if k]


def maybe_sign(repo: Repo, manifest: dict[str, Any]) -> dict[str, Any]:
    """Called by :meth:`Repo.snapshot` before the manifest is stored: sign it when the repo signs."""
    path = repo.refs.get_config(CONFIG_SIGNING_KEY)
    return sign_manifest(manifest, load_signing_key(path)) if path else manifest


def _history(repo: Repo, tips: Iterable[str]) -> Iterator[tuple[str, dict[str, Any]]]:
    for snap in repo.walk(list(tips)):
        yield snap.id, snap.manifest


def verify_signatures(repo: Repo, trusted: Iterable[str] | None = None, tips: Iterable[str] | None = None
                      ) -> dict[str, Any]:
    """Check every snapshot reachable from ``tips`` (default: all branches and tags) against trusted keys."""
    keys = list(trusted) if trusted is not None else trusted_keys(repo)
    if tips is None:
        refs = repo.refs
        tips = sorted(set(refs.list_refs("refs/heads/").values()) | set(refs.list_refs("refs/tags/").values()))
    signed, problems = 0, []
    for oid, manifest in _history(repo, tips):
        try:
            check_manifest(oid, manifest, keys)
            signed += 1
        except UntrustedSnapshot as exc:
            problems.append({"id": oid, "error": exc.reason})
    return {"ok": not problems, "signed": signed, "problems": problems}


#: moved to :mod:`agentsnap_core.operations.remote` (they fetch): the old names keep working for one release
_MOVED = {"clone_verified": "agentsnap_core.operations.remote", "pull_verified": "agentsnap_core.operations.remote"}


def __getattr__(name: str) -> Any:
    if name not in _MOVED:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib
    import warnings

    warnings.warn(f"agentsnap_core.crypto.{name} moved to {_MOVED[name]}.{name}", DeprecationWarning, stacklevel=2)
    return getattr(importlib.import_module(_MOVED[name]), name)


__all__ = [
    "EncryptedObjects", "check_manifest", "enable_encryption", "enable_signing",
    "encryption_wrapper", "generate_key", "generate_signing_key", "key_id", "load_key", "maybe_sign",
    "open_sealed", "seal", "sign_manifest", "trust", "trusted_keys", "verify_signatures",
]
