"""Every well-known credential shape is found by every secret check: scan and push's check, a value's redaction, the
environment's. The shapes live in one list (``environment.TOKEN_SHAPES``); before it, scan knew ten and redaction its
own copy of them, so a Stripe, npm, PyPI, SendGrid, Groq, Replicate, Databricks, Azure storage or Telegram token
pasted into an agent's chat or written to a file was pushed to the team's store with 'no secrets found' (the rows
of those kinds fail on the code before this change)."""

from __future__ import annotations

import random
import string

import pytest
from agentsnap_core.layers.environment import TOKEN_HINTS, TOKEN_SHAPES, is_secret_value, redact_env
from agentsnap_core.layers.redact import may_hold_secret, redact, redact_text
from agentsnap_core.operations.scan import scan_text

_rng = random.Random(7)
ALNUM = string.ascii_letters + string.digits
HEX = "0123456789abcdef"


def _r(n: int, alphabet: str = ALNUM) -> str:
    return "".join(_rng.choice(alphabet) for _ in range(n))


SAMPLES: dict[str, str] = {
    "OpenAI/Anthropic key": "sk-proj-" + _r(48),
    "GitHub token": "ghp_" + _r(36),
    "Slack token": "xoxb-" + _r(11, string.digits) + "-" + _r(24),
    "Slack webhook": "https://hooks.slack.com/services/T" + _r(8, string.ascii_uppercase) + "/B" + _r(8, string.ascii_uppercase) + "/" + _r(24),
    "Discord webhook": "https://discord.com/api/webhooks/" + _r(18, string.digits) + "/" + _r(68),
    "AWS access key id": "AKIA" + _r(16, string.ascii_uppercase + string.digits),
    "Google API key": "AIza" + _r(35),
    "Google OAuth client secret": "GOCSPX-" + _r(28),
    "GitLab token": "glpat-" + _r(20),
    "Hugging Face token": "hf_" + _r(34),
    "JWT": "eyJhbGciOiJIUzI1NiJ9." + _r(40) + "." + _r(43),
    "Stripe key": "sk_live_" + _r(24),
    "npm token": "npm_" + _r(36),
    "PyPI token": "pypi-AgEIcHlwaS5vcmc" + _r(60),
    "SendGrid key": "SG." + _r(22) + "." + _r(43),
    "Mailgun key": "key-" + _r(32),
    "Groq key": "gsk_" + _r(52),
    "xAI key": "xai-" + _r(80),
    "Perplexity key": "pplx-" + _r(48),
    "Replicate token": "r8_" + _r(37),
    "LangSmith key": "lsv2_pt_" + _r(32, HEX) + "_" + _r(10, HEX),
    "Tavily key": "tvly-dev-" + _r(32),
    "Pinecone key": "pcsk_" + _r(60),
    "Databricks token": "dapi" + _r(32, HEX),
    "Notion token": "ntn_" + _r(46),
    "Linear key": "lin_api_" + _r(40),
    "Shopify token": "shpat_" + _r(32, HEX),
    "DigitalOcean token": "dop_v1_" + _r(64, HEX),
    "Supabase token": "sbp_" + _r(40, HEX),
    "Grafana token": "glsa_" + _r(32) + "_" + _r(8, HEX),
    "Azure storage key": "AccountKey=" + _r(86) + "==",
    "Telegram bot token": _r(10, string.digits) + ":AA" + _r(33),
}


def test_every_shape_has_a_sample_here() -> None:
    assert set(SAMPLES) == set(TOKEN_SHAPES)


@pytest.mark.parametrize("kind", sorted(SAMPLES))
def test_every_check_finds_every_shape(kind: str) -> None:
    token = SAMPLES[kind]
    line = f'config = {{"note": "use {token} for now"}}\n'
    assert kind in {k for k, _ in scan_text(line)}, "scan (and push's check) misses it"
    assert token not in " ".join(p for _, p in scan_text(line))  # (only a masked preview is ever shown)
    assert is_secret_value(token), "the environment's check misses it as a whole value"
    assert redact_env({"SOME_SETTING": token})["SOME_SETTING"] == "<redacted>"
    assert may_hold_secret(token) and may_hold_secret(line), "the pre-check would skip the redaction"
    assert any(h in token.lower() for h in TOKEN_HINTS)
    text, reasons = redact_text(f"use {token} for now")
    assert token not in text and reasons, f"redaction leaves it: {text!r}"
    assert token not in repr(redact({"messages": [{"role": "user", "content": f"my key is {token}"}]}))


@pytest.mark.parametrize("text", [
    "sk-short", "key-value store", "the secret_sauce of it", "AKIA" + "X" * 20, "dapi_version = 3",
    "npm_config_cache=/tmp", "see hooks.slack.com/services for docs", "time 12:30:AA",
    "shpat_ is Shopify's prefix", "SG.1.2",
])
def test_look_alikes_are_not_secrets(text: str) -> None:
    assert list(scan_text(text)) == [] and redact_text(text)[1] == []
