"""``agentsnap scan``: report secrets a snapshot would carry to a remote, before you push it.

Looks at every layer of a snapshot: world files (credential file names such as ``.env`` or
``id_rsa`` captured through an opt-in, and text content holding tokens, private keys,
``PASSWORD=...`` assignments or URLs with passwords), the recorded environment (when it was
captured with ``--no-redact``), the trace, and every other layer's plain data (secret-shaped
values and values under secret-named keys). Findings never print the secret: only its kind,
where it is and a masked preview.

The ``agentsnap scan`` command (exit status 0 nothing found, 1 secrets found, 2 error) is
:mod:`agentsnap_core.cli.scan`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import msgpack

from agentsnap_core.errors import AgentSnapError
from agentsnap_core.format import content
from agentsnap_core.format.encoding import DecodeError
from agentsnap_core.layers.environment import REDACTED, TOKEN_SHAPES, is_secret_name
from agentsnap_core.layers.world import is_secret_file

if TYPE_CHECKING:
    from agentsnap_core.repository.repo import Repo

#: world files larger than this are not read (binary data and models rarely hold tokens in text)
MAX_SCAN_FILE = 2 * 1024 * 1024
#: at most this many findings are reported (the count says how many more there were)
MAX_FINDINGS = 500

PATTERNS: dict[str, re.Pattern[str]] = {
    "private key": re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----"),
    **{kind: re.compile(r"(?<![A-Za-z0-9_])" + rx) for kind, rx in TOKEN_SHAPES.items()},  # (the one list of shapes)
    "password in URL": re.compile(r"[a-z][a-z0-9+.\-]*://[^/\s:@]+:[^/\s@]{3,}@"),
}
_ASSIGNMENT = re.compile(
    r"""(?m)^[ \t]*(?:export[ \t]+)?([A-Za-z_][A-Za-z0-9_.\-]*)[ \t]*[=:][ \t]*['"]?([^\s'"#]{8,})"""
)


@dataclass(frozen=True)
class Finding:
    layer: str  #: world, env, trace, state, ...
    where: str  #: a path, a message index, or a key path inside the layer
    kind: str  #: what was found (pattern name, "credential file", "secret-named key")
    preview: str  #: masked: never the secret itself


def mask(secret: str) -> str:
    """``sk-a…(51 chars)``: enough to recognise it, never enough to use it."""
    secret = secret.strip()
    return f"{secret[:4]}…({len(secret)} chars)"


def _raw_text(text: str) -> Iterator[tuple[str, str]]:
    """``(kind, the secret itself)`` for every secret-shaped thing in ``text`` (never printed: see :func:`mask`)."""
    for kind, rx in PATTERNS.items():
        for m in rx.finditer(text):
            yield kind, m.group(0)
    for m in _ASSIGNMENT.finditer(text):
        name, value = m.group(1), m.group(2)
        if is_secret_name(name.replace(".", "_").replace("-", "_")) and value != REDACTED:
            yield f"secret assignment {name}", value


def scan_text(text: str) -> Iterator[tuple[str, str]]:
    """``(kind, masked preview)`` for every secret-shaped thing in ``text``."""
    for kind, secret in _raw_text(text):
        yield kind, mask(secret)


class _Packed(bytes):
    """A msgpack extension's bytes (LangGraph keeps each message object so), opened when searched: a message met
    again (the same bytes, snapshot after snapshot of a growing conversation) is not searched again."""


def _unpack_data(data: bytes) -> Any:
    """``data`` as msgpack, its extension types as :class:`_Packed`; raises on what is not msgpack."""
    return msgpack.unpackb(data, raw=False, strict_map_key=False, ext_hook=lambda _code, ext: _Packed(ext))


def blob_value(data: bytes) -> Any:
    """What serialized bytes hold, to search them: their msgpack data (extension types opened too, where they hold
    msgpack: a framework's serializer, LangGraph's for one) where they parse, else the bytes themselves (JSON or
    other text)."""
    try:
        return _unpack_data(data)
    except Exception:  # (msgpack raises many types on what is not msgpack)
        return data


def _raw_walk(value: Any, where: str, depth: int = 0, memo: dict[Any, list[Any]] | None = None
              ) -> Iterator[tuple[str, str, str]]:
    """``(where, kind, the secret itself)`` in a plain value (dicts, lists, strings, bytes); ``memo`` keeps each
    text's findings, so a text met again (a conversation's earlier messages, snapshot after snapshot) is not
    searched again."""
    if depth > 64:
        return
    if isinstance(value, dict):
        for k, v in value.items():
            sub = f"{where}.{k}" if where else str(k)
            if isinstance(k, str) and is_secret_name(k) and isinstance(v, str) and len(v) >= 8 and v != REDACTED:
                yield sub, "secret-named key", v
            yield from _raw_walk(v, sub, depth + 1, memo)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _raw_walk(v, f"{where}[{i}]", depth + 1, memo)
    elif isinstance(value, _Packed):
        key = ("ext", value)
        inner = memo.get(key) if memo is not None else None
        if inner is None:
            try:
                opened: Any = _unpack_data(value)
            except Exception:  # (not msgpack inside: searched as it is)
                opened = bytes(value)
            inner = list(_raw_walk(opened, "", depth + 1, memo))
            if memo is not None:
                memo[key] = inner
        for sub, kind, secret in inner:
            yield (f"{where}{sub}" if sub.startswith("[") else f"{where}.{sub}" if where and sub else where or sub), kind, secret
    elif isinstance(value, (str, bytes)):
        found = memo.get(value) if memo is not None else None
        if found is None:
            text = value if isinstance(value, str) else value.decode("utf-8", "replace")
            found = list(_raw_text(text))
            if memo is not None:
                memo[value] = found
        for kind, secret in found:
            yield where, kind, secret


def _walk(value: Any, where: str, depth: int = 0) -> Iterator[tuple[str, str, str]]:
    """``(where, kind, masked preview)`` in a plain value (dicts, lists, strings, bytes)."""
    for sub, kind, secret in _raw_walk(value, where, depth):
        yield sub, kind, mask(secret)


def scan_snapshot(repo: Repo, spec: str | None = None) -> dict[str, Any]:
    """Scan one snapshot; returns ``{"id", "findings": [Finding as dict], "count", "files_scanned"}``."""
    snap = repo.get(spec)
    findings: list[Finding] = []
    files = 0
    secrets = _LayerSecrets(repo.objects)
    for layer, rec in sorted(snap.layers.items()):
        if layer == "world":
            for path, kind, _mode, size, ref in repo.world_entries(snap):
                if kind != "f":
                    continue
                data = content.get_bytes(repo.objects, ref, limit=MAX_SCAN_FILE) if size <= MAX_SCAN_FILE else None
                if is_secret_file(path, data):  # a CA bundle (*.pem without a private key) is not one
                    findings.append(Finding("world", path, "credential file", f"{size} bytes"))
                if data is None:
                    continue
                if b"\0" in data[:8192]:
                    continue  # binary
                files += 1
                findings += [Finding("world", path, k, p) for k, p in scan_text(data.decode("utf-8", "replace"))]
            if rec.get("env"):
                env = content.get_value(repo.objects, rec["env"], "environment")
                findings += [Finding("env", w, k, p) for w, k, p in _walk(env, "")]
            continue
        if isinstance(rec, dict):
            for _oid, found in secrets.layer(layer, rec):
                findings += [Finding(layer, where, kind, mask(secret)) for secret, (where, kind) in found.items()]
    unique = list(dict.fromkeys(findings))
    return {
        "id": snap.id,
        "count": len(unique),
        "files_scanned": files,
        "findings": [asdict(f) for f in unique[:MAX_FINDINGS]],
        "not_read": secrets.unread,
    }


#: layers whose ``refs`` are KV-cache pages or model weights (binary, often gigabytes): those are not read
BULK_LAYERS = frozenset({"world", "cache", "model"})
#: an object a layer names (``refs``) larger than this is not read; :class:`_LayerSecrets` names it as not read
MAX_SCAN_BLOB = 64 * 1024 * 1024


def _paths_of(value: Any, wanted: set[str], where: str = "", out: dict[str, str] | None = None,
              depth: int = 0) -> dict[str, str]:
    """``{object id: where it is named in value}`` for the ids in ``wanted`` (a layer document naming its refs)."""
    out = {} if out is None else out
    if depth > 64:
        return out
    if isinstance(value, dict):
        for k, v in value.items():
            _paths_of(v, wanted, f"{where}.{k}" if where else str(k), out, depth + 1)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _paths_of(v, wanted, f"{where}[{i}]", out, depth + 1)
    elif isinstance(value, str) and value in wanted:
        out.setdefault(value, where)
    return out


class _LayerSecrets:
    """The secrets in layer payloads, the objects they name (``refs``: a LangGraph thread's channel values, a CrewAI
    checkpoint) and recorded environments, by content id, each read once. What could not be read is kept in
    :attr:`unread` (said, never silently passed over)."""

    def __init__(self, objects: Any) -> None:
        self.objects = objects
        self.found: dict[str, dict[str, tuple[str, str]]] = {}
        self.texts: dict[Any, list[Any]] = {}
        self.docs: dict[str, Any] = {}
        self.unread: list[str] = []

    def _value(self, oid: str, label: str, blob: bool) -> Any:
        """The plain data at ``oid``; a payload that is not plain data is searched as serialized bytes."""
        try:
            if not blob:
                try:
                    return content.get_value(self.objects, oid, label)
                except DecodeError:
                    pass  # (not agentsnap's plain data: read as serialized bytes below)
            return blob_value(content.get_bytes(self.objects, oid, limit=MAX_SCAN_BLOB))
        except AgentSnapError as exc:
            self.unread.append(f"{label} object {oid[:12]} ({str(exc)[:120]})")
            return None

    def __call__(self, oid: str, label: str, where: str = "", blob: bool = False) -> dict[str, tuple[str, str]]:
        """``{secret: (where, kind)}`` in the value stored at ``oid``."""
        if oid not in self.found:
            value = self._value(oid, label, blob)
            if not blob:
                self.docs[oid] = value
            self.found[oid] = {secret: (w, kind) for w, kind, secret in _raw_walk(value, where, 0, self.texts)}
        return self.found[oid]

    def layer(self, name: str, rec: dict[str, Any]) -> list[tuple[str, dict[str, tuple[str, str]]]]:
        """``[(object id, {secret: (where, kind)})]`` for what layer ``name`` (its manifest record) holds as data:
        its payload and, but for :data:`BULK_LAYERS`, every object its ``refs`` name, each found where its
        payload names it (``channels.messages[2]``)."""
        label = f"{name} layer"
        out = []
        oid = rec.get("content")
        if isinstance(oid, str):
            out.append((oid, self(oid, label)))
        refs = [r for r in rec.get("refs") or [] if isinstance(r, str)] if name not in BULK_LAYERS else []
        if refs:
            wanted = set(refs) - self.found.keys()
            paths = _paths_of(self.docs.get(oid), wanted) if wanted and isinstance(oid, str) else {}
            for i, ref in enumerate(refs):
                out.append((ref, self(ref, label, paths.get(ref, f"refs[{i}]"), blob=True)))
        return out


def _payloads(manifest: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """``{layer name: its manifest record}`` of a manifest's layers that hold data, the world's recorded environment
    as ``env`` (``{"content": id}``); never the world's files."""
    out: dict[str, dict[str, Any]] = {}
    for name, rec in (manifest.get("layers") or {}).items():
        if not isinstance(rec, dict):
            continue
        if name == "world":
            if isinstance(rec.get("env"), str):
                out["env"] = {"content": rec["env"]}
        elif isinstance(rec.get("content"), str) or rec.get("refs"):
            out[name] = rec
    return out


def scan_outgoing(objects: Any, manifests: list[tuple[str, dict[str, Any]]],
                  manifest_of: Callable[[str], dict[str, Any]]) -> tuple[list[dict[str, Any]], list[str]]:
    """What a push would carry: the secrets in the trace, the recorded environment and every other non-world layer
    of the snapshots ``manifests`` names (``(id, manifest)``, those the remote lacks), each reported at the snapshot
    that brings it (one its parents do not already hold in the same layer). World files are not read: they travel as
    a git user expects files to (``agentsnap scan`` reports those). ``(masked findings, at most`` :data:`MAX_FINDINGS`
    ``, what could not be read)``."""
    secrets = _LayerSecrets(objects)
    out: list[dict[str, Any]] = []
    for oid, manifest in manifests:
        parents = []
        for parent in manifest.get("parents") or []:
            try:
                parents.append(_payloads(manifest_of(parent)))
            except AgentSnapError:
                continue  # (a parent that is not here: a shallow history)
        for layer, rec in sorted(_payloads(manifest).items()):
            theirs = [secrets.layer(layer, other[layer]) for other in parents if layer in other]
            seen = {source for found in theirs for source, _ in found}
            held = {secret for found in theirs for _, secrets_of in found for secret in secrets_of}
            for source, found in secrets.layer(layer, rec):
                if source in seen:
                    continue  # the same object as a parent's: reported there (or already on the remote)
                for secret, (where, kind) in found.items():
                    if secret not in held and len(out) < MAX_FINDINGS:
                        out.append(asdict(Finding(layer, where, kind, mask(secret))) | {"snapshot": oid})
    return out, secrets.unread
