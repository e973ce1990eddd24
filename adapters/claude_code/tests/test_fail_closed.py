"""The hook fails closed and costs nothing on harmless calls (issue 20, items 4 and 5).

Through the plugin's real hook command (hooks.json, JSON on stdin): a destructive command is asked
about whenever no snapshot could be taken; harmless calls never import agentsnap_core.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from agentsnap_core import Repo
from conftest import helper_env, payload, run_plugin_hook

RM_SRC = {"tool_name": "Bash", "tool_input": {"command": "rm -rf src"}, "tool_use_id": "toolu_01Rm7bZ2"}


def _bin(tmp_path: Path, **scripts: str) -> Path:
    """A PATH folder with the few tools the hook script uses (no Python) plus the given fake programs."""
    d = tmp_path / "bin"
    d.mkdir(exist_ok=True)
    for tool in ("sh", "cat", "mkdir", "grep", "timeout", "sleep", "touch"):
        found = shutil.which(tool)
        assert found, tool
        (d / tool).symlink_to(found)
    for name, body in scripts.items():
        (d / name).write_text(f"#!/bin/sh\n{body}\n")
        (d / name).chmod(0o755)
    return d


def _env(tmp_path: Path, **scripts: str) -> dict[str, str]:
    return {**helper_env(), "PATH": str(_bin(tmp_path, **scripts))}


def test_helper_missing_asks_about_bash_and_warns_once(project: Path, transcript: Path, tmp_path: Path) -> None:
    env = _env(tmp_path)
    _, first = run_plugin_hook(project, transcript, "PreToolUse", env=env, **RM_SRC)
    assert first["hookSpecificOutput"]["permissionDecision"] == "ask"
    assert "not installed" in first["hookSpecificOutput"]["permissionDecisionReason"]
    assert "pip install agentsnap-claude-code" in first["systemMessage"]
    _, second = run_plugin_hook(project, transcript, "PreToolUse", env=env, tool_name="Bash", tool_input={"command": "ls"})
    assert second["hookSpecificOutput"]["permissionDecision"] == "ask" and "systemMessage" not in second  # warned once
    _, stop = run_plugin_hook(project, transcript, "Stop", env=env, stop_hook_active=False)
    assert stop == {}


def test_a_broken_helper_and_a_helper_past_its_time_limit_make_the_hook_ask(project: Path, transcript: Path, tmp_path: Path) -> None:
    env = _env(tmp_path, **{"agentsnap-claude-code-hook": "cat >/dev/null; echo 'Traceback: ImportError' >&2; exit 1"})
    _, out = run_plugin_hook(project, transcript, "PreToolUse", env=env, **RM_SRC)
    assert out["hookSpecificOutput"]["permissionDecision"] == "ask" and "exit status 1" in out["hookSpecificOutput"]["permissionDecisionReason"]
    shutil.rmtree(tmp_path / "bin")
    env = {**_env(tmp_path, **{"agentsnap-claude-code-hook": "cat >/dev/null; sleep 30"}), "AGENTSNAP_HOOK_TIMEOUT": "1"}
    _, out = run_plugin_hook(project, transcript, "PreToolUse", env=env, **RM_SRC)
    assert out["hookSpecificOutput"]["permissionDecision"] == "ask" and "within 1 s" in out["hookSpecificOutput"]["permissionDecisionReason"]


def test_a_snapshot_slower_than_snapshot_timeout_is_asked_about(project: Path, transcript: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The slow snapshot is simulated (a sleep inside Repo.snapshot); the alarm and the answer are real."""
    from agentsnap_claude_code.gate import main

    (project / ".claude").mkdir()
    (project / ".claude" / "agentsnap.json").write_text(json.dumps({"snapshot_timeout": 1}))

    def slow(*a: object, **k: object) -> None:
        time.sleep(30)

    monkeypatch.setattr(Repo, "snapshot", slow)
    monkeypatch.setattr(sys, "stdin", io.StringIO(payload(project, transcript, "PreToolUse", **RM_SRC)))
    assert main(["PreToolUse"]) == 0
    spec = json.loads(capsys.readouterr().out)["hookSpecificOutput"]
    assert spec["permissionDecision"] == "ask" and "snapshot_timeout" in spec["permissionDecisionReason"]


_PROBE = (
    "import sys; from agentsnap_claude_code.gate import main; rc = main(sys.argv[1:]); "
    "print(sorted(m for m in sys.modules if m.split('.')[0] in ('agentsnap_core', 'click', 'blake3', 'zstandard')), file=sys.stderr)"
)


@pytest.mark.parametrize(
    "event, extra",
    [
        ("PreToolUse", {"tool_name": "Bash", "tool_input": {"command": "ls -la src && git status"}}),
        ("PreToolUse", {"tool_name": "Write", "tool_input": {"file_path": "src/new.py", "content": "x = 1\n"}}),
        ("PreToolUse", {"tool_name": "Read", "tool_input": {"file_path": "src/app.py"}}),
        ("UserPromptSubmit", {"prompt": "go on"}),
    ],
)
def test_a_harmless_call_never_imports_agentsnap_core(project: Path, transcript: Path, event: str, extra: dict) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE, event], input=payload(project, transcript, event, **extra), capture_output=True, text=True, env=helper_env(), cwd=project
    )
    assert proc.returncode == 0 and proc.stdout == ""
    assert proc.stderr.strip() == "[]"
    assert not (project / ".agentsnap").exists()


def test_a_destructive_call_does_import_it_and_snapshots(project: Path, transcript: Path) -> None:
    proc = subprocess.run([sys.executable, "-c", _PROBE, "PreToolUse"], input=payload(project, transcript, "PreToolUse", **RM_SRC), capture_output=True, text=True, env=helper_env())
    assert "agentsnap_core" in proc.stderr and "undo with" in json.loads(proc.stdout)["systemMessage"]


def test_user_prompt_submit_starts_no_python_unless_configured(project: Path, transcript: Path, tmp_path: Path) -> None:
    marker = tmp_path / "helper-ran"
    env = {**_env(tmp_path, **{"agentsnap-claude-code-hook": f"cat >/dev/null; touch {marker}"}), "CLAUDE_PROJECT_DIR": str(project)}
    run_plugin_hook(project, transcript, "UserPromptSubmit", env=env, prompt="next")
    assert not marker.exists()
    (project / ".claude").mkdir()
    (project / ".claude" / "agentsnap.json").write_text(json.dumps({"turn_snapshots": "UserPromptSubmit"}))
    run_plugin_hook(project, transcript, "UserPromptSubmit", env=env, prompt="next")
    assert marker.exists()
    assert os.environ.get("PATH")  # the test's own environment is untouched
