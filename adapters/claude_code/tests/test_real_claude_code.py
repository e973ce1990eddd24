"""The real Claude Code CLI (npm @anthropic-ai/claude-code 2.1.197) with the plugin, offline.

The test installs the CLI from npm into a cache folder once, then with a throwaway HOME: `claude plugin
validate --strict`, the repository's marketplace, `claude plugin install agentsnap@agentsnap`, and a
headless `claude -p` session against a scripted stand-in for the Messages API on 127.0.0.1 (no key, nothing
leaves the machine) in which the model runs `rm -rf src` and then `git clean -fdx`. The README's undo
(`agentsnap-claude-code restore --before-prompt 1`) must bring back every file: tracked, untracked, ignored.
In-session, `/agentsnap:rewind --before-call 1` typed in the same conversation (`claude --continue -p`) must
restore the files and fork the conversation, which `claude --resume` then loads as it was at that point.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from agentsnap_core.testing.servers import need
from conftest import helper_env, tree
from fake_messages_api import FakeMessagesAPI

pytestmark = pytest.mark.helper  # as a user runs it: the warm helper on (the second call may go through it)

VERSION = "2.1.197"
REPO_ROOT = Path(__file__).resolve().parents[3]
#: computed at import, before the autouse fixture points HOME at a temporary folder
CACHE = Path(os.environ.get("AGENTSNAP_CLAUDE_CODE_NPM") or Path.home() / ".cache" / "agentsnap" / f"claude-code-{VERSION}")


@pytest.fixture(scope="module")
def claude() -> Path:
    binary = CACHE / "node_modules" / ".bin" / "claude"
    if not binary.exists():
        need(shutil.which("npm") is not None, "npm is not installed (needed to install @anthropic-ai/claude-code)")
        CACHE.mkdir(parents=True, exist_ok=True)
        proc = subprocess.run(
            ["npm", "install", "--no-audit", "--no-fund", "--prefix", str(CACHE), f"@anthropic-ai/claude-code@{VERSION}"],
            capture_output=True, text=True, timeout=600,
        )
        need(proc.returncode == 0 and binary.exists(), f"npm install @anthropic-ai/claude-code@{VERSION} failed: {proc.stderr[-500:]}")
    version = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=120).stdout
    assert version.startswith(VERSION), version
    return binary


@pytest.fixture
def env(claude: Path, home: Path) -> dict[str, str]:
    """A throwaway HOME where the real CLI validated the plugin and installed it from the repository's marketplace."""
    env = {
        **helper_env(), "HOME": str(home), "DISABLE_AUTOUPDATER": "1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "ANTHROPIC_API_KEY": "sk-ant-offline-test", "TERM": "dumb",
    }
    env.pop("CLAUDE_PLUGIN_ROOT", None)  # Claude Code sets it for the installed copy of the plugin
    assert "Validation passed" in _cc(claude, "plugin", "validate", "--strict", str(REPO_ROOT / "adapters" / "claude_code" / "plugin"), env=env).stdout
    _cc(claude, "plugin", "marketplace", "add", str(REPO_ROOT), env=env)
    assert "agentsnap@agentsnap" in _cc(claude, "plugin", "install", "agentsnap@agentsnap", env=env).stdout
    return env


def _cc(claude: Path, *args: str, **kw: object) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([str(claude), *args], capture_output=True, text=True, timeout=300, **kw)  # type: ignore[call-overload]
    assert proc.returncode == 0, (args, proc.stdout[-2000:], proc.stderr[-2000:])
    return proc


def _cleanup_session(claude: Path, project: Path, env: dict[str, str]) -> dict[str, bytes]:
    """``claude -p`` in which the scripted model runs `rm -rf src`, then `git clean -fdx`; the tree before it."""
    (project / ".gitignore").write_text("*.log\n.env\n")
    (project / "debug.log").write_text("an ignored file\n")
    (project / ".env").write_text("TOKEN=dev\n")
    before = tree(project)
    with FakeMessagesAPI(["rm -rf src", "git clean -fdx"]) as api:
        proc = _cc(claude, "-p", "Clean up the project", "--output-format", "json", "--allowedTools", "Bash", cwd=project, env={**env, "ANTHROPIC_BASE_URL": api.url})
    result = json.loads(proc.stdout)
    assert result["is_error"] is False and result["num_turns"] == 3
    assert sum(1 for r in api.requests if "messages" in r["path"] and r["body"].get("tools")) == 3  # both tool calls ran
    assert not (project / "src").exists() and not (project / "debug.log").exists() and not (project / ".env").exists()
    return before


def _same_tree(after: dict[str, bytes], before: dict[str, bytes]) -> bool:
    return {k: v for k, v in after.items() if k != ".git/info/exclude"} == {k: v for k, v in before.items() if k != ".git/info/exclude"}


def _resume(claude: Path, project: Path, env: dict[str, str], session_id: str, prompt: str) -> str:
    """What the real CLI sends the model when it resumes ``session_id`` with one more prompt."""
    with FakeMessagesAPI([]) as api:
        _cc(claude, "--resume", session_id, "-p", prompt, "--output-format", "json", cwd=project, env={**env, "ANTHROPIC_BASE_URL": api.url})
    [turn] = [r["body"]["messages"] for r in api.requests if r["body"].get("tools")]
    return json.dumps(turn)


def test_claude_p_rm_rf_src_then_git_clean_fdx_and_the_documented_undo_brings_every_file_back(claude: Path, env: dict[str, str], project: Path) -> None:
    def cc(*args: str, **kw: object) -> subprocess.CompletedProcess[str]:
        return _cc(claude, *args, **kw)

    before = _cleanup_session(claude, project, env)

    points = subprocess.run(["agentsnap-claude-code", "points", "-C", str(project)], capture_output=True, text=True, env=env, check=True).stdout
    assert "before destructive tool call 1 (Bash: rm -rf src)" in points and "before destructive tool call 2 (Bash: git clean -fdx)" in points
    undo = subprocess.run(["agentsnap-claude-code", "restore", "--before-prompt", "1", "-C", str(project)], capture_output=True, text=True, env=env)
    assert undo.returncode == 0, undo.stderr
    after = tree(project)
    assert _same_tree(after, before)
    assert {"src/app.py", "src/untracked.txt", "debug.log", ".env"} <= set(after)

    # in-session: Claude Code knows the command as /agentsnap:rewind and runs its `!` line, the list of points
    with FakeMessagesAPI([]) as api:
        cc("-p", "/agentsnap:rewind", "--output-format", "json", cwd=project, env={**env, "ANTHROPIC_BASE_URL": api.url})
    sent = json.dumps([r["body"].get("messages") for r in api.requests])
    assert "<command-name>/agentsnap:rewind</command-name>" in sent
    assert "before destructive tool call 1 (Bash: rm -rf src)" in sent and "before destructive tool call 2 (Bash: git clean -fdx)" in sent

    # the conversation forks too: back to just before `git clean -fdx`, resumed by the real CLI
    fork = subprocess.run(["agentsnap-claude-code", "rewind", "--last-destructive", "--no-files", "-C", str(project), "--json"],
                          capture_output=True, text=True, env=env)
    assert fork.returncode == 0, fork.stderr
    new_id = json.loads(fork.stdout)["session"]["session_id"]
    sent = _resume(claude, project, env, new_id, "What did you run so far?")
    assert "Clean up the project" in sent and "rm -rf src" in sent and "What did you run so far?" in sent
    assert "git clean -fdx" not in sent  # the call the snapshot was taken before is not replayed


def test_in_session_agentsnap_rewind_restores_the_files_and_forks_the_conversation(claude: Path, env: dict[str, str], project: Path) -> None:
    """`/agentsnap:rewind --before-call 1` typed in the same session (`claude --continue -p`): no terminal, no model help."""
    before = _cleanup_session(claude, project, env)
    with FakeMessagesAPI([]) as api:
        _cc(claude, "--continue", "-p", "/agentsnap:rewind --before-call 1", "--output-format", "json", cwd=project, env={**env, "ANTHROPIC_BASE_URL": api.url})
    assert _same_tree(tree(project), before)  # src/, the untracked file, the ignored .env and debug.log: all back
    sent = json.dumps([r["body"].get("messages") for r in api.requests])
    assert "<command-name>/agentsnap:rewind</command-name>" in sent and "Clean up the project" in sent  # the same conversation
    assert "undo with: agentsnap-claude-code restore " in sent
    [fork_id] = set(re.findall(r"switch to the fork in Claude Code with: /resume ([0-9a-f-]{36})", sent))
    resumed = _resume(claude, project, env, fork_id, "Where were we?")
    assert "Clean up the project" in resumed and "Where were we?" in resumed
    assert "rm -rf src" not in resumed and "/agentsnap:rewind" not in resumed  # the conversation as it was before call 1
