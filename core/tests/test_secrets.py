"""Secrets: credential files stay out of world capture unless opted in; ``agentsnap scan`` reports secrets."""

from __future__ import annotations

from pathlib import Path

import pytest
from agentsnap import Repo
from agentsnap.world import is_secret_file

SECRET_FILES = [
    ".env", ".env.local", "config/.env.production", "certs/server.pem", "keys/id_rsa", "keys/id_ed25519.pub",
    ".netrc", ".npmrc", ".pypirc", "gcp/credentials.json", ".aws/credentials", "home/.aws/credentials",
]
HARMLESS = [".env.example", "src/env.py", "README.md", ".aws/config", "pem/readme.txt", "credentials.md"]


def _plant(root: Path, paths: list[str]) -> None:
    for rel in paths:
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(f"content of {rel}\n")


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
