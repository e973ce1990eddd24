"""Environment capture with secret redaction (on by default)."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

REDACTED = "<redacted>"

_SECRET_NAME = re.compile(
    r"(^|_)(KEY|TOKEN|SECRET|PASSWORD|PASSWD|PASS|PWD|CREDENTIALS?|AUTH|COOKIE|SESSION|PRIVATE)(_|$)"
    r"|APIKEY|ACCESS_?KEY|SECRET",
    re.IGNORECASE,
)
_NOT_SECRET_NAMES = {"PWD", "OLDPWD", "SSH_AUTH_SOCK", "XDG_SESSION_ID", "XDG_SESSION_TYPE", "XDG_SESSION_CLASS"}
_SECRET_VALUE = re.compile(
    r"^(sk-[A-Za-z0-9_\-]{16,}|sk-ant-[A-Za-z0-9_\-]{16,}|gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}"
    r"|xox[abprs]-[A-Za-z0-9\-]{10,}|AKIA[0-9A-Z]{16}|ASIA[0-9A-Z]{16}|AIza[0-9A-Za-z_\-]{30,}"
    r"|glpat-[A-Za-z0-9_\-]{20,}|hf_[A-Za-z0-9]{30,}|eyJ[A-Za-z0-9_\-]{10,}\.[A-Za-z0-9_\-]{10,}\.[A-Za-z0-9_\-]{10,})$"
    r"|-----BEGIN [A-Z ]*PRIVATE KEY-----"
    r"|://[^/\s:@]+:[^/\s@]+@"
)


def is_secret_name(name: str) -> bool:
    return name.upper() not in _NOT_SECRET_NAMES and bool(_SECRET_NAME.search(name))


def is_secret_value(value: str) -> bool:
    return bool(_SECRET_VALUE.search(value.strip()))


def redact_env(env: Mapping[str, str], redact: bool = True) -> dict[str, str]:
    """A copy of ``env`` with secret-looking names and values replaced by ``<redacted>``."""
    if not redact:
        return dict(env)
    return {k: (REDACTED if is_secret_name(k) or is_secret_value(v) else v) for k, v in env.items()}


def capture_env(redact: bool = True) -> dict[str, str]:
    return redact_env(os.environ, redact)
