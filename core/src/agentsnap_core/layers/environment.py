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
#: Well-known credential shapes, by what issues them: the token alone (no anchors). The one list every secret check
#: reads - ``agentsnap scan`` and push's check (:mod:`agentsnap_core.operations.scan`), a value's redaction
#: (:mod:`agentsnap_core.layers.redact`), the environment's (:func:`is_secret_value`) - each with the lower-case
#: prefix :data:`TOKEN_HINTS` holds for the fast pre-check (``tests/test_secret_shapes.py`` keeps them together).
TOKEN_SHAPES: dict[str, str] = {
    "OpenAI/Anthropic key": r"sk-(?:ant-|proj-)?[A-Za-z0-9_\-]{16,}",
    "GitHub token": r"(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,})",
    "Slack token": r"xox[abprs]-[A-Za-z0-9\-]{10,}",
    "Slack webhook": r"hooks\.slack\.com/services/T[A-Z0-9]+/B[A-Z0-9]+/[A-Za-z0-9]{16,}",
    "Discord webhook": r"discord(?:app)?\.com/api/webhooks/[0-9]{5,}/[A-Za-z0-9_\-]{30,}",
    "AWS access key id": r"(?:AKIA|ASIA)[0-9A-Z]{16}(?![0-9A-Z])",
    "Google API key": r"AIza[0-9A-Za-z_\-]{30,}",
    "Google OAuth client secret": r"GOCSPX-[A-Za-z0-9_\-]{24,}",
    "GitLab token": r"gl(?:pat|dt|rt|ptt|cbt|oas)-[A-Za-z0-9_\-]{20,}",
    "Hugging Face token": r"hf_[A-Za-z0-9]{30,}",
    "JWT": r"eyJ[A-Za-z0-9_\-]{10,}\.[A-Za-z0-9_\-]{10,}\.[A-Za-z0-9_\-]{10,}",
    "Stripe key": r"(?:sk|rk)_(?:live|test)_[0-9A-Za-z]{20,}",
    "npm token": r"npm_[A-Za-z0-9]{36}",
    "PyPI token": r"pypi-AgEIcHlwaS5vcmc[A-Za-z0-9_\-]{40,}",
    "SendGrid key": r"SG\.[A-Za-z0-9_\-]{22}\.[A-Za-z0-9_\-]{43}",
    "Mailgun key": r"key-[0-9a-zA-Z]{32}",
    "Groq key": r"gsk_[A-Za-z0-9]{48,}",
    "xAI key": r"xai-[A-Za-z0-9]{60,}",
    "Perplexity key": r"pplx-[A-Za-z0-9]{40,}",
    "Replicate token": r"r8_[A-Za-z0-9]{37}",
    "LangSmith key": r"lsv2_(?:pt|sk)_[a-f0-9]{32}_[a-f0-9]{10}",
    "Tavily key": r"tvly-(?:dev-)?[A-Za-z0-9]{30,}",
    "Pinecone key": r"pcsk_[A-Za-z0-9_]{40,}",
    "Databricks token": r"dapi[0-9a-f]{32}",
    "Notion token": r"(?:ntn_[A-Za-z0-9]{40,}|secret_[A-Za-z0-9]{43})",
    "Linear key": r"lin_api_[A-Za-z0-9]{40}",
    "Shopify token": r"shp(?:at|ss|ca|pa)_[a-fA-F0-9]{32}",
    "DigitalOcean token": r"do[por]_v1_[a-f0-9]{64}",
    "Supabase token": r"sbp_[a-f0-9]{40}",
    "Grafana token": r"gl(?:sa|c)_[A-Za-z0-9_+/=\-]{32,}",
    "Azure storage key": r"AccountKey=[A-Za-z0-9+/]{40,}={0,2}",
    "Telegram bot token": r"[0-9]{8,10}:AA[0-9A-Za-z_\-]{33}",
}
#: a lower-case substring of each shape above (a value without any of them holds none of those tokens)
TOKEN_HINTS: tuple[str, ...] = (
    "sk-", "ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_", "xox", "hooks.slack.com", "/api/webhooks/", "akia",
    "asia", "aiza", "gocspx-", "glpat-", "gldt-", "glrt-", "glptt-", "glcbt-", "gloas-", "hf_", "eyj", "sk_live_",
    "sk_test_", "rk_live_", "rk_test_", "npm_", "pypi-", "sg.", "key-", "gsk_", "xai-", "pplx-", "r8_", "lsv2_", "tvly-",
    "pcsk_", "dapi", "ntn_", "secret_", "lin_api_", "shpat_", "shpss_", "shpca_", "shppa_", "_v1_", "sbp_", "glsa_",
    "glc_", "accountkey=", ":aa",
)
_SECRET_VALUE = re.compile(
    r"^(?:[a-z]+:)?/*(?:" + "|".join(TOKEN_SHAPES.values()) + r")$"
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
