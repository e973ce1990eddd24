"""Secret redaction for stored configs and settings: by key name *and* by value shape.

One function every adapter uses before a config reaches the store. A value is a secret when

- its key looks like one (``api_key``, ``token``, ``password``, ``Authorization``, ``connection_string`` ...),
- it is a secret object (anything with ``get_secret_value()``, e.g. pydantic's ``SecretStr``),
- or its shape says so wherever it sits: a password inside a URL (``https://user:PASS@host``,
  ``postgresql://u:p@h/db``), a secret query parameter (``?api_key=...``, ``&sig=...``), or a
  well-known token (``sk-...``, ``ghp_...``, ``AKIA...``, a JWT, a PEM private key; see
  :func:`agentsnap_core.layers.environment.is_secret_value`).

By default only the secret part of a string is replaced (``https://user:<redacted>@host``), so the
rest stays readable; ``whole=`` replaces the whole value with what it returns (an adapter's marker
that its restore asks the caller to re-supply).

:func:`may_hold_secret` is the fast pre-check: False only when :func:`redact` would find nothing, so a caller
storing large or frequent values (CrewAI checkpoints, per-turn configs) skips the walk for secret-free ones.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from agentsnap_core.layers.environment import TOKEN_HINTS, TOKEN_SHAPES, is_secret_value

__all__ = ["REDACTED", "Redacted", "is_secret_key", "may_hold_secret", "redact", "redact_text", "secret_reason"]

REDACTED = "<redacted>"

_SECRET_KEY = re.compile(
    r"^(?:.*[_-])?(?:api[_-]?key|apikey|secret|secret[_-]key|client[_-]secret|password|passwd|token|"
    r"access[_-]token|refresh[_-]token|auth[_-]token|id[_-]token|bearer|authorization|private[_-]key|"
    r"credentials?|connection[_-]string|cookie|session[_-]?key|signature|sig)$",
    re.IGNORECASE,
)
#: query parameters that carry a credential even though their name is short or generic
_SECRET_PARAMS = frozenset({"key", "code", "x-amz-signature", "x-amz-credential", "x-amz-security-token",
                            "x-goog-signature", "x-goog-credential"})
_URL_USERINFO = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.\-]*://[^:/@\s?#]*:)(?P<pw>[^@/\s?#]+)(?=@)")
_QUERY_PARAM = re.compile(r"(?P<head>[?&;](?P<name>[A-Za-z0-9_.\-]+)=)(?P<value>[^&#;\s\"']+)")
_BEARER = re.compile(r"(?P<head>\b(?:Bearer|Basic|Token)\s+)(?P<value>[A-Za-z0-9._~+/=\-]{8,})", re.IGNORECASE)
_WORD = re.compile(r"[A-Za-z0-9_\-./+=]{16,}")
#: every well-known token shape wherever it sits (one with a ':' in it, a Telegram bot's, is no _WORD)
_TOKENS = re.compile(r"(?<![A-Za-z0-9_])(?:" + "|".join(TOKEN_SHAPES.values()) + ")")


def is_secret_key(key: str) -> bool:
    """True for a field name that holds a secret (``api_key``, ``DB_PASSWORD``, ``Authorization`` ...)."""
    return bool(key) and bool(_SECRET_KEY.match(key.replace(" ", "_")))


#: lower-case substrings covering the rules above, for :func:`may_hold_secret` (kept next to the rules they cover).
#: Secret key names: every ``_SECRET_KEY`` name ends in key / token / sig or contains one of these words
_KEY_WORDS = ("secret", "password", "passwd", "bearer", "authorization", "credential", "connection_string",
              "connection-string", "connection string", "cookie", "signature")
#: a value's shape: secret query parameters (``_SECRET_PARAMS`` and key names + ``=``),
#: ``Bearer``/``Basic`` credentials, and the prefixes of every token shape (``environment.TOKEN_HINTS``)
_VALUE_HINTS = _KEY_WORDS + TOKEN_HINTS + ("key=", "token=", "sig=", "code=", "x-amz-", "x-goog-", "basic", "-----begin")
#: a key ending in key / token / sig with a string (or list) value, as it reads in JSON text (``json.dumps``)
_JSON_KEY_HINTS = tuple(f'{name}"{sep}' for name in ("key", "token", "sig") for sep in (': "', ':"', ": [", ":["))
#: ``Token <credential>`` (whitespace raw, or as JSON escapes it), and an ``@`` after ``://`` before any path (URL
#: userinfo: ``_URL_USERINFO`` and the ``://u:p@`` shape of ``environment._SECRET_VALUE``)
_SHAPES = (re.compile(r"token(?:\s|\\[tnrfu])"), re.compile(r"://[^/\s?#@]*@"))  # on lower-cased text


def _text_may_hold_secret(text: str) -> bool:
    low = text.lower()
    return (any(hint in low for hint in _VALUE_HINTS) or any(hint in low for hint in _JSON_KEY_HINTS)
            or any(shape.search(low) for shape in _SHAPES))


def may_hold_secret(value: Any) -> bool:
    """False only when :func:`redact` would find no secret in ``value``: a fast pre-check, by key name and value shape.

    ``value`` is a config (nested dicts / lists / pydantic-like models) or a string, which may be the JSON text of
    one (``json.dumps`` output: secret-looking keys are found in it too). Conservative: True means "run
    :func:`redact`" (it may find nothing: ``max_tokens`` holds the word ``token`` but is no secret), never the
    other way round. A substring scan, no parsing (about 10 ms per 300 KB of text: a caller storing values that
    repeat, as CrewAI's growing checkpoints do, scans only the parts it has not seen before).
    """
    if isinstance(value, str):
        return _text_may_hold_secret(value)
    if isinstance(value, bytes):
        return _text_may_hold_secret(value.decode("utf-8", "replace"))
    if hasattr(value, "get_secret_value"):
        return True
    if hasattr(value, "model_dump"):
        value = value.model_dump()
    if isinstance(value, Mapping):
        return any(is_secret_key(str(k)) or may_hold_secret(v) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return any(may_hold_secret(v) for v in value)
    return False


def _secret_param(name: str) -> bool:
    return is_secret_key(name) or name.lower() in _SECRET_PARAMS


def redact_text(text: str, marker: str = REDACTED) -> tuple[str, list[str]]:
    """``(text with the secret parts replaced by marker, why: one reason per kind found)``.

    Finds passwords in URLs, secret query parameters, ``Bearer``/``Basic`` credentials and
    well-known token shapes anywhere in the string.
    """
    reasons: list[str] = []
    out = text
    if is_secret_value(out) and not _URL_USERINFO.search(out):  # the whole value is a token / private key
        return marker, ["token-shaped value"]

    def pw(m: re.Match[str]) -> str:
        reasons.append("password in URL")
        return m.group("head") + marker

    def param(m: re.Match[str]) -> str:
        if not _secret_param(m.group("name")) or m.group("value") == marker:
            return m.group(0)
        reasons.append(f"secret query parameter {m.group('name')}")
        return m.group("head") + marker

    def bearer(m: re.Match[str]) -> str:
        reasons.append("credential after " + m.group("head").strip())
        return m.group("head") + marker

    def token(m: re.Match[str]) -> str:
        reasons.append("token-shaped value")
        return marker

    def word(m: re.Match[str]) -> str:
        if not is_secret_value(m.group(0)):
            return m.group(0)
        reasons.append("token-shaped value")
        return marker

    out = _URL_USERINFO.sub(pw, out)
    out = _QUERY_PARAM.sub(param, out)
    out = _BEARER.sub(bearer, out)
    out = _TOKENS.sub(token, out)
    out = _WORD.sub(word, out)
    return out, list(dict.fromkeys(reasons))


def secret_reason(key: str, value: Any) -> str | None:
    """Why ``value`` under ``key`` is (or holds) a secret, or None."""
    if hasattr(value, "get_secret_value"):
        return "secret object"
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    if not isinstance(value, str) or not value:
        return None
    if is_secret_key(key):
        return f"secret-looking key {key!r}"
    _text, reasons = redact_text(value)
    return reasons[0] if reasons else None


@dataclass
class Redacted:
    """The result of :func:`redact`.

    Attributes:
        value: the redacted copy (dicts, lists and plain values; secret objects replaced).
        paths: ``{dotted path: reason}`` of every value that was (partly) redacted, in walk order.
    """

    value: Any
    paths: dict[str, str] = field(default_factory=dict)


def redact(
    value: Any,
    *,
    marker: str = REDACTED,
    whole: Callable[[str, str], Any] | None = None,
) -> Redacted:
    """A copy of ``value`` (nested dicts / lists / tuples / pydantic-like models) with every secret redacted.

    Args:
        value: the config or settings to store.
        marker: what replaces the secret part of a string.
        whole: when given, ``whole(key, path)`` replaces the *whole* secret value instead (an adapter's
            marker that its restore asks the caller to re-supply); ``key`` is the field's name.

    Returns a :class:`Redacted` (``.value``, ``.paths``).
    """
    paths: dict[str, str] = {}

    def walk(item: Any, path: str, key: str) -> Any:
        if hasattr(item, "model_dump") and not hasattr(item, "get_secret_value"):
            item = item.model_dump()
        if isinstance(item, Mapping):
            return {k: walk(v, f"{path}.{k}" if path else str(k), str(k)) for k, v in item.items()}
        if isinstance(item, (list, tuple)):
            return [walk(v, f"{path}[{i}]", key) for i, v in enumerate(item)]
        reason = secret_reason(key, item)
        if reason is None:
            return item
        paths[path] = reason
        if whole is not None:
            return whole(key, path)
        if hasattr(item, "get_secret_value") or is_secret_key(key):
            return marker
        text = item.decode("utf-8", "replace") if isinstance(item, bytes) else item
        return redact_text(text, marker)[0]

    return Redacted(walk(value, "", ""), paths)
