"""A hook snapshot beside a manual `agentsnap snapshot` of the same tree (issue 20).

The core lets one process at a time snapshot a working tree; the other gets TreeBusy at once. The
hook must wait for the other snapshot briefly (bounded by ``busy_wait``) and, if the tree is still
busy, ask about a destructive command instead of running it unprotected.

The other snapshot is a real process taking a real snapshot through the core: it holds the tree lock
(``Repo.tree_lock``, as ``agentsnap snapshot`` does) until the test lets it finish, then snapshots.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from agentsnap_core import Repo
from conftest import helper_env, payload, run_plugin_hook

RM_SRC = {"tool_name": "Bash", "tool_input": {"command": "rm -rf src"}, "tool_use_id": "toolu_01Busy01"}

_HOLDER = """
import sys
from agentsnap_claude_code.config import load_settings
from agentsnap_claude_code.projectstore import open_project_repo
project = sys.argv[1]
with open_project_repo(project, load_settings(project), create=True) as repo:
    with repo.tree_lock("snapshot"):
        print("holding", flush=True)
        sys.stdin.readline()  # the test says when this snapshot may go on
        snap = repo.snapshot("manual snapshot")
print(snap.id, flush=True)
"""


class Holder:
    """A process snapshotting the project that holds its tree lock until :meth:`finish`."""

    def __init__(self, project: Path) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", _HOLDER, str(project)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=helper_env())
        assert self.proc.stdout is not None and self.proc.stdout.readline().strip() == "holding"

    def finish(self) -> str:
        out, _ = self.proc.communicate("go\n", timeout=120)
        assert self.proc.returncode == 0
        return out.strip()


def _settings(project: Path, **values: object) -> None:
    (project / ".claude").mkdir(exist_ok=True)
    (project / ".claude" / "agentsnap.json").write_text(json.dumps(values))


def _log(home: Path) -> list[dict]:
    path = home / ".claude" / "agentsnap" / "hooks.log"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_a_hook_snapshot_waits_for_a_manual_snapshot_of_the_same_tree_and_then_protects_the_command(project: Path, transcript: Path, home: Path) -> None:
    holder = Holder(project)
    hook = subprocess.Popen(
        [sys.executable, "-m", "agentsnap_claude_code.gate", "PreToolUse"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=helper_env(), cwd=project
    )
    assert hook.stdin is not None
    hook.stdin.write(payload(project, transcript, "PreToolUse", **RM_SRC))
    hook.stdin.close()
    deadline = time.monotonic() + 120
    while not any(e.get("action") == "tree-busy" for e in _log(home)):  # the hook met the held lock and waits
        assert hook.poll() is None, "the hook gave up instead of waiting for the other snapshot"
        assert time.monotonic() < deadline
        time.sleep(0.05)
    manual = holder.finish()
    assert hook.stdout is not None and hook.wait(timeout=120) == 0
    out = json.loads(hook.stdout.read())
    assert "permissionDecision" not in json.dumps(out)
    assert "undo with: agentsnap-claude-code restore" in out["systemMessage"]
    with Repo.open(project) as repo:
        head = repo.get("HEAD")
        assert head.message == "before Bash: rm -rf src"
        assert {e[0] for e in repo.world_entries(head)} >= {"src/app.py", "src/untracked.txt"}
        assert repo.get(manual).message == "manual snapshot"


def test_a_tree_still_busy_after_busy_wait_makes_a_destructive_command_ask(project: Path, transcript: Path, home: Path) -> None:
    _settings(project, busy_wait=1)
    holder = Holder(project)
    try:
        _, out = run_plugin_hook(project, transcript, "PreToolUse", env=helper_env(), **RM_SRC)
    finally:
        holder.finish()
    spec = out["hookSpecificOutput"]
    assert spec["permissionDecision"] == "ask"
    assert "another agentsnap process (snapshot, pid" in spec["permissionDecisionReason"]
    assert "undo with" not in json.dumps(out)
    assert [e["action"] for e in _log(home) if e.get("event") == "PreToolUse"][-1] == "snapshot-failed"
