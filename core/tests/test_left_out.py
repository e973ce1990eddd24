"""``Repo.left_out(path)`` says why a snapshot would not hold a path, and agrees with what a snapshot holds.

A tool that promises an undo of a change to one file (the Claude Code plugin before an ``Edit``) must know whether
the snapshot it takes holds that file: the ignore file, the store's ``world.ignore`` lines, ``.git`` and the secrets
policy all leave files out, and before ``left_out`` there was no way to ask short of taking the snapshot.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from agentsnap_core import Repo


@pytest.fixture
def repo(tmp_path: Path) -> Repo:
    work = tmp_path / "work"
    for rel, text in {"src/app.py": "x = 1\n", "data/big.csv": "1,2\n", "data/sub/deep.txt": "d\n", "notes.local.md": "n\n",
                      ".env": "TOKEN=abc\n", "build/out.bin": "o\n", "keep/.env.example": "A=\n", ".git/config": "[core]\n",
                      "docs/readme.md": "r\n"}.items():
        (work / rel).parent.mkdir(parents=True, exist_ok=True)
        (work / rel).write_text(text)
    (work / ".agentsnapignore").write_text("data/\n*.local.md\n")
    r = Repo.init(work)
    r.refs.set_config("world.ignore", "/build")
    yield r
    r.close()


@pytest.mark.parametrize("vault", ["on", "off"])
def test_left_out_agrees_with_what_a_restore_brings_back(repo: Repo, vault: str) -> None:
    """Every file is deleted after the snapshot; the restore brings back exactly the files left_out says it holds."""
    repo.refs.set_config("world.vault", vault)
    snap = repo.snapshot("all")
    files = sorted(p.relative_to(repo.root).as_posix() for p in repo.root.rglob("*") if p.is_file() and ".agentsnap" not in p.parts)
    for f in files:
        (repo.root / f).unlink()
    repo.restore(snap.id)
    back = {f for f in files if (repo.root / f).is_file()}
    assert {f for f in files if repo.left_out(f) is None} == back
    expected = {"src/app.py", "docs/readme.md", "keep/.env.example", ".agentsnapignore"} | ({".env"} if vault == "on" else set())
    assert back == expected


@pytest.mark.parametrize(("path", "why"), [
    ("data/big.csv", "ignored by .agentsnapignore or the store's world.ignore setting (in data/)"),
    ("data/new/later.txt", "ignored by .agentsnapignore or the store's world.ignore setting (in data/)"),
    ("notes.local.md", "ignored by .agentsnapignore or the store's world.ignore setting"),
    ("build/out.bin", "ignored by .agentsnapignore or the store's world.ignore setting (in build/)"),
    (".git/config", "a .git directory, not captured unless world.include_git is true (in .git/)"),
    (".agentsnap/refs.db", "inside a store (in .agentsnap/)"),
])
def test_left_out_names_the_rule(repo: Repo, path: str, why: str) -> None:
    assert repo.left_out(path) == why
    assert repo.left_out(repo.root / path) == why  # absolute paths too


def test_a_credential_file_is_left_out_only_when_the_vault_cannot_keep_it(repo: Repo) -> None:
    assert repo.left_out(".env") is None  # out of the snapshot, kept by the local vault: a restore brings it back
    (repo.root / "big.pem").write_bytes(b"-----BEGIN PRIVATE KEY-----\n" + b"A" * (16 * 1024 * 1024))
    assert repo.left_out("big.pem") == ("a credential file, not captured unless world.include_secrets is true, and larger "
                                        "than the 16 MiB the local vault keeps")
    repo.refs.set_config("world.vault", "off")
    assert repo.left_out(".env") == ("a credential file, not captured unless world.include_secrets is true, and the "
                                     "local vault is off or needs the cryptography package")


def test_a_path_outside_the_tree_or_a_new_captured_one(repo: Repo, tmp_path: Path) -> None:
    assert repo.left_out(tmp_path / "elsewhere.txt") == f"outside the tree {repo.root}"
    assert repo.left_out("../elsewhere.txt") == f"outside the tree {repo.root}"
    assert repo.left_out("src/new_module.py") is None
    repo.refs.set_config("world.include_secrets", "true")
    assert repo.left_out(".env") is None


def test_left_out_within_lists_what_a_delete_of_a_directory_takes_that_no_snapshot_holds(repo: Repo) -> None:
    assert repo.left_out_within(".") == [  # (.env: kept by the local vault)
        (".git", "a .git directory, not captured unless world.include_git is true"),
        ("build", "ignored by .agentsnapignore or the store's world.ignore setting"),
        ("data", "ignored by .agentsnapignore or the store's world.ignore setting"),
        ("notes.local.md", "ignored by .agentsnapignore or the store's world.ignore setting"),
    ]  # (each left-out directory once; the store itself is not listed)
    assert repo.left_out_within("src") == []
    assert repo.left_out_within("data") == [("data", "ignored by .agentsnapignore or the store's world.ignore setting")]
    assert repo.left_out_within("..") == [("..", f"outside the tree {repo.root}")]
    assert len(repo.left_out_within(".", limit=2)) == 2
