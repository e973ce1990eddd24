"""What a user sees when the undo is needed: the hook's message, the store surviving the damage, the points.

Every hook here runs as Claude Code runs it: the command line from hooks.json, JSON on stdin, the
helper found on PATH; the undo is the exact command the hook printed, run in a shell.
"""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path

import pytest
from conftest import helper_env, run_plugin_hook, tree

RM_SRC = {"tool_name": "Bash", "tool_input": {"command": "rm -rf src"}, "tool_use_id": "toolu_01Rm7bZ2"}


def _git(project: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(project), *args], check=True, capture_output=True, text=True).stdout


def _undo_of(message: str) -> list[str]:
    assert "undo with: " in message, message
    return shlex.split(message.split("undo with: ", 1)[1].split("   (", 1)[0])


@pytest.fixture
def busy_project(project: Path) -> Path:
    """The project with what a user expects back: ignored files, a .env, a stash in .git."""
    (project / ".gitignore").write_text("*.log\nbuild/\n.env\n")
    (project / "debug.log").write_text("ignored log\n")
    (project / "build").mkdir()
    (project / "build" / "out.bin").write_bytes(b"\x00\x01built")
    (project / ".env").write_text("API_TOKEN=local-dev-only\n")
    (project / "src" / "app.py").write_text("print('work in progress')\n")
    _git(project, "-c", "user.name=t", "-c", "user.email=t@example.com", "stash", "push", "-q", "-m", "wip", "src/app.py")
    return project


def test_git_clean_fdx_after_rm_rf_src_and_the_printed_undo_brings_every_file_back(busy_project: Path, transcript: Path) -> None:
    project = busy_project
    untouched = tree(project)
    stash = _git(project, "stash", "list")
    assert {"debug.log", "build/out.bin", ".env", "src/untracked.txt"} <= set(untouched) and "wip" in stash

    _, out = run_plugin_hook(project, transcript, "PreToolUse", **RM_SRC)
    before = tree(project)  # the hook's only trace in the project: the store link, kept out of git by .git/info/exclude
    assert {k: v for k, v in before.items() if k != ".git/info/exclude"} == {k: v for k, v in untouched.items() if k != ".git/info/exclude"}
    assert ".agentsnap" not in _git(project, "status", "--porcelain")
    message = out["systemMessage"]
    assert "hookSpecificOutput" not in out and "agentsnap restore" not in message  # the core CLI cannot see this store

    subprocess.run("rm -rf src", shell=True, cwd=project, check=True)  # the command runs ...
    _, out = run_plugin_hook(project, transcript, "PreToolUse", tool_name="Bash", tool_input={"command": "git clean -fdx"}, tool_use_id="toolu_clean")
    assert "undo with" in out["systemMessage"]
    _git(project, "clean", "-fdx")  # ... then the next one (it also deletes the link file .agentsnap)
    _git(project, "stash", "drop", "-q")
    assert not (project / "src").exists() and not (project / ".env").exists() and not (project / ".agentsnap").exists()

    proc = subprocess.run(_undo_of(message), capture_output=True, text=True, env=helper_env(), cwd="/")
    assert proc.returncode == 0, proc.stderr
    assert tree(project) == before  # tracked, untracked, ignored, .env and all of .git
    assert _git(project, "stash", "list") == stash
    assert "undo with: agentsnap-claude-code restore " in proc.stdout


def test_the_message_names_the_snapshot_it_took_and_rm_rf_of_the_whole_project_is_undone(project: Path, transcript: Path, tmp_path: Path) -> None:
    _, out = run_plugin_hook(project, transcript, "PreToolUse", tool_name="Bash", tool_input={"command": f"rm -rf {project}"}, tool_use_id="toolu_all")
    before = tree(project)
    undo = _undo_of(out["systemMessage"])
    subprocess.run(["rm", "-rf", str(project)], check=True)
    proc = subprocess.run(undo, capture_output=True, text=True, env=helper_env(), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert tree(project) == before
    points = subprocess.run(["agentsnap-claude-code", "points", "-C", str(project), "--json"], capture_output=True, text=True, env=helper_env(), check=True)
    [point] = [p for p in json.loads(points.stdout) if p["tool"] == "Bash"]
    assert undo[2] == point["id"][:12]  # the id in the message is the snapshot taken before that call


@pytest.mark.parametrize(
    "command",
    ["rm -rf ~/.local/share", "rm -rf ~", "rm -rf $HOME/.local/share/agentsnap", "find / -delete", "rm -rf ~/.local/share/agentsnap/*"],
)
def test_a_command_that_would_delete_the_store_itself_is_asked_about(project: Path, transcript: Path, command: str) -> None:
    _, out = run_plugin_hook(project, transcript, "PreToolUse", tool_name="Bash", tool_input={"command": command})
    spec = out["hookSpecificOutput"]
    assert spec["permissionDecision"] == "ask" and "agentsnap's snapshots" in spec["permissionDecisionReason"]
    assert "undo with" not in json.dumps(out)


@pytest.mark.parametrize(
    "command, lost",
    [("rm -rf /var/tmp/agentsnap-elsewhere", "/var/tmp/agentsnap-elsewhere"), ("psql -c 'DROP TABLE users'", "a database")],
)
def test_no_undo_is_promised_for_what_the_snapshot_cannot_bring_back(project: Path, transcript: Path, command: str, lost: str) -> None:
    _, out = run_plugin_hook(project, transcript, "PreToolUse", tool_name="Bash", tool_input={"command": command})
    reason = out["hookSpecificOutput"]["permissionDecisionReason"]
    assert out["hookSpecificOutput"]["permissionDecision"] == "ask" and lost in reason
    assert "undo with" not in json.dumps(out)


def test_after_the_turn_ends_rewind_targets_the_state_before_the_destructive_call(project: Path, transcript: Path) -> None:
    """A Stop snapshot makes HEAD the damaged tree; the points still lead back to before the call."""
    run_plugin_hook(project, transcript, "PreToolUse", **RM_SRC)
    before = tree(project)
    subprocess.run("rm -rf src", shell=True, cwd=project, check=True)
    run_plugin_hook(project, transcript, "Stop", stop_hook_active=False)  # HEAD: src gone
    env = helper_env()
    listing = subprocess.run(["agentsnap-claude-code", "points", "-C", str(project)], capture_output=True, text=True, env=env, check=True).stdout
    assert "before destructive tool call 2 (Bash: rm -rf src)" in listing and "before prompt 2" in listing
    head = subprocess.run(["agentsnap-claude-code", "restore", "--before-prompt", "2", "-C", str(project)], capture_output=True, text=True, env=env)
    assert head.returncode == 0 and not (project / "src").exists()  # the end of turn 1 is the damaged tree
    for point in (["--last-destructive"], ["--before-call", "2"]):
        subprocess.run("rm -rf src", shell=True, cwd=project, check=True)
        proc = subprocess.run(["agentsnap-claude-code", "restore", *point, "-C", str(project)], capture_output=True, text=True, env=env)
        assert proc.returncode == 0, proc.stderr
        assert tree(project) == before
    proc = subprocess.run(["agentsnap-claude-code", "restore", "--before-call", "7", "-C", str(project)], capture_output=True, text=True, env=env)
    assert proc.returncode == 2 and "no snapshot was taken before tool call 7" in proc.stderr and "rm -rf src" in proc.stderr
    assert proc.stderr.count("\n") == 1


def _cc(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["agentsnap-claude-code", *args], capture_output=True, text=True, env=helper_env())


def test_write_and_notebook_edit_of_existing_files_are_snapshotted_and_undone(project: Path, transcript: Path) -> None:
    (project / "nb.ipynb").write_text('{"cells": []}\n')
    write = {"tool_name": "Write", "tool_input": {"file_path": str(project / "src" / "app.py"), "content": "overwritten\n"}, "tool_use_id": "toolu_w"}
    _, out = run_plugin_hook(project, transcript, "PreToolUse", **write)
    assert out == {}  # an edit is protected quietly
    (project / "src" / "app.py").write_text("overwritten\n")
    nb = {"tool_name": "NotebookEdit", "tool_input": {"notebook_path": "nb.ipynb", "new_source": "x"}, "tool_use_id": "toolu_nb"}
    run_plugin_hook(project, transcript, "PreToolUse", **nb)
    (project / "nb.ipynb").write_text('{"cells": ["x"]}\n')
    listing = _cc("points", "-C", str(project), "--json")
    pts = json.loads(listing.stdout)
    assert [(p["tool"], p["call"]) for p in pts] == [("Write", 3), ("NotebookEdit", 3)]  # neither id is in the transcript yet
    assert _cc("restore", pts[0]["id"], "-C", str(project)).returncode == 0
    assert (project / "src" / "app.py").read_text() == "print('hello')\n" and (project / "nb.ipynb").read_text() == '{"cells": []}\n'


def test_rewind_and_restore_use_the_snapshot_asked_for_not_head(project: Path, transcript: Path) -> None:
    _, out = run_plugin_hook(project, transcript, "PreToolUse", **RM_SRC)
    first = _undo_of(out["systemMessage"])[2]
    (project / "src" / "app.py").write_text("later\n")
    (project / "later.txt").write_text("later\n")
    run_plugin_hook(project, transcript, "Stop", stop_hook_active=False)  # HEAD: the later state
    proc = _cc("rewind", first, "-C", str(project), "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["id"].startswith(first)
    assert (project / "src" / "app.py").read_text() == "print('hello')\n" and not (project / "later.txt").exists()


def test_the_restore_command_honours_its_arguments(project: Path, transcript: Path) -> None:
    """/agentsnap:restore <id> <path>: the command line of restore.md with $ARGUMENTS filled in, run by a shell."""
    from agentsnap_claude_code.install import plugin_root

    _, out = run_plugin_hook(project, transcript, "PreToolUse", **RM_SRC)
    snap = _undo_of(out["systemMessage"])[2]
    (project / "src" / "app.py").write_text("changed\n")
    (project / "README.md").write_text("changed too\n")
    body = (plugin_root() / "commands" / "restore.md").read_text()
    [line] = [ln for ln in body.splitlines() if ln.startswith("agentsnap-claude-code restore")]
    proc = subprocess.run(line.replace("$ARGUMENTS", f"{snap} src/app.py"), shell=True, capture_output=True, text=True, env=helper_env(), cwd=project)
    assert proc.returncode == 0, proc.stderr
    assert (project / "src" / "app.py").read_text() == "print('hello')\n"
    assert (project / "README.md").read_text() == "changed too\n"  # only the path asked for
    assert "undo with: agentsnap-claude-code restore " in proc.stdout


def test_bulky_ignored_build_folders_are_left_out_and_said_so_with_a_switch(project: Path, transcript: Path) -> None:
    (project / ".gitignore").write_text("node_modules/\n*.log\n")
    (project / "debug.log").write_text("small ignored file: captured\n")
    for i in range(30):
        (project / "node_modules" / f"pkg{i % 3}").mkdir(parents=True, exist_ok=True)
        (project / "node_modules" / f"pkg{i % 3}" / f"f{i}.js").write_text("x\n")
    (project / ".claude").mkdir()
    (project / ".claude" / "agentsnap.json").write_text(json.dumps({"bulky_files": 20}))
    _, out = run_plugin_hook(project, transcript, "PreToolUse", **RM_SRC)
    message = out["systemMessage"]
    assert "NOT captured (ignored by git, over 20 files" in message and "node_modules/" in message
    _git(project, "clean", "-fdx")
    proc = subprocess.run(_undo_of(message), capture_output=True, text=True, env=helper_env())
    assert proc.returncode == 0, proc.stderr
    assert (project / "debug.log").is_file() and (project / "src" / "untracked.txt").is_file()
    assert not (project / "node_modules").exists()  # exactly what the message said
    (project / ".claude" / "agentsnap.json").write_text(json.dumps({"bulky_files": 20, "skip_bulky_ignored": False}))
    (project / "node_modules" / "big").mkdir(parents=True)
    for i in range(30):
        (project / "node_modules" / "big" / f"f{i}.js").write_text("x\n")
    _, out = run_plugin_hook(project, transcript, "PreToolUse", tool_name="Bash", tool_input={"command": "rm -rf node_modules"}, tool_use_id="toolu_nm")
    assert "NOT captured" not in out["systemMessage"]
    subprocess.run(["rm", "-rf", str(project / "node_modules")], check=True)
    assert subprocess.run(_undo_of(out["systemMessage"]), capture_output=True, text=True, env=helper_env()).returncode == 0
    assert len(list((project / "node_modules" / "big").iterdir())) == 30


def test_a_configured_shared_store_holds_the_snapshots(project: Path, transcript: Path, tmp_path: Path) -> None:
    team = tmp_path / "team-store"
    (project / ".claude").mkdir()
    (project / ".claude" / "agentsnap.json").write_text(json.dumps({"store_url": team.as_uri(), "store_dir": str(tmp_path / "state")}))
    _, out = run_plugin_hook(project, transcript, "PreToolUse", **RM_SRC)
    undo = _undo_of(out["systemMessage"])
    assert (team / "format.json").is_file() and list((tmp_path / "state").iterdir())  # objects and refs in the shared store
    assert not (project / ".env").exists()
    subprocess.run("rm -rf src", shell=True, cwd=project, check=True)
    proc = subprocess.run(undo, capture_output=True, text=True, env=helper_env())
    assert proc.returncode == 0, proc.stderr
    assert (project / "src" / "untracked.txt").read_text() == "scratch notes, never committed\n"


def _bang_line(command: str, arguments: str) -> str:
    """The `!` line of a plugin command with $ARGUMENTS filled in, as Claude Code runs it before the prompt."""
    from agentsnap_claude_code.install import plugin_root

    body = (plugin_root() / "commands" / f"{command}.md").read_text()
    [line] = [ln for ln in body.splitlines() if ln.startswith("!`")]
    return line[2:-1].replace("$ARGUMENTS", arguments)


def test_in_session_rewind_command_lists_points_then_rewinds_files_and_conversation(project: Path, transcript: Path, home: Path) -> None:
    """/agentsnap:rewind's `!` line through a shell (the real CLI runs it in test_real_claude_code): no model step needed."""
    empty = subprocess.run(_bang_line("rewind", ""), shell=True, capture_output=True, text=True, env=helper_env(), cwd=project)
    assert empty.returncode == 0 and empty.stdout.startswith("nothing to rewind to: no agentsnap store")
    _, out = run_plugin_hook(project, transcript, "PreToolUse", **RM_SRC)
    snap = _undo_of(out["systemMessage"])[2]
    before = tree(project)
    subprocess.run("rm -rf src", shell=True, cwd=project, check=True)
    listing = subprocess.run(_bang_line("rewind", ""), shell=True, capture_output=True, text=True, env=helper_env(), cwd=project)
    assert listing.returncode == 0 and f"{snap}  before destructive tool call 2 (Bash: rm -rf src)" in listing.stdout
    assert "Rewind with: /agentsnap:rewind <id> | --last-destructive" in listing.stdout and (not (project / "src").exists())
    proc = subprocess.run(_bang_line("rewind", "--last-destructive"), shell=True, capture_output=True, text=True, env=helper_env(), cwd=project)
    assert proc.returncode == 0, proc.stderr
    assert tree(project) == before
    [fork] = [ln.split("/resume ")[1].split()[0] for ln in proc.stdout.splitlines() if ln.startswith("switch to the fork in Claude Code with: /resume ")]
    forked = home / ".claude" / "projects" / transcript.parent.name / f"{fork}.jsonl"
    assert "toolu_01Rm7bZ2" in transcript.read_text() and forked.is_file()
    assert "toolu_01Rm7bZ2" not in forked.read_text()  # the call the point was taken before is not in the fork
    [undo_line] = [ln for ln in proc.stdout.splitlines() if "undo with: " in ln]
    undo = subprocess.run(_undo_of(undo_line), capture_output=True, text=True, env=helper_env())  # the printed undo of the rewind
    assert undo.returncode == 0 and not (project / "src").exists()
