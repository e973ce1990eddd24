"""MCP tool calls that may change files get a snapshot before them, as Write and Edit do.

Reported (tried as a user): with an MCP filesystem server (``claude mcp add fs ...``), the agent's edits go through
``mcp__fs__write_file`` / ``mcp__fs__edit_file``, not Write or Edit. The plugin's PreToolUse matcher was
``Bash|Write|Edit|NotebookEdit``, so Claude Code never ran the hook for them: no snapshot before the change, no
rewind point, and nothing said so - "go back to just before" failed in silence. Now the matcher
(``^(Bash|Write|Edit|NotebookEdit|mcp__.+)$``) sends MCP calls to the hook, which snapshots before every one whose
name does not say it only reads (``agentsnap_claude_code.mcptools``); ``mcp_read_only`` declares more tools
read-only, ``snapshot_on_mcp: false`` turns it off. The hook runs here as Claude Code runs it: hooks.json's command
line, JSON on stdin, the helper on PATH. (The real CLI's MCP plumbing is not exercised here.)
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
from agentsnap_claude_code.config import InvalidInput, load_settings
from agentsnap_claude_code.install import plugin_root
from agentsnap_claude_code.mcptools import may_change_files, target_of
from conftest import helper_env, run_plugin_hook

WRITE = {"tool_name": "mcp__fs__write_file", "tool_use_id": "toolu_mcp1"}


def _matcher() -> str:
    data = json.loads((plugin_root() / "hooks" / "hooks.json").read_text())
    return str(data["hooks"]["PreToolUse"][0]["matcher"])


@pytest.mark.parametrize("tool", ["mcp__fs__write_file", "mcp__filesystem__edit_file", "mcp__fs__move_file",
                                  "mcp__db-tools__runQuery", "Bash", "Write", "Edit", "NotebookEdit"])
def test_the_plugins_matcher_sends_these_tools_to_the_hook(tool: str) -> None:
    assert re.fullmatch(_matcher(), tool) and re.search(_matcher(), tool)


@pytest.mark.parametrize("tool", ["TodoWrite", "BashOutput", "Read", "WebFetch", "mcp__"])
def test_the_plugins_matcher_leaves_other_tools_alone_whole_names_only(tool: str) -> None:
    assert not re.search(_matcher(), tool)


@pytest.mark.parametrize(("tool", "changes"), [
    ("mcp__fs__write_file", True), ("mcp__fs__edit_file", True), ("mcp__fs__move_file", True),
    ("mcp__fs__create_directory", True), ("mcp__fs__directory_tree", True), ("mcp__git__git_commit", True),
    ("mcp__db__runQuery", True), ("mcp__x__get_or_create_file", True), ("mcp__x__readAndUpdate", True),
    ("mcp__fs__read_file", False), ("mcp__fs__read_multiple_files", False), ("mcp__fs__list_directory", False),
    ("mcp__fs__get_file_info", False), ("mcp__fs__search_files", False), ("mcp__github__getIssue", False),
    ("mcp__fetch__fetch", False),
    # a reading first word and a destroying one later (each read-only before)
    ("mcp__x__read_then_clear", True), ("mcp__x__get_and_purge", True), ("mcp__x__search_and_destroy", True),
    ("mcp__x__list_and_prune", True), ("mcp__x__findAndWipe", True), ("mcp__x__query_and_erase", True),
    ("mcp__x__check_and_cleanup", True), ("mcp__x__get_and_stash", True),
])
def test_the_name_rule_takes_only_reading_names_as_read_only(tool: str, changes: bool) -> None:
    assert may_change_files(tool) is changes


def test_mcp_read_only_globs_declare_more_tools_read_only() -> None:
    assert may_change_files("mcp__db__runQuery", ["mcp__db__*"]) is False
    assert may_change_files("mcp__fs__write_file", ["mcp__db__*"]) is True


def test_the_label_names_the_path_argument() -> None:
    assert target_of({"path": "src/app.py", "content": "x"}) == "src/app.py"
    assert target_of({"source": "a.txt", "destination": "b.txt"}) == "a.txt"
    assert target_of({"sql": "drop table t"}) == '{"sql": "drop table t"}'


def _cc(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["agentsnap-claude-code", *args], capture_output=True, text=True, env=helper_env())


def test_an_mcp_write_over_a_file_is_snapshotted_first_and_its_point_brings_it_back(project: Path,
                                                                                    transcript: Path) -> None:
    app = project / "src" / "app.py"
    _, out = run_plugin_hook(project, transcript, "PreToolUse", **WRITE,
                             tool_input={"path": str(app), "content": "print('replaced')\n"})
    assert out == {}  # protected quietly, as an Edit
    app.write_text("print('replaced')\n")  # what the MCP server then does
    pts = json.loads(_cc("points", "-C", str(project), "--json").stdout)
    assert [p["tool"] for p in pts] == ["mcp__fs__write_file"] and "(mcp__fs__write_file: /" in pts[0]["label"], pts
    assert _cc("restore", pts[0]["id"], "-C", str(project)).returncode == 0
    assert app.read_text() == "print('hello')\n"


def test_a_reading_mcp_call_takes_no_snapshot(project: Path, transcript: Path) -> None:
    _, out = run_plugin_hook(project, transcript, "PreToolUse", tool_name="mcp__fs__read_file",
                             tool_input={"path": str(project / "src" / "app.py")}, tool_use_id="toolu_r")
    assert out == {} and not (project / ".agentsnap").exists()


def test_settings_turn_it_off_or_declare_tools_read_only(project: Path, transcript: Path) -> None:
    (project / ".claude").mkdir()
    settings = project / ".claude" / "agentsnap.json"
    for said in ({"mcp_read_only": ["mcp__fs__*"]}, {"snapshot_on_mcp": False}):
        settings.write_text(json.dumps(said))
        _, out = run_plugin_hook(project, transcript, "PreToolUse", **WRITE,
                                 tool_input={"path": "src/app.py", "content": "x"})
        assert out == {} and not (project / ".agentsnap").exists(), said


@pytest.mark.parametrize(("value", "says"), [("mcp__fs__*", "must be a list of strings"),
                                             (["write_file"], "start with 'mcp__'")])
def test_a_bad_mcp_read_only_setting_is_refused_naming_it(tmp_path: Path, value: object, says: str) -> None:
    (tmp_path / ".claude").mkdir()
    (tmp_path / ".claude" / "agentsnap.json").write_text(json.dumps({"mcp_read_only": value}))
    with pytest.raises(InvalidInput, match=re.escape(says)):
        load_settings(tmp_path)
