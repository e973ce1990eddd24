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
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from agentsnap_core.errors import AgentSnapError
from agentsnap_core.format import content
from agentsnap_core.layers.environment import REDACTED, is_secret_name
from agentsnap_core.layers.world import is_secret_file

if TYPE_CHECKING:
    from agentsnap_core.repository.repo import Repo

#: world files larger than this are not read (binary data and models rarely hold tokens in text)
MAX_SCAN_FILE = 2 * 1024 * 1024
#: at most this many findings are reported (the count says how many more there were)
MAX_FINDINGS = 500

PATTERNS: dict[str, re.Pattern[str]] = {
    name: re.compile(rx)
    for name, rx in {
        "private key": r"-----BEGIN [A-Z ]*PRIVATE KEY-----",
        "OpenAI/Anthropic key": r"\bsk-(?:ant-|proj-)?[A-Za-z0-9_\-]{16,}",
        "GitHub token": r"\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,})",
        "Slack token": r"\bxox[abprs]-[A-Za-z0-9\-]{10,}",
        "AWS access key id": r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b",
        "Google API key": r"\bAIza[0-9A-Za-z_\-]{30,}",
        "GitLab token": r"\bglpat-[A-Za-z0-9_\-]{20,}",
        "Hugging Face token": r"\bhf_[A-Za-z0-9]{30,}",
        "JWT": r"\beyJ[A-Za-z0-9_\-]{10,}\.[A-Za-z0-9_\-]{10,}\.[A-Za-z0-9_\-]{10,}",
        "password in URL": r"[a-z][a-z0-9+.\-]*://[^/\s:@]+:[^/\s@]{3,}@",
    }.items()
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


def scan_text(text: str) -> Iterator[tuple[str, str]]:
    """``(kind, masked preview)`` for every secret-shaped thing in ``text``."""
    for kind, rx in PATTERNS.items():
        for m in rx.finditer(text):
            yield kind, mask(m.group(0))
    for m in _ASSIGNMENT.finditer(text):
        name, value = m.group(1), m.group(2)
        if is_secret_name(name.replace(".", "_").replace("-", "_")) and value != REDACTED:
            yield f"secret assignment {name}", mask(value)


def _walk(value: Any, where: str, depth: int = 0) -> Iterator[tuple[str, str, str]]:
    """``(where, kind, preview)`` in a plain value (dicts, lists, strings, bytes)."""
    if depth > 64:
        return
    if isinstance(value, dict):
        for k, v in value.items():
            sub = f"{where}.{k}" if where else str(k)
            if isinstance(k, str) and is_secret_name(k) and isinstance(v, str) and len(v) >= 8 and v != REDACTED:
                yield sub, "secret-named key", mask(v)
            yield from _walk(v, sub, depth + 1)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _walk(v, f"{where}[{i}]", depth + 1)
    elif isinstance(value, (str, bytes)):
        text = value if isinstance(value, str) else value.decode("utf-8", "replace")
        for kind, preview in scan_text(text):
            yield where, kind, preview


def scan_snapshot(repo: Repo, spec: str | None = None) -> dict[str, Any]:
    """Scan one snapshot; returns ``{"id", "findings": [Finding as dict], "count", "files_scanned"}``."""
    snap = repo.get(spec)
    findings: list[Finding] = []
    files = 0
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
        try:
            value = repo.read_layer(snap, layer)
        except AgentSnapError:
            continue  # layers without a plain payload (verify reports broken ones)
        findings += [Finding(layer, w, k, p) for w, k, p in _walk(value, "")]
    unique = list(dict.fromkeys(findings))
    return {
        "id": snap.id,
        "count": len(unique),
        "files_scanned": files,
        "findings": [asdict(f) for f in unique[:MAX_FINDINGS]],
    }
