"""The hook entry points, driven with the JSON Claude Code writes to a hook's stdin."""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from agentsnap_claude_code.cli import main as cc_cli
from agentsnap_claude_code.hooks import run_hook
from agentsnap_claude_code.install import plugin_root
from agentsnap_claude_code.transcript import encode_project_dir
from agentsnap_core import Repo
from agentsnap_core.cli import main as agentsnap_cli
from click.testing import CliRunner
from conftest import SESSION, payload

RM_SRC = {"tool_name": "Bash", "tool_input": {"command": "rm -rf src", "description": "Remove the stale src tree"}, "tool_use_id": "toolu_01Rm7bZ2"}


def _out(result_stdout: str) -> dict:
    return json.loads(result_stdout) if result_stdout.strip() else {}


def _files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file() and ".git" not in p.parts and ".agentsnap" not in p.parts}


def test_rm_rf_src_is_snapshotted_before_and_rewind_brings_back_files_and_a_forked_session(project: Path, transcript: Path, home: Path) -> None:
    before = _files(project)
    res = run_hook(payload(project, transcript, "PreToolUse", **RM_SRC))
    assert res.exit_code == 0
    out = _out(res.stdout)
    assert "permissionDecision" not in json.dumps(out)  # never short-circuits the user's permission flow
    # the snapshot exists before the command runs, with the untracked file and the transcript
    with Repo.open(project) as repo:  # the core finds the plugin's store (outside the project) through the link file
        snap = repo.get("HEAD")
        assert project not in repo.store_dir.parents
        assert out["systemMessage"].startswith(f"agentsnap: snapshot {snap.id[:12]} taken before tool call 2 (`rm -rf src`)")
        assert f"undo with: agentsnap-claude-code restore {snap.id[:12]} -C {project}" in out["systemMessage"]
        assert snap.message == "before Bash: rm -rf src"
        paths = {e[0] for e in repo.world_entries(snap)}
        assert {"src/app.py", "src/untracked.txt", "src/pkg/__init__.py", "src/run.sh"} <= paths
        trace = repo.read_layer(snap, "trace")
        assert [e["raw"] for e in trace] == transcript.read_text().splitlines()
        assert snap.manifest["meta"]["claude_code"]["findings"] == ["rm: rm -rf src"]

    shutil.rmtree(project / "src")  # the command runs
    (project / "oops.txt").write_text("created after the snapshot\n")

    r = CliRunner().invoke(cc_cli, ["rewind", "HEAD", "-C", str(project), "--json"])
    assert r.exit_code == 0, r.output
    rep = json.loads(r.output)
    assert _files(project) == before  # src back, untracked file included; oops.txt gone
    assert os.stat(project / "src" / "run.sh").st_mode & 0o111

    new_id = rep["session"]["session_id"]
    forked = home / ".claude" / "projects" / encode_project_dir(project) / f"{new_id}.jsonl"
    assert rep["session"]["path"] == str(forked)
    lines = [json.loads(line) for line in forked.read_text().splitlines()]  # valid JSONL
    assert new_id != SESSION
    assert {o["sessionId"] for o in lines if "sessionId" in o} == {new_id}
    seen: set[str] = set()
    for o in lines:  # intact chain: every parent was written before its child
        if o.get("parentUuid") is not None:
            assert o["parentUuid"] in seen
        if "uuid" in o:
            seen.add(o["uuid"])
    # the pending `rm -rf src` call is not replayed; everything before it is kept
    original = [json.loads(line) for line in transcript.read_text().splitlines()]
    assert len(lines) == len(original) - 1 and rep["session"]["dropped_dangling"] == 1
    assert lines[-1]["uuid"] == original[-2]["uuid"]
    assert rep["resume"] == f"claude --resume {new_id}"
    with Repo.open(project) as repo:
        assert repo.verify()["ok"]  # the auto-created store (with its .gitignore) verifies clean


def test_destructive_command_asks_when_the_store_is_missing(project: Path, transcript: Path) -> None:
    (project / ".claude").mkdir()
    (project / ".claude" / "agentsnap.json").write_text(json.dumps({"auto_init": False}))
    res = run_hook(payload(project, transcript, "PreToolUse", **RM_SRC))
    assert res.exit_code == 0
    spec = _out(res.stdout)["hookSpecificOutput"]
    assert spec["hookEventName"] == "PreToolUse" and spec["permissionDecision"] == "ask"
    assert "auto_init" in spec["permissionDecisionReason"]
    assert not (project / ".agentsnap").exists()


def test_destructive_command_asks_when_the_disk_is_full(project: Path, transcript: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Disk full is simulated (ENOSPC raised from the snapshot write): the real condition cannot be made here safely."""

    def full(*a: object, **k: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Repo, "snapshot", full)
    res = run_hook(payload(project, transcript, "PreToolUse", **RM_SRC))
    assert res.exit_code == 0
    spec = _out(res.stdout)["hookSpecificOutput"]
    assert spec["permissionDecision"] == "ask" and "No space left" in spec["permissionDecisionReason"]


def test_non_destructive_events_that_fail_exit_0_with_a_message(project: Path, transcript: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (project / ".claude").mkdir()
    (project / ".claude" / "agentsnap.json").write_text(json.dumps({"auto_init": False, "turn_snapshots": "both"}))
    for event in ("Stop", "UserPromptSubmit"):
        res = run_hook(payload(project, transcript, event, prompt="go on", stop_hook_active=False))
        assert res.exit_code == 0
        out = _out(res.stdout)
        assert "per-turn snapshot failed" in out["systemMessage"] and "hookSpecificOutput" not in out
    # an Edit of an existing file with the disk full (simulated): a message, not a question
    (project / ".claude" / "agentsnap.json").write_text(json.dumps({"turn_snapshots": "both"}))

    def full(*a: object, **k: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Repo, "snapshot", full)
    edit = {"tool_name": "Edit", "tool_input": {"file_path": str(project / "src" / "app.py"), "old_string": "hello", "new_string": "bye"}}
    res = run_hook(payload(project, transcript, "PreToolUse", **edit))
    assert res.exit_code == 0
    out = _out(res.stdout)
    assert "No space left" in out["systemMessage"] and "hookSpecificOutput" not in out


def test_bad_input_and_bad_settings_never_block(project: Path, transcript: Path, home: Path) -> None:
    res = run_hook("{not json", "PreToolUse")
    assert res.exit_code == 0 and "not valid JSON" in _out(res.stdout)["systemMessage"]
    (project / ".claude").mkdir()
    (project / ".claude" / "agentsnap.json").write_text(json.dumps({"turn_snapshots": "sometimes"}))
    res = run_hook(payload(project, transcript, "PreToolUse", **RM_SRC))
    assert res.exit_code == 0
    # the destructive command is still protected with the default settings; the message names the problem
    with Repo.open(project) as repo:
        assert repo.get("HEAD").message == "before Bash: rm -rf src"
    log = (home / ".claude" / "agentsnap" / "hooks.log").read_text()
    assert "config-error" in log and "turn_snapshots" in log


def test_harmless_commands_take_no_snapshot(project: Path, transcript: Path) -> None:
    for command in ("ls -la src", 'echo "rm -rf src"', "grep -r rm src", "git status"):
        res = run_hook(payload(project, transcript, "PreToolUse", tool_name="Bash", tool_input={"command": command}))
        assert (res.exit_code, res.stdout) == (0, "")
    assert not (project / ".agentsnap").exists()


def test_edit_of_an_existing_file_snapshots_first_a_new_file_does_not(project: Path, transcript: Path) -> None:
    new = {"tool_name": "Write", "tool_input": {"file_path": str(project / "src" / "new.py"), "content": "x = 1\n"}}
    assert run_hook(payload(project, transcript, "PreToolUse", **new)).stdout == ""
    assert not (project / ".agentsnap").exists()
    edit = {"tool_name": "Edit", "tool_input": {"file_path": str(project / "src" / "app.py"), "old_string": "hello", "new_string": "bye"}}
    res = run_hook(payload(project, transcript, "PreToolUse", **edit))
    assert (res.exit_code, res.stdout) == (0, "")
    with Repo.open(project) as repo:
        snap = repo.get("HEAD")
        assert snap.message == f"before Edit: {project / 'src' / 'app.py'}"
        assert project not in repo.store_dir.parents  # the project holds only a link to the store
        assert json.loads((project / ".agentsnap").read_text())["store"] == str(repo.store_dir)


def test_per_turn_snapshot_on_stop_is_incremental_and_skips_unchanged_turns(project: Path, transcript: Path, home: Path) -> None:
    assert run_hook(payload(project, transcript, "Stop", stop_hook_active=False)).stdout == ""
    assert run_hook(payload(project, transcript, "Stop", stop_hook_active=False)).stdout == ""
    with Repo.open(project) as repo:
        assert len(repo.log()) == 1  # nothing changed between the two turns: HEAD reused
    (project / "src" / "app.py").write_text("print('changed by a Bash edit')\n")
    run_hook(payload(project, transcript, "Stop", stop_hook_active=False))
    with Repo.open(project) as repo:
        log = repo.log()
        assert [s.message for s in log] == ["turn (Stop)", "turn (Stop)"]
        assert repo.diff(log[1].id, log[0].id)["layers"]["world"]["modified"] == ["src/app.py"]
    # UserPromptSubmit is off by default: no snapshot, and no stdout (it would become prompt context)
    assert run_hook(payload(project, transcript, "UserPromptSubmit", prompt="next")).stdout == ""
    entries = [json.loads(line) for line in (home / ".claude" / "agentsnap" / "hooks.log").read_text().splitlines()]
    assert [e["created"] for e in entries if e.get("action") == "snapshot"] == [True, False, True]
    assert all(isinstance(e["ms"], float) for e in entries if e.get("action") == "snapshot")


def test_agentsnap_snapshot_run_by_the_model_carries_the_transcript(project: Path, transcript: Path) -> None:
    """/agentsnap:snapshot makes the model run `agentsnap snapshot`; the PreToolUse hook hands it the conversation."""
    res = run_hook(payload(project, transcript, "PreToolUse", tool_name="Bash", tool_input={"command": 'agentsnap snapshot -m "checkpoint"'}))
    assert (res.exit_code, res.stdout) == (0, "")
    r = CliRunner().invoke(agentsnap_cli, ["-C", str(project), "snapshot", "-m", "checkpoint"])
    assert r.exit_code == 0, r.output
    with Repo.open(project) as repo:
        trace = repo.read_layer("HEAD", "trace")
        assert [e["raw"] for e in trace] == transcript.read_text().splitlines()
    r = CliRunner().invoke(cc_cli, ["rewind", "HEAD", "-C", str(project), "--no-files", "--json"])
    assert r.exit_code == 0, r.output


def test_rewind_refuses_a_snapshot_without_a_transcript_and_writes_nothing(project: Path, home: Path) -> None:
    run_hook(payload(project, None, "Stop", stop_hook_active=False))  # the plugin's store, no transcript
    with Repo.open(project) as repo:
        snap = repo.snapshot("plain")
    shutil.rmtree(project / "src")
    r = CliRunner().invoke(cc_cli, ["rewind", snap.id, "-C", str(project)])
    assert r.exit_code == 2 and "no Claude Code transcript" in r.output
    assert not (project / "src").exists() and not (home / ".claude" / "projects").exists()


def test_plugin_hook_script_runs_the_installed_helper(project: Path, transcript: Path, tmp_path: Path) -> None:
    """The exact command hooks.json runs, with the helper found on PATH as after `pip install`."""
    plugin_root() / "hooks" / "agentsnap-hook"
    hooks = json.loads((plugin_root() / "hooks" / "hooks.json").read_text())["hooks"]
    command = hooks["PreToolUse"][0]["hooks"][0]["command"]
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}", "CLAUDE_PLUGIN_ROOT": str(plugin_root())}
    proc = subprocess.run(command, shell=True, input=payload(project, transcript, "PreToolUse", **RM_SRC), capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["systemMessage"].startswith("agentsnap: snapshot ")
    with Repo.open(project) as repo:
        assert repo.get("HEAD").message == "before Bash: rm -rf src"
    # without the helper: test_fail_closed.py


def test_rewind_into_a_fork_worktree_resumes_there(project: Path, transcript: Path, home: Path, tmp_path: Path) -> None:
    run_hook(payload(project, transcript, "PreToolUse", **RM_SRC))
    r = CliRunner().invoke(agentsnap_cli, ["-C", str(project), "fork", "-n", "1", "--worktrees", str(tmp_path / "tries"), "--json"])
    assert r.exit_code == 0, r.output
    wt = Path(json.loads(r.output)["forks"][0]["path"])
    assert (wt / "src" / "untracked.txt").is_file()
    r = CliRunner().invoke(cc_cli, ["rewind", "HEAD", "-C", str(project), "--no-files", "--cwd", str(wt), "--json"])
    assert r.exit_code == 0, r.output
    forked = Path(json.loads(r.output)["session"]["path"])
    assert forked.parent == home / ".claude" / "projects" / encode_project_dir(wt)
    assert {json.loads(line)["cwd"] for line in forked.read_text().splitlines() if '"cwd"' in line} == {str(wt)}


def _transcript_without_the_pending_call(transcript: Path) -> str:
    """The fixture's transcript cut before the line holding the pending call (toolu_01Rm7bZ2); the cut-off rest."""
    lines = transcript.read_text().splitlines(keepends=True)
    cut = next(i for i, line in enumerate(lines) if "toolu_01Rm7bZ2" in line)
    transcript.write_text("".join(lines[:cut]))
    return "".join(lines[cut:])


def test_a_pending_call_claude_code_writes_late_is_waited_for_and_captured(project: Path, transcript: Path) -> None:
    """Claude Code writes its transcript behind: under load the hook of a call fired while the file still ended
    before it (seen with the real CLI, 2.1.197), and the snapshot silently lacked the conversation's last steps."""
    import threading
    import time

    rest = _transcript_without_the_pending_call(transcript)

    def write_late() -> None:
        time.sleep(0.5)
        with open(transcript, "a") as fh:
            fh.write(rest)

    writer = threading.Thread(target=write_late)
    writer.start()
    res = run_hook(payload(project, transcript, "PreToolUse", **RM_SRC))
    writer.join()
    assert res.exit_code == 0
    with Repo.open(project) as repo:
        snap = repo.get("HEAD")
        meta = snap.manifest["meta"]["claude_code"]
        calls = [c.get("id") for e in repo.read_layer(snap, "trace") for c in e.get("tool_calls") or []]
    assert "toolu_01Rm7bZ2" in calls and meta["call"] == 2
    assert "pending_call_missing" not in meta["transcript"]


def test_a_pending_call_never_written_is_said_in_the_snapshot(project: Path, transcript: Path) -> None:
    _transcript_without_the_pending_call(transcript)
    res = run_hook(payload(project, transcript, "PreToolUse", **RM_SRC))
    assert res.exit_code == 0
    message = json.loads(res.stdout)["systemMessage"]
    assert "undo with:" in message and "may lack the steps just before it" in message  # the hook says it too
    with Repo.open(project) as repo:
        meta = repo.get("HEAD").manifest["meta"]["claude_code"]
    assert meta["transcript"]["pending_call_missing"] == "toolu_01Rm7bZ2"
    listed = CliRunner().invoke(cc_cli, ["points", "-C", str(project)])
    assert listed.exit_code == 0, listed.output
    assert "(Bash: rm -rf src) [conversation captured before this call was written" in listed.output  # and points
    (point,) = [p for p in json.loads(CliRunner().invoke(cc_cli, ["points", "-C", str(project), "--json"]).stdout) if p["call"]]
    assert point["conversation_incomplete"] is True
    r = CliRunner().invoke(cc_cli, ["rewind", "HEAD", "-C", str(project), "--json", "--no-files"])
    assert r.exit_code == 0, r.output
    assert "may lack the steps just before it" in json.loads(r.stdout)["warning"]  # said, not silent
