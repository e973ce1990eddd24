"""Files the secrets policy leaves out are named, decided by content where the name says too little."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from trust_kit import cli, new_work

CA_BUNDLE = "-----BEGIN CERTIFICATE-----\nMIIFazCCA1OgAwIBAgIRAIIQz7DSQONZRGPgu2OCiwAwDQYJ\n-----END CERTIFICATE-----\n"
PRIVATE = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAx\n-----END RSA PRIVATE KEY-----\n"
PUBLIC = "-----BEGIN PUBLIC KEY-----\nMIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8A\n-----END PUBLIC KEY-----\n"
TREE = {
    ".venv/lib/python3.12/site-packages/certifi/cacert.pem": CA_BUNDLE,  # public: TLS breaks without it
    "tls/server.crt.pem": CA_BUNDLE + PRIVATE,  # a bundle with a key inside is a secret
    "tls/server.key": PRIVATE,  # *.key decided like *.pem
    "tls/public.key": PUBLIC,
    ".env": "OPENAI_API_KEY=sk-xxxxxxxxxxxxxxxxxxxxxxxx\n",
    "app.py": "print('hi')\n",
}
SECRETS = [".env", "tls/server.crt.pem", "tls/server.key"]


@pytest.fixture
def work(tmp_path: Path) -> Path:
    return new_work(tmp_path, TREE)


def _restored(work: Path, dest: Path) -> set[str]:
    code, _, err = cli(work, "restore", "HEAD", "--to", str(dest))
    assert code == 0, err
    return {str(p.relative_to(dest)) for p in dest.rglob("*") if p.is_file()}


@pytest.mark.parametrize("with_ignore_file", [False, True], ids=["defaults", "agentsnapignore"])
def test_snapshot_and_status_name_every_file_left_out(work: Path, tmp_path: Path, with_ignore_file: bool) -> None:
    if with_ignore_file:
        (work / ".agentsnapignore").write_text("*.log\n")
    code, out, err = cli(work, "snapshot", "-m", "s")
    assert code == 0 and len(out.strip()) == 64  # stdout stays the id
    assert "kept 3 secret file(s) encrypted in the local store" in err and all(s in err for s in SECRETS), err
    assert "--include-secrets" in err
    code, out, _ = cli(work, "snapshot", "-m", "again", "--json")
    assert json.loads(out)["world"]["left_out"] == SECRETS
    code, out, err = cli(work, "status")
    assert code == 0 and "nothing changed" in out and all(s in err for s in SECRETS), out + err
    assert json.loads(cli(work, "status", "--json")[1])["left_out"] == SECRETS
    files = _restored(work, tmp_path / "copy")
    assert ".venv/lib/python3.12/site-packages/certifi/cacert.pem" in files  # a restored venv keeps TLS working
    assert "tls/public.key" in files
    assert files & set(SECRETS) == set(SECRETS)  # not from the snapshot: from this store's vault (test_secrets_vault.py)


def test_include_secrets_switch_captures_them(work: Path, tmp_path: Path) -> None:
    code, out, err = cli(work, "snapshot", "-m", "all", "--include-secrets", "--json")
    assert code == 0, err
    assert json.loads(out)["world"]["left_out"] == []
    assert set(TREE) <= _restored(work, tmp_path / "copy")


def test_turning_secret_capture_on_for_the_store_says_what_it_means(work: Path) -> None:
    """``agentsnap config world.include_secrets true`` printed only "world.include_secrets = true": nothing said that
    from then on ``.env`` and private keys are stored as plain files and go to the remote with every push
    (``world.include_git`` says what it changes)."""
    code, out, err = cli(work, "config", "world.include_secrets", "true")
    assert code == 0 and out.strip() == "world.include_secrets = true", (out, err)
    assert "credential files" in err and "push" in err and "agentsnap scan" in err, err
    code, _out, err = cli(work, "config", "world.include_secrets", "false")
    assert code == 0 and err == "", err
