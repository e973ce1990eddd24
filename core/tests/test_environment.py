from __future__ import annotations

from agentsnap_core import Repo
from agentsnap_core.format import content
from agentsnap_core.layers.environment import REDACTED, redact_env


def test_secret_names_and_values_are_redacted() -> None:
    env = {
        "OPENAI_API_KEY": "sk-abc",
        "GITHUB_TOKEN": "x",
        "DB_PASSWORD": "hunter2",
        "AWS_SECRET_ACCESS_KEY": "y",
        "MY_SECRET": "z",
        "INNOCENT": "sk-proj-aaaaaaaaaaaaaaaaaaaaaaaaaaaa",
        "DATABASE_URL": "postgresql://user:pw@host/db",
        "SLACK": "xoxb-123456789012-abcdef",
        "PATH": "/usr/bin",
        "PWD": "/home/me",
        "KEYBOARD": "us",
        "HOME": "/root",
    }
    out = redact_env(env)
    for k in ("OPENAI_API_KEY", "GITHUB_TOKEN", "DB_PASSWORD", "AWS_SECRET_ACCESS_KEY", "MY_SECRET", "INNOCENT", "DATABASE_URL", "SLACK"):
        assert out[k] == REDACTED, k
    for k in ("PATH", "PWD", "KEYBOARD", "HOME"):
        assert out[k] == env[k], k


def test_snapshot_env_is_redacted_by_default(repo: Repo, monkeypatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-api03-verysecretvalue-000000")
    snap = repo.snapshot("s")
    env = content.get_value(repo.objects, snap.layers["world"]["env"])
    assert env["ANTHROPIC_API_KEY"] == REDACTED
    for oid in repo.objects.iter_oids():
        assert b"verysecretvalue" not in repo.objects.get(oid)[1]
