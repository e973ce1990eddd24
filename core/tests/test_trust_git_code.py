"""A snapshot from elsewhere never writes git's config or hooks: they name commands git runs by itself.

Reported (tried as a user): a teammate's project snapshotted with its ``.git`` (``world.include_git``, the Claude Code
plugin's default) and pushed; ``agentsnap clone URL dir``, then ``git status`` in ``dir``: the ``core.fsmonitor``
command in the snapshot's ``.git/config`` ran (here it created a file; it could be anything). The same with a hook
(``post-checkout``, ``pre-commit``) and with ``restore``, ``pull``, ``merge`` or ``fork --worktrees`` of a fetched
snapshot. git's own clone never copies a repository's config or hooks, for that reason. Now they are written only
from a tree this store captured itself (your own history: the list is kept in the store directory and never
pushed, as for links pointing outside the tree), or with ``restore --trust-git``; otherwise they are left as they
were and a warning names them.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path

from trust_kit import cli

GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com"]


def _git(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*GIT, *args], cwd=root, capture_output=True, text=True, timeout=60)


def _teammate(tmp_path: Path, marker: Path) -> str:
    """A project with a git repository whose config and a hook would touch ``marker``, snapshotted with its .git and
    pushed; the remote's URL."""
    root = tmp_path / "teammate"
    root.mkdir()
    (root / "app.py").write_text("print('hi')\n")
    assert _git(root, "init", "-q").returncode == 0
    assert _git(root, "add", "app.py").returncode == 0
    assert _git(root, "commit", "-qm", "one").returncode == 0
    assert _git(root, "config", "core.fsmonitor", f"touch {marker}; false").returncode == 0
    hook = root / ".git" / "hooks" / "post-checkout"
    hook.write_text(f"#!/bin/sh\ntouch {marker}.hook\n")
    hook.chmod(0o755)
    for args in (["init"], ["config", "world.include_git", "true"], ["snapshot", "-m", "with its .git"]):
        code, _, err = cli(root, *args)
        assert code == 0, err
    url = f"file://{tmp_path / 'team'}"
    code, _, err = cli(root, "push", url)
    assert code == 0, err
    return url


def _cloned(tmp_path: Path) -> tuple[Path, Path, str, str]:
    """``(checkout, marker, url, what the clone said)``: the teammate's project cloned into ``tmp_path/mine``."""
    marker = tmp_path / "ran"
    url = _teammate(tmp_path, marker)
    code, out, err = cli(tmp_path, "clone", url, "mine")
    assert code == 0, err
    return tmp_path / "mine", marker, url, out + err


def test_a_clone_writes_the_repository_but_not_its_config_or_hooks(tmp_path: Path) -> None:
    mine, marker, _url, said = _cloned(tmp_path)
    assert (mine / "app.py").exists() and (mine / ".git" / "HEAD").exists()
    assert not (mine / ".git" / "config").exists() and not (mine / ".git" / "hooks" / "post-checkout").exists()
    assert ".git/config" in said and "--trust-git" in said, said
    assert _git(mine, "status").returncode == 0  # git works without the config...
    assert "one" in _git(mine, "log", "--oneline").stdout  # ...and has the history
    assert not marker.exists(), "the snapshot's core.fsmonitor ran at git status"


def test_a_restore_of_a_fetched_snapshot_keeps_your_git_config_unless_trusted(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    url = _teammate(tmp_path, marker)
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine\n")
    assert _git(mine, "init", "-q").returncode == 0
    own_config = (mine / ".git" / "config").read_text()
    for args in (["init"], ["config", "world.include_git", "true"], ["snapshot", "-m", "mine"],
                 ["remote", "add", "team", url], ["fetch", "team"]):
        code, _, err = cli(mine, *args)
        assert code == 0, err
    code, out, err = cli(mine, "restore", "team/main", "--json")
    assert code == 0, err
    assert json.loads(out)["git_held_back"] == [".git/config", ".git/hooks/post-checkout"]
    assert "did not write .git/config" in err, err
    assert (mine / ".git" / "config").read_text() == own_config
    assert not (mine / ".git" / "hooks" / "post-checkout").exists() and (mine / "app.py").exists()
    _git(mine, "status")
    assert not marker.exists()
    code, out, err = cli(mine, "restore", "team/main", "--trust-git")  # the user read them and trusts them
    assert code == 0, err
    assert "fsmonitor" in (mine / ".git" / "config").read_text()
    assert stat.S_IMODE(os.stat(mine / ".git" / "hooks" / "post-checkout").st_mode) == 0o755


def test_your_own_history_brings_git_config_and_hooks_back(tmp_path: Path) -> None:
    root = tmp_path / "work"
    root.mkdir()
    (root / "a.txt").write_text("a\n")
    assert _git(root, "init", "-q").returncode == 0
    assert _git(root, "remote", "add", "origin", "https://example.com/me/work.git").returncode == 0
    hook = root / ".git" / "hooks" / "pre-commit"
    hook.write_text("#!/bin/sh\nexit 0\n")
    hook.chmod(0o755)
    for args in (["init"], ["config", "world.include_git", "true"], ["snapshot", "-m", "mine"]):
        code, _, err = cli(root, *args)
        assert code == 0, err
    (root / ".git" / "config").unlink()
    hook.unlink()
    code, out, err = cli(root, "restore", "HEAD", "--json")
    assert code == 0, err
    assert "git_held_back" not in json.loads(out) and "did not write" not in err
    assert "https://example.com/me/work.git" in (root / ".git" / "config").read_text()
    assert hook.read_text() == "#!/bin/sh\nexit 0\n"


def test_fork_worktrees_of_a_fetched_snapshot_hold_them_back_too(tmp_path: Path) -> None:
    mine, marker, _url, _said = _cloned(tmp_path)
    code, out, err = cli(mine, "fork", "origin/main", "-n", "1", "--worktrees", str(tmp_path / "tries"))
    assert code == 0, err
    assert not (tmp_path / "tries" / "attempt-1" / ".git" / "config").exists()
    assert "did not write .git/config" in err, err
    _git(tmp_path / "tries" / "attempt-1", "status")
    assert not marker.exists()


def test_a_pull_that_fast_forwards_holds_them_back_and_a_trusted_store_writes_them(tmp_path: Path) -> None:
    """After the clone the tree lacks what was held back (status says so: it is not there); once the user took that
    state (a snapshot), a pull holds them back again and says so. ``world.trust_git`` (a store whose every writer
    the user trusts) writes them."""
    mine, marker, url, _said = _cloned(tmp_path)
    status = json.loads(cli(mine, "status", "--json")[1])
    assert status["world"]["deleted"] == [".git/config", ".git/hooks/post-checkout"], status
    assert cli(mine, "snapshot", "-m", "as cloned")[0] == 0
    mate = tmp_path / "teammate"
    (mate / "app.py").write_text("print('changed')\n")
    for args in (["snapshot", "-m", "two"], ["push", url]):
        code, _, err = cli(mate, *args)
        assert code == 0, err
    code, out, err = cli(mine, "pull")
    assert code == 0, err  # (a merge of "as cloned", which lacks them, with "two": they stay deleted)
    assert (mine / "app.py").read_text() == "print('changed')\n"
    assert not (mine / ".git" / "config").exists()
    _git(mine, "status")
    assert not marker.exists()
    assert cli(mine, "config", "world.trust_git", "true")[0] == 0
    code, out, err = cli(mine, "restore", "origin/main")
    assert code == 0, err
    assert "fsmonitor" in (mine / ".git" / "config").read_text() and "did not write" not in err
