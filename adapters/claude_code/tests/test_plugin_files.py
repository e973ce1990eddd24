"""The plugin manifest, marketplace, hooks and commands against the documented schema (README: Sources)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from agentsnap_claude_code.cli import main as cc_cli
from agentsnap_claude_code.install import PLUGIN_HOOK_COMMAND, plugin_root
from agentsnap_core.cli import main as agentsnap_cli

REPO_ROOT = Path(__file__).resolve().parents[3]
KEBAB = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")
#: plugin.json fields documented in the manifest reference (only `name` is required)
MANIFEST_FIELDS = {
    "name", "version", "description", "author", "homepage", "repository", "license", "keywords",
    "commands", "agents", "skills", "hooks", "mcpServers", "lspServers", "outputStyles", "userConfig", "channels",
}
#: hook events documented in the hooks reference
HOOK_EVENTS = {
    "PreToolUse", "PostToolUse", "PostToolUseFailure", "PermissionRequest", "PermissionDenied", "Notification",
    "UserPromptSubmit", "Stop", "SubagentStart", "SubagentStop", "PreCompact", "PostCompact", "SessionStart",
    "SessionEnd", "Setup", "ConfigChange",
}
TOOL_EVENTS = {"PreToolUse", "PostToolUse", "PostToolUseFailure", "PermissionRequest", "PermissionDenied"}
#: slash-command frontmatter keys documented for commands
FRONTMATTER_KEYS = {"description", "argument-hint", "allowed-tools", "model", "disable-model-invocation"}
COMMANDS = ("snapshot", "fork", "merge", "restore", "rewind", "log", "diff")
#: commands that run the plugin's own CLI (its store lives outside the project)
PLUGIN_CLI_COMMANDS = {"restore": "restore", "rewind": "rewind"}


def _frontmatter(path: Path) -> tuple[dict[str, Any], str]:
    text = path.read_text(encoding="utf-8")
    m = re.match(r"^---\n(.*?)\n---\n(.*)$", text, re.S)
    assert m, f"{path.name}: no YAML frontmatter"
    meta = yaml.safe_load(m.group(1))
    assert isinstance(meta, dict)
    return meta, m.group(2)


def test_plugin_manifest() -> None:
    manifest = json.loads((plugin_root() / ".claude-plugin" / "plugin.json").read_text())
    assert KEBAB.match(manifest["name"])
    assert set(manifest) <= MANIFEST_FIELDS, set(manifest) - MANIFEST_FIELDS
    assert isinstance(manifest["author"], dict) and isinstance(manifest["author"]["name"], str)
    assert re.match(r"^\d+\.\d+\.\d+", manifest["version"])
    assert all(isinstance(k, str) for k in manifest["keywords"])
    # hooks/hooks.json is loaded automatically; naming it again in the manifest is a duplicate-load error
    assert "hooks" not in manifest and "commands" not in manifest


def test_marketplace_points_at_the_plugin() -> None:
    market = json.loads((REPO_ROOT / ".claude-plugin" / "marketplace.json").read_text())
    assert KEBAB.match(market["name"]) and isinstance(market["owner"]["name"], str)
    manifest = json.loads((plugin_root() / ".claude-plugin" / "plugin.json").read_text())
    [entry] = [p for p in market["plugins"] if p["name"] == manifest["name"]]
    assert entry["source"].startswith("./")
    target = (REPO_ROOT / entry["source"]).resolve()
    assert (target / ".claude-plugin" / "plugin.json").is_file()
    # the marketplace's plugin is the one this installation runs (a wheel ships a copy: compare files, not paths)
    files = sorted(p.relative_to(target).as_posix() for p in target.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(plugin_root()).as_posix() for p in plugin_root().rglob("*") if p.is_file())
    assert all((target / f).read_bytes() == (plugin_root() / f).read_bytes() for f in files)
    assert entry.get("version", manifest["version"]) == manifest["version"]


def test_hooks_json() -> None:
    data = json.loads((plugin_root() / "hooks" / "hooks.json").read_text())
    assert set(data) <= {"description", "hooks"} and isinstance(data["hooks"], dict)
    assert set(data["hooks"]) <= HOOK_EVENTS
    assert {"PreToolUse", "UserPromptSubmit", "Stop"} <= set(data["hooks"])
    for event, groups in data["hooks"].items():
        assert isinstance(groups, list) and groups
        for group in groups:
            assert set(group) <= {"matcher", "hooks"}
            if "matcher" in group:
                assert event in TOOL_EVENTS
                re.compile(group["matcher"])
            for h in group["hooks"]:
                assert h["type"] == "command" and isinstance(h["timeout"], int) and 0 < h["timeout"] <= 600
                assert h["command"].startswith(PLUGIN_HOOK_COMMAND) and h["command"].endswith(f" {event}")
    pre = data["hooks"]["PreToolUse"][0]["matcher"]
    assert all(re.fullmatch(pre, tool) for tool in ("Bash", "Write", "Edit", "NotebookEdit"))
    assert not any(re.fullmatch(pre, tool) for tool in ("Read", "MultiEdit"))  # MultiEdit is not a tool in 2.1.x
    script = plugin_root() / "hooks" / "agentsnap-hook"
    assert script.read_text().startswith("#!/bin/sh") and os.access(script, os.X_OK)


def _cli_verbs(body: str) -> list[str]:
    """`agentsnap <verb>` in code: fenced blocks, inline code and !`...` bash lines (not agentsnap-claude-code)."""
    code = re.findall(r"```[a-z]*\n(.*?)```", body, re.S) + re.findall(r"`([^`\n]+)`", body)
    return [m for c in code for m in re.findall(r"(?<![\w-])agentsnap\s+([a-z][a-z-]*)", c)]


def test_all_commands_exist_and_nothing_else() -> None:
    assert sorted(p.stem for p in (plugin_root() / "commands").glob("*.md")) == sorted(COMMANDS)


def _agentsnap_verbs() -> set[str]:
    """Every verb of the core CLI, the ones it loads only when they run included."""
    import click

    return set(agentsnap_cli.list_commands(click.Context(agentsnap_cli)))


@pytest.mark.parametrize("name", COMMANDS)
def test_command_frontmatter_and_cli_verbs(name: str) -> None:
    meta, body = _frontmatter(plugin_root() / "commands" / f"{name}.md")
    assert set(meta) <= FRONTMATTER_KEYS, set(meta) - FRONTMATTER_KEYS
    assert isinstance(meta["description"], str) and meta["description"]
    assert isinstance(meta["argument-hint"], str) and meta["argument-hint"]
    assert "$ARGUMENTS" in body
    if name in PLUGIN_CLI_COMMANDS:
        assert meta["allowed-tools"] == "Bash(agentsnap-claude-code:*)"
        verbs = re.findall(r"agentsnap-claude-code\s+([a-z][a-z-]*)", body)
        assert PLUGIN_CLI_COMMANDS[name] in verbs and all(v in cc_cli.commands for v in verbs)
        return
    assert meta["allowed-tools"] == "Bash(agentsnap:*), Bash(agentsnap-claude-code:*)"
    verbs = _cli_verbs(body)
    assert verbs, f"/{name} does not call the agentsnap CLI"
    missing = [v for v in verbs if v not in _agentsnap_verbs()]
    assert not missing, f"/{name} calls agentsnap verbs that do not exist: {missing}"
    assert name in verbs


_BARE = re.compile(r"(?<![\w:/.-])/(snapshot|fork|merge|restore|rewind|log|diff)\b")


def test_slash_commands_are_named_as_claude_code_names_plugin_commands() -> None:
    """Claude Code prefixes a plugin's commands: /agentsnap:snapshot; a bare /snapshot is "Unknown command"."""
    texts = {
        "README.md": (plugin_root().parent / "README.md").read_text() if (plugin_root().parent / "README.md").is_file() else "",
        "plugin.json": (plugin_root() / ".claude-plugin" / "plugin.json").read_text(),
        "hooks.json": (plugin_root() / "hooks" / "hooks.json").read_text(),
        **{p.name: p.read_text() for p in (plugin_root() / "commands").glob("*.md")},
    }
    for name, text in texts.items():
        assert not _BARE.findall(text), f"{name} names bare slash commands {_BARE.findall(text)}"
    assert "/agentsnap:snapshot" in texts["plugin.json"]
