"""One redaction for every adapter's stored configs: by key name and by value shape."""

from __future__ import annotations

import pytest
from agentsnap_core.layers.redact import REDACTED, is_secret_key, may_hold_secret, redact, redact_text

PASS = "hunter2-Very-Secret"


@pytest.mark.parametrize(
    ("text", "kept"),
    [
        (f"https://alice:{PASS}@api.example.com/v1", "https://alice:<redacted>@api.example.com/v1"),
        (f"postgresql://u:{PASS}@db.internal:5432/app", "postgresql://u:<redacted>@db.internal:5432/app"),
        (f"redis://:{PASS}@cache:6379/0", "redis://:<redacted>@cache:6379/0"),
        (f"https://api.example.com/v1?api_key={PASS}&model=x", "https://api.example.com/v1?api_key=<redacted>&model=x"),
        (f"https://h/p?model=x&access_token={PASS}", "https://h/p?model=x&access_token=<redacted>"),
        (f"https://maps.example.com/?key={PASS}", "https://maps.example.com/?key=<redacted>"),
        (f"https://bucket.s3/x?X-Amz-Signature={PASS}", "https://bucket.s3/x?X-Amz-Signature=<redacted>"),
        (f"Bearer {PASS}", "Bearer <redacted>"),
        ("use sk-abcdefghijklmnopqrstuvwx1234 here", "use <redacted> here"),
    ],
)
def test_secret_parts_of_a_string_are_redacted_by_shape(text, kept):
    out, why = redact_text(text)
    assert out == kept and why
    assert PASS not in out


@pytest.mark.parametrize("text", ["https://api.example.com/v1", "https://h/p?model=gpt-4o&temperature=0",
                                  "user@example.com", "gpt-4o-mini", "/home/alice/project", "git@github.com:o/r.git"])
def test_ordinary_values_are_left_alone(text):
    assert redact_text(text) == (text, [])


@pytest.mark.parametrize("key", ["api_key", "OPENAI_API_KEY", "password", "db-password", "Authorization", "token",
                                 "refresh_token", "client_secret", "connection_string", "private_key"])
def test_secret_looking_keys(key):
    assert is_secret_key(key)


@pytest.mark.parametrize("key", ["model", "base_url", "name", "max_tokens", "tokenizer", "pwd_dir", "keywords"])
def test_ordinary_keys(key):
    assert not is_secret_key(key)


class _Secret:
    def __init__(self, v: str) -> None:
        self._v = v

    def get_secret_value(self) -> str:
        return self._v


def test_redact_walks_nested_configs_and_reports_every_path():
    config = {
        "model": "gpt-4o",
        "api_key": _Secret(PASS),
        "base_url": f"https://proxy:{PASS}@llm.example.com/v1",
        "headers": {"Authorization": f"Bearer {PASS}", "X-Trace": "abc"},
        "servers": [{"url": f"postgresql://u:{PASS}@h/db"}, {"url": f"https://h/?token={PASS}"}],
        "max_tokens": 10,
    }
    got = redact(config)
    assert PASS not in repr(got.value)
    assert got.value["model"] == "gpt-4o" and got.value["max_tokens"] == 10 and got.value["headers"]["X-Trace"] == "abc"
    assert got.value["api_key"] == REDACTED and got.value["headers"]["Authorization"] == REDACTED
    assert got.value["base_url"] == "https://proxy:<redacted>@llm.example.com/v1"
    assert got.paths == {
        "api_key": "secret object",
        "base_url": "password in URL",
        "headers.Authorization": "secret-looking key 'Authorization'",
        "servers[0].url": "password in URL",
        "servers[1].url": "secret query parameter token",
    }
    assert config["base_url"].endswith("@llm.example.com/v1") and PASS in config["base_url"]  # input untouched


def test_whole_replaces_the_entire_value_with_the_adapters_marker():
    got = redact({"base_url": f"https://u:{PASS}@h", "n": 1}, whole=lambda key, path: {"$marker": key})
    assert got.value == {"base_url": {"$marker": "base_url"}, "n": 1}
    assert list(got.paths) == ["base_url"]


# ------------------------------------------------------------------ may_hold_secret: the shared fast pre-check
SHAPED = [
    f"https://alice:{PASS}@api.example.com/v1", f"redis://:{PASS}@cache:6379/0", f"https://h/p?api_key={PASS}",
    f"https://h/?key={PASS}", f"https://h/?code={PASS}", f"https://bucket.s3/x?X-Amz-Signature={PASS}",
    f"https://h/?x-goog-credential={PASS}", f"https://h/?sig={PASS}", f"Bearer {PASS}", f"basic {PASS}",
    f"Token {PASS}", f"TOKEN\t{PASS}", f"token\n{PASS}", f"token\u00a0{PASS}", "sk-abcdefghijklmnopqrstuvwx1234",
    "ghp_abcdefghijklmnopqrstuvwxyz0123", "github_pat_abcdefghijklmnopqrstuvwxyz", "xoxb-1234567890-abcdef",
    "AKIAABCDEFGHIJKLMNOP", "AIzaSyabcdefghijklmnopqrstuvwxyz012345", "glpat-abcdefghijklmnopqrstuv",
    "hf_abcdefghijklmnopqrstuvwxyz0123456", "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkw.abcdefghijklmnop",
    "-----BEGIN RSA PRIVATE KEY-----\nMIIEow\n-----END RSA PRIVATE KEY-----", f"see https://u:{PASS}@h and more",
]
SECRET_KEYS = ["api_key", "OPENAI_API_KEY", "password", "db-password", "Authorization", "token", "refresh_token",
               "client_secret", "connection_string", "connection string", "private_key", "sessionKey", "x-api-key",
               "sig", "cookie", "credentials", "bearer", "signature", "apikey", "id-token"]
ORDINARY = ["https://api.example.com/v1", "https://h/p?model=gpt-4o&temperature=0", "user@example.com", "gpt-4o-mini",
            "/home/alice/project", "git@github.com:o/r.git", "Step 3: answer the question.", "tokenizer max_tokens 10"]


@pytest.mark.parametrize("text", SHAPED)
def test_may_hold_secret_finds_every_value_shape_redact_finds(text):
    import json

    assert redact({"field": text}).paths  # redact finds it ...
    assert may_hold_secret(text)  # ... so the pre-check must not skip it: as a value,
    assert may_hold_secret({"model": "m", "nested": [{"field": text}]})  # inside a config,
    assert may_hold_secret(json.dumps({"entities": [{"field": text}]}))  # and in the JSON text of one
    assert may_hold_secret(text.encode())


@pytest.mark.parametrize("key", SECRET_KEYS)
def test_may_hold_secret_finds_secret_key_names_in_configs_and_json_text(key):
    import json

    config = {"llm": {key: "plain-looking-value", "model": "m"}}
    assert redact(config).paths and may_hold_secret(config)
    assert may_hold_secret(json.dumps(config)) and may_hold_secret(json.dumps(config, separators=(",", ":")))
    assert may_hold_secret(json.dumps({key: ["a", "b"]}))  # a list under a secret key is redacted item by item


def test_may_hold_secret_is_false_for_ordinary_configs_and_text():
    import json

    config = {"model": "gpt-4o", "max_tokens": 10, "tools": ORDINARY, "keywords": ["a"], "nested": {"n": 1.5}}
    assert not redact(config).paths
    assert not may_hold_secret(config) and not may_hold_secret(json.dumps(config))
    assert not any(may_hold_secret(text) for text in ORDINARY)
    assert may_hold_secret({"api_key": _Secret(PASS)}) and may_hold_secret(_Secret(PASS))


def test_may_hold_secret_never_misses_what_redact_finds_in_generated_values():
    """A conservative superset, checked on values built from the pieces every rule looks at."""
    import itertools
    import json
    import random

    pieces = ["https://", "u", ":", PASS, "@", "h", "?", "&", "=", "key", "token", "sig", "code", "Bearer ", "Token\t",
              "sk-", "abcdefghijklmnopqrstuvwxyz", "ghp_", "AKIA", "ABCDEFGHIJKLMNOP", "eyJ", ".", "-----BEGIN ",
              "PRIVATE KEY-----", "x-amz-signature", " ", "password", "_", "/"]
    rng = random.Random(23)
    values = ["".join(rng.choice(pieces) for _ in range(rng.randint(1, 8))) for _ in range(3000)]
    values += ["".join(p) for p in itertools.product(["Bearer ", "token ", "https://a:"], [PASS], ["", "@h"])]
    keys = ["field", "api_key", "name", "auth-token", "sig", "url"]
    for value, key in zip(values, itertools.cycle(keys)):
        config = {"outer": [{key: value}]}
        if redact(config).paths:
            assert may_hold_secret(config), config
            assert may_hold_secret(json.dumps(config)), config
