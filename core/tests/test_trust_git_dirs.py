""".git directories: by default no snapshot holds them (git keeps its own history), and that is now said plainly -
``init`` says it of the project's .git, snapshot and status name every nested repository's .git, ``--json`` lists
them all, and a restore that cannot bring one back says so instead of printing only "undo with". Before, all of it
was silent: ``rm -rf vendor/lib`` then a restore gave back the files of a clone without its .git (so ``git`` there
acted on the enclosing repository), and nothing said a deleted .git or a dropped stash could not come back.

``agentsnap config world.include_git true`` (the command the Claude Code plugin's README already named, which did
not exist) makes snapshots hold them; a restore of an earlier snapshot, taken without them, then leaves the .git
directories alone instead of deleting them as files the snapshot does not have."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from trust_kit import cli

GIT = shutil.which("git")
pytestmark = pytest.mark.skipif(GIT is None and os.environ.get("CI") != "true", reason="git is not installed")

ENV = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@x", "GIT_COMMITTER_NAME": "t",
       "GIT_COMMITTER_EMAIL": "t@x", "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=root, env=ENV, capture_output=True, text=True, check=True).stdout


def repo_with_commit(root: Path, name: str) -> None:
    root.mkdir(parents=True, exist_ok=True)
    (root / name).write_text(f"{name}\n")
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", name)


@pytest.fixture
def work(tmp_path: Path) -> Path:
    """A git project with a clone of another repository inside (vendor/lib), and an agentsnap store."""
    root = tmp_path / "work"
    repo_with_commit(root, "app.py")
    repo_with_commit(root / "vendor" / "lib", "lib.py")
    return root


def test_init_says_the_projects_git_is_not_captured_and_how_to_capture_it(work: Path) -> None:
    code, out, err = cli(work, "init")
    assert code == 0, err
    assert "note: .git is not captured" in err and "agentsnap config world.include_git true" in err, err
    assert out.startswith("Initialised agentsnap store")  # stdout as before
    code, out, err = cli(work / "vendor", "init", "--json")  # (a tree without a .git of its own at the top)
    assert code == 0 and json.loads(out)["git_not_captured"] is False and not err, err


def test_snapshot_and_status_name_the_nested_repositories_git_and_json_lists_all(work: Path) -> None:
    assert cli(work, "init")[0] == 0
    code, out, err = cli(work, "snapshot", "-m", "s")
    assert code == 0 and len(out.strip()) == 64, err  # stdout stays the id
    assert "not captured: the .git of a nested git repository (vendor/lib/.git)" in err, err
    assert "agentsnap config world.include_git true" in err
    assert ".git (" not in err.replace("lib/.git (", "")  # the project's own .git: said by init, not every time
    code, out, err = cli(work, "snapshot", "-m", "again", "--json")
    assert code == 0, err
    assert json.loads(out)["world"]["git_not_captured"] == [".git", "vendor/lib/.git"]
    code, out, err = cli(work, "status")
    assert code == 0 and "nothing changed" in out and "vendor/lib/.git" in err, out + err
    assert json.loads(cli(work, "status", "--json")[1])["git_not_captured"] == [".git", "vendor/lib/.git"]


def test_a_restore_says_which_git_directories_it_cannot_bring_back(work: Path, tmp_path: Path) -> None:
    assert cli(work, "init")[0] == 0
    snap = cli(work, "snapshot", "-m", "s")[1].strip()
    shutil.rmtree(work / "vendor")
    code, out, err = cli(work, "restore", "HEAD")
    assert code == 0, err
    assert (work / "vendor" / "lib" / "lib.py").read_text() == "lib.py\n"  # the files come back
    assert not (work / "vendor" / "lib" / ".git").exists()
    assert f"not brought back: vendor/lib/.git - snapshot {snap[:12]} did not capture it" in err, err
    assert "undo with" in out
    code, out, err = cli(work, "restore", "HEAD", "--json")  # now nothing is missing but that .git
    assert code == 0 and json.loads(out)["git_not_restored"] == ["vendor/lib/.git"], out + err
    code, out, err = cli(work, "restore", snap, "--to", str(tmp_path / "copy"))
    assert code == 0 and "not brought back: .git, vendor/lib/.git" in err, err
    shutil.rmtree(work / ".git")
    shutil.rmtree(work / "vendor")
    code, out, err = cli(work, "restore", "HEAD", "--", "vendor")  # only what is below the paths restored is said
    assert code == 0 and "not brought back: vendor/lib/.git -" in err, err


def test_with_include_git_a_deleted_git_and_a_dropped_stash_come_back(work: Path) -> None:
    assert cli(work, "init")[0] == 0
    code, out, err = cli(work, "config", "world.include_git", "true")
    assert code == 0 and out.strip() == "world.include_git = true", out + err
    (work / "app.py").write_text("work in progress\n")
    git(work, "stash", "-q")
    stash = git(work, "stash", "list")
    assert stash and (work / "app.py").read_text() == "app.py\n"
    code, out, err = cli(work, "snapshot", "-m", "with .git", "--json")
    assert code == 0 and json.loads(out)["world"]["git_not_captured"] == [], err
    assert "not captured" not in err
    git(work, "stash", "drop", "-q")
    shutil.rmtree(work / ".git")
    shutil.rmtree(work / "vendor")
    code, out, err = cli(work, "restore", "HEAD")
    assert code == 0 and "not brought back" not in err, err
    assert git(work, "stash", "list") == stash
    git(work, "stash", "pop", "-q")
    assert (work / "app.py").read_text() == "work in progress\n"
    assert git(work / "vendor" / "lib", "log", "--format=%s") == "lib.py\n"  # its own repository again


def test_a_restore_of_a_snapshot_taken_without_git_leaves_the_git_directories_alone(work: Path) -> None:
    assert cli(work, "init")[0] == 0
    before = cli(work, "snapshot", "-m", "without .git")[1].strip()
    assert cli(work, "config", "world.include_git", "true")[0] == 0
    (work / "new.txt").write_text("n\n")
    git(work, "add", "new.txt")
    git(work, "commit", "-q", "-m", "new")
    assert cli(work, "snapshot", "-m", "with .git")[0] == 0
    code, out, err = cli(work, "restore", before, "--dry-run")
    assert code == 0 and out.strip() == "would restore (deleted): new.txt", out + err
    code, out, err = cli(work, "restore", before)
    assert code == 0, err
    assert not (work / "new.txt").exists()
    assert git(work, "log", "--format=%s") == "new\napp.py\n"  # git's history as it was: not the snapshot's to remove
    assert git(work / "vendor" / "lib", "log", "--format=%s") == "lib.py\n"


def test_config_shows_checks_and_unsets_and_a_refused_value_changes_nothing(work: Path) -> None:
    assert cli(work, "init")[0] == 0
    code, out, err = cli(work, "config")
    assert code == 0 and "world.include_git = false (default)" in out and "world.vault = on (default)" in out, out + err
    for args, says in ((["world.nope", "1"], "unknown setting 'world.nope'; the settings are: du.warn_bytes"),
                       (["world.include_git", "maybe"], "'world.include_git' is true or false, not 'maybe'"),
                       (["du.warn_bytes", "12k"], "'du.warn_bytes' is a number of bytes, not '12k'"),
                       (["crypto.encrypt", "aes-gcm"], "'crypto.encrypt' is managed by agentsnap"),
                       (["--unset", "world.include_git", "true"], "--unset takes a KEY and no VALUE")):
        code, out, err = cli(work, "config", *args)
        assert code == 2 and says in err and "Traceback" not in err, (args, err)
    assert json.loads(cli(work, "config", "--json")[1])["settings"]["world.include_git"]["value"] is None
    assert cli(work, "config", "world.include_git", "YES")[1].strip() == "world.include_git = true"
    assert cli(work, "config", "world.include_git")[1].strip() == "true"
    assert cli(work, "config", "world.ignore", "build/\n\n*.log")[0] == 0
    assert json.loads(cli(work, "config", "world.ignore", "--json")[1])["value"] == "build/\n*.log"
    code, out, err = cli(work, "config", "--unset", "world.include_git")
    assert code == 0 and out.strip() == "world.include_git = false (default)", out + err
    assert json.loads(cli(work, "config", "world.include_git", "--json")[1]) == {
        "v": 1, "key": "world.include_git", "value": None, "default": "false"}
    (work / "build").mkdir()
    (work / "build" / "out.o").write_text("o")
    code, out, err = cli(work, "snapshot", "--json")
    assert code == 0 and json.loads(out)["world"]["files"] == 2, out + err  # app.py, lib.py; build/ as world.ignore says


def test_the_git_directories_a_restore_leaves_alone_are_those_the_snapshot_does_not_hold() -> None:
    from agentsnap_core.layers.world import without_git_dirs

    current = [(".git", "d", 0o755, 0, ""), (".git/HEAD", "f", 0o644, 5, "h"), ("a.py", "f", 0o644, 1, "a"),
               ("mod", "d", 0o755, 0, ""), ("mod/.git", "f", 0o644, 9, "g"),  # a submodule's pointer file: kept
               ("v", "d", 0o755, 0, ""), ("v/.git", "d", 0o755, 0, ""), ("v/.git/config", "f", 0o644, 3, "c"),
               ("v/.github", "d", 0o755, 0, ""), ("v/.gitx", "f", 0o644, 1, "x")]
    assert [e[0] for e in without_git_dirs(current, [])] == ["a.py", "mod", "mod/.git", "v", "v/.github", "v/.gitx"]
    # a snapshot that holds v/.git (taken with .git before its record said so): that one is restored as usual
    assert [e[0] for e in without_git_dirs(current, [("v/.git", "d", 0o755, 0, "")])] == [
        "a.py", "mod", "mod/.git", "v", "v/.git", "v/.git/config", "v/.github", "v/.gitx"]


def test_a_switch_says_what_its_restore_could_not_bring_back(work: Path) -> None:
    """`switch` restores the branch's snapshot: what that restore says (a .git it cannot bring back, secret files the
    vault could not give back) was dropped from its answer and output; now it says it as restore does."""
    assert cli(work, "init")[0] == 0
    assert cli(work, "snapshot", "-m", "with vendor/lib")[0] == 0
    assert cli(work, "branch", "with-lib")[0] == 0
    shutil.rmtree(work / "vendor")
    assert cli(work, "snapshot", "-m", "without it")[0] == 0
    code, out, err = cli(work, "switch", "with-lib")
    assert code == 0 and out.startswith("switched to with-lib"), out + err
    assert (work / "vendor" / "lib" / "lib.py").exists() and "not brought back: vendor/lib/.git" in err, err
    assert cli(work, "switch", "main")[0] == 0
    code, out, err = cli(work, "switch", "with-lib", "--json")
    assert code == 0 and json.loads(out)["git_not_restored"] == ["vendor/lib/.git"], out + err
