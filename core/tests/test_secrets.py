"""Secrets: credential files stay out of world capture unless opted in; ``agentsnap scan`` reports secrets."""

from __future__ import annotations

from pathlib import Path

import pytest
from agentsnap_core import Repo
from agentsnap_core.layers.world import is_secret_file

SECRET_FILES = [
    ".env", ".env.local", "config/.env.production", "certs/server.pem", "keys/id_rsa", "keys/id_ed25519.pub",
    ".netrc", ".npmrc", ".pypirc", "gcp/credentials.json", ".aws/credentials", "home/.aws/credentials",
]
HARMLESS = [".env.example", "src/env.py", "README.md", ".aws/config", "pem/readme.txt", "credentials.md"]


def _plant(root: Path, paths: list[str]) -> None:
    for rel in paths:
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        key = "-----BEGIN PRIVATE KEY-----\n" if rel.endswith(".pem") else ""  # a PEM is a secret by content
        p.write_text(f"{key}content of {rel}\n")


@pytest.mark.parametrize("rel", SECRET_FILES)
def test_secret_names(rel: str) -> None:
    assert is_secret_file(rel)


@pytest.mark.parametrize("rel", HARMLESS)
def test_harmless_names(rel: str) -> None:
    assert not is_secret_file(rel)


@pytest.mark.parametrize("with_ignore_file", [False, True], ids=["defaults", "agentsnapignore"])
def test_credential_files_are_not_captured_by_default(repo: Repo, with_ignore_file: bool) -> None:
    _plant(repo.root, SECRET_FILES + HARMLESS)
    if with_ignore_file:
        (repo.root / ".agentsnapignore").write_text("*.log\n")
    files = {e[0] for e in repo.world_entries(repo.snapshot("s")) if e[1] == "f"}
    assert not files & set(SECRET_FILES)
    assert set(HARMLESS) <= files
    assert repo.status()["clean"]  # status and restore see the same world


def test_opt_in_by_config_by_flag_and_by_negation(repo: Repo) -> None:
    _plant(repo.root, SECRET_FILES)
    flagged = {e[0] for e in repo.world_entries(repo.snapshot("flag", include_secrets=True)) if e[1] == "f"}
    assert set(SECRET_FILES) <= flagged
    (repo.root / ".agentsnapignore").write_text("!.env\n")
    negated = {e[0] for e in repo.world_entries(repo.snapshot("negation")) if e[1] == "f"}
    assert ".env" in negated and ".npmrc" not in negated
    repo.refs.set_config("world.include_secrets", "true")
    configured = {e[0] for e in repo.world_entries(repo.snapshot("config")) if e[1] == "f"}
    assert set(SECRET_FILES) <= configured


def test_restore_in_place_leaves_uncaptured_secrets_alone(repo: Repo) -> None:
    (repo.root / "a.txt").write_text("a")
    first = repo.snapshot("one")
    (repo.root / ".env").write_text("API_KEY=sk-live")
    (repo.root / "b.txt").write_text("b")
    repo.snapshot("two")
    repo.restore(first.id)
    assert (repo.root / ".env").read_text() == "API_KEY=sk-live"
    assert not (repo.root / "b.txt").exists()


# ---------------------------------------------------------------- agentsnap scan

TOKEN = "sk-proj-" + "A1b2C3d4E5f6G7h8I9j0" * 2
GH = "ghp_" + "x" * 36


def _dirty_snapshot(repo: Repo, monkeypatch: pytest.MonkeyPatch) -> str:
    (repo.root / ".env").write_text(f"OPENAI_API_KEY={TOKEN}\n")
    (repo.root / "deploy.sh").write_text("export DB_PASSWORD=hunter2hunter2\ngit clone https://bob:s3cr3tpw@example.com/x\n")
    (repo.root / "key.txt").write_text("-----BEGIN OPENSSH PRIVATE KEY-----\nabc\n")
    (repo.root / "clean.py").write_text("print('hello')\n")
    (repo.root / "blob.bin").write_bytes(b"\0\1\2" + TOKEN.encode())  # binary: not scanned
    repo.append_message("user", f"my token is {GH}, please use it")
    monkeypatch.setenv("MY_SERVICE_TOKEN", "tok_abcdefgh12345678")
    snap = repo.snapshot("dirty", include_secrets=True, redact_env=False,
                         layers={"state": {"config": {"api_key": "plain-secret-value-123"}, "n": 3}})
    return snap.id


def test_scan_reports_secrets_in_every_layer_without_printing_them(repo: Repo, monkeypatch: pytest.MonkeyPatch) -> None:
    from agentsnap_core.operations.scan import scan_snapshot

    oid = _dirty_snapshot(repo, monkeypatch)
    report = scan_snapshot(repo, oid)
    got = {(f["layer"], f["where"], f["kind"]) for f in report["findings"]}
    assert ("world", ".env", "credential file") in got
    assert ("world", ".env", "OpenAI/Anthropic key") in got
    assert ("world", "deploy.sh", "secret assignment DB_PASSWORD") in got
    assert ("world", "deploy.sh", "password in URL") in got
    assert ("world", "key.txt", "private key") in got
    assert ("trace", "[0].content", "GitHub token") in got
    assert ("state", "config.api_key", "secret-named key") in got
    assert ("env", "MY_SERVICE_TOKEN", "secret-named key") in got
    assert not any(f["where"] in ("clean.py", "blob.bin") for f in report["findings"])
    text = repr(report)
    for secret in (TOKEN, GH, "hunter2hunter2", "s3cr3tpw", "plain-secret-value-123", "tok_abcdefgh12345678"):
        assert secret not in text


def test_scan_of_a_default_snapshot_is_clean(repo: Repo, monkeypatch: pytest.MonkeyPatch) -> None:
    from agentsnap_core.operations.scan import scan_snapshot

    (repo.root / ".env").write_text(f"OPENAI_API_KEY={TOKEN}\n")  # excluded by default
    (repo.root / "app.py").write_text("API_URL = 'https://example.com'\npassword = input()\n")
    monkeypatch.setenv("MY_SERVICE_TOKEN", "tok_abcdefgh12345678")  # redacted by default
    report = scan_snapshot(repo, repo.snapshot("clean").id)
    assert report["count"] == 0, report["findings"]
    assert report["files_scanned"] == 1


def test_scan_cli_exit_codes_and_json(repo: Repo, monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    from agentsnap_core.cli import main
    from click.testing import CliRunner

    (repo.root / "a.txt").write_text("nothing here\n")
    clean = repo.snapshot("clean").id
    dirty = _dirty_snapshot(repo, monkeypatch)
    runner = CliRunner()
    ok = runner.invoke(main, ["-C", str(repo.root), "scan", clean])
    assert ok.exit_code == 0 and "no secrets found" in ok.output
    bad = runner.invoke(main, ["-C", str(repo.root), "scan", dirty, "--json"])
    assert bad.exit_code == 1
    doc = json.loads(bad.output)
    assert doc["v"] == 1 and doc["id"] == dirty and doc["count"] >= 7
    assert TOKEN not in bad.output
    missing = runner.invoke(main, ["-C", str(repo.root), "scan", "nope"])
    assert missing.exit_code == 2 and "unknown snapshot" in missing.output
