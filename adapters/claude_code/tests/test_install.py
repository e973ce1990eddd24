"""Manual install into ~/.claude or a project's .claude/, and the installed hook command really running."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from agentsnap_claude_code.cli import main as cc_cli
from agentsnap_claude_code.install import MARK
from agentsnap_core import Repo
from click.testing import CliRunner
from conftest import payload

COMMANDS = ["/agentsnap:diff", "/agentsnap:fork", "/agentsnap:log", "/agentsnap:merge", "/agentsnap:restore", "/agentsnap:rewind", "/agentsnap:snapshot"]


def _run(*args: str) -> dict:
    r = CliRunner().invoke(cc_cli, [*args, "--json"])
    assert r.exit_code == 0, r.output
    return json.loads(r.output)


def test_user_install_keeps_existing_settings_is_idempotent_and_uninstalls_cleanly(home: Path) -> None:
    settings = home / ".claude" / "settings.json"
    settings.parent.mkdir(parents=True)
    mine = {"type": "command", "command": "my-linter --fix"}
    settings.write_text(json.dumps({"model": "opus", "hooks": {"PostToolUse": [{"matcher": "Edit", "hooks": [mine]}], "Stop": [{"hooks": [{"type": "command", "command": "notify-send done"}]}]}}))
    res = _run("install", "--user")
    assert res["commands"] == COMMANDS
    _run("install", "--user")  # again: replaces, never duplicates
    data = json.loads(settings.read_text())
    assert data["model"] == "opus" and data["hooks"]["PostToolUse"] == [{"matcher": "Edit", "hooks": [mine]}]
    ours = [h for ev in data["hooks"].values() for g in ev for h in g["hooks"] if MARK in h["command"]]
    assert len(ours) == 3 and {h["command"].rsplit(" ", 1)[1] for h in ours} == {"PreToolUse", "UserPromptSubmit", "Stop"}
    assert "${CLAUDE_PLUGIN_ROOT}" not in json.dumps(data)
    assert sorted(p.name for p in (home / ".claude" / "commands" / "agentsnap").iterdir()) == sorted(c.split(":")[1] + ".md" for c in COMMANDS)

    _run("uninstall", "--user")
    data = json.loads(settings.read_text())
    assert data == {"model": "opus", "hooks": {"PostToolUse": [{"matcher": "Edit", "hooks": [mine]}], "Stop": [{"hooks": [{"type": "command", "command": "notify-send done"}]}]}}
    assert not (home / ".claude" / "commands" / "agentsnap").exists()


def test_project_install_and_the_installed_command_protects_the_project(project: Path, transcript: Path) -> None:
    res = _run("install", "--project", str(project))
    assert res["settings"] == str(project / ".claude" / "settings.json")
    data = json.loads((project / ".claude" / "settings.json").read_text())
    [group] = data["hooks"]["PreToolUse"]
    command = group["hooks"][0]["command"]
    bash = {"tool_name": "Bash", "tool_input": {"command": "cd src && rm -rf pkg"}}
    proc = subprocess.run(command, shell=True, input=payload(project, transcript, "PreToolUse", **bash), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["systemMessage"].startswith("agentsnap: snapshot ")
    with Repo.open(project) as repo:
        assert repo.get("HEAD").message == "before Bash: cd src && rm -rf pkg"


def test_install_refuses_broken_settings_and_writes_nothing(home: Path, tmp_path: Path) -> None:
    settings = home / ".claude" / "settings.json"
    settings.parent.mkdir(parents=True)
    settings.write_text("{ not json")
    r = CliRunner().invoke(cc_cli, ["install", "--user"])
    assert r.exit_code == 2 and "not valid JSON" in r.output
    assert settings.read_text() == "{ not json" and not (home / ".claude" / "commands").exists()
    r = CliRunner().invoke(cc_cli, ["install", "--user", "--project", str(tmp_path)])
    assert r.exit_code == 2 and "exactly one" in r.output


def test_plugin_dir_and_check_commands(tmp_path: Path) -> None:
    r = CliRunner().invoke(cc_cli, ["plugin-dir"])
    assert (Path(r.output.strip()) / ".claude-plugin" / "plugin.json").is_file()
    r = CliRunner().invoke(cc_cli, ["check", "bash -c 'git reset --hard'", "--json"])
    assert r.exit_code == 1 and json.loads(r.output)["findings"][0]["rule"] == "git-reset-hard"
    r = CliRunner().invoke(cc_cli, ["check", 'echo "rm -rf"'])
    assert r.exit_code == 0 and r.output.strip() == "harmless"
