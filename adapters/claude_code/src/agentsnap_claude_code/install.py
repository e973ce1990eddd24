"""Locating the plugin files and installing them by hand into ``~/.claude`` or ``<project>/.claude``.

The marketplace route (``/plugin install``) needs none of this; ``install`` is for people who
want the commands and hooks without a marketplace. Commands go to ``commands/agentsnap/``
(invoked as ``/agentsnap:snapshot`` etc.), hooks are merged into ``settings.json`` next to whatever is
there, marked so that a second install replaces them and ``uninstall`` removes only them.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import sys
from pathlib import Path
from typing import Any

from agentsnap_core.errors import InvalidInput

from .transcript import claude_config_dir

#: how the plugin's hooks.json invokes the helper; replaced by an absolute command on install
PLUGIN_HOOK_COMMAND = 'sh "${CLAUDE_PLUGIN_ROOT}/hooks/agentsnap-hook"'
#: every hook command install writes (and the pre-0.2 ``-m agentsnap_claude_code hook`` ones) contains this
MARK = "agentsnap_claude_code"
COMMANDS_SUBDIR = "agentsnap"


def plugin_root() -> Path:
    """The plugin directory (``.claude-plugin/plugin.json``, ``commands/``, ``hooks/``)."""
    packaged = Path(__file__).parent / "claude_plugin"
    if (packaged / ".claude-plugin" / "plugin.json").is_file():
        return packaged
    for d in Path(__file__).resolve().parents:  # editable install / source checkout
        candidate = d / "plugin"
        if (candidate / ".claude-plugin" / "plugin.json").is_file():
            return candidate
    raise InvalidInput("the Claude Code plugin files are missing from this installation of agentsnap-claude-code")


def helper_command() -> str:
    """The plugin's hook script, told to run the helper with this Python (it still fails closed if that breaks)."""
    helper = shlex.quote(f"{shlex.quote(sys.executable)} -m agentsnap_claude_code.gate")
    return f"AGENTSNAP_HOOK_HELPER={helper} sh {shlex.quote(str(plugin_root() / 'hooks' / 'agentsnap-hook'))}"


def hook_client() -> Any:
    """The native hook client (``hook_client.c``) that ``install-client`` puts in place of the
    ``agentsnap-claude-code-hook`` script: core's native-client builder (agentsnap_core.cli.native) with this
    installation's Python and the helper's protocol."""
    from agentsnap_core.cli import native

    from .daemon import PROTOCOL

    return native.Client("agentsnap-claude-code-hook", Path(__file__).with_name("hook_client.c"),
                         "agentsnap_claude_code.gate:main", b"agentsnap-hook-native-client",
                         {"AGENTSNAP_PYTHON": sys.executable, "AGENTSNAP_HOOK_PROTOCOL": PROTOCOL},
                         ("PreToolUse",), check_env={"AGENTSNAP_HOOK_DAEMON": "0"})  # (checked in its own Python)


def target_dir(user: bool, project: str | None) -> Path:
    if user == bool(project):
        raise InvalidInput("choose exactly one of --user or --project DIR")
    if user:
        return claude_config_dir()
    root = Path(project or ".").resolve()
    if not root.is_dir():
        raise InvalidInput(f"project directory {root} does not exist")
    return root / ".claude"


def _read_settings(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8") or "{}")
    except ValueError as exc:
        raise InvalidInput(f"{path} is not valid JSON ({exc}); fix it first, nothing was changed") from None
    if not isinstance(data, dict) or not isinstance(data.get("hooks", {}), dict):
        raise InvalidInput(f"{path} does not look like Claude Code settings (expected an object with a 'hooks' object)")
    return data


def _without_ours(hooks: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for event, groups in hooks.items():
        kept = []
        for group in groups if isinstance(groups, list) else []:
            inner = [h for h in group.get("hooks", []) if MARK not in str(h.get("command", ""))] if isinstance(group, dict) else None
            if inner is None:
                kept.append(group)
            elif inner:
                kept.append({**group, "hooks": inner})
        if kept:
            out[event] = kept
    return out


def _write_json(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".agentsnap-tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def plugin_hooks() -> dict[str, Any]:
    data = json.loads((plugin_root() / "hooks" / "hooks.json").read_text(encoding="utf-8"))
    return dict(data["hooks"])


def install(*, user: bool = False, project: str | None = None) -> dict[str, Any]:
    """Copy the slash commands and merge the hooks into settings.json; idempotent."""
    base = target_dir(user, project)
    settings_path = base / "settings.json"
    settings = _read_settings(settings_path)  # validate before writing anything
    hooks = _without_ours(settings.get("hooks", {}))
    command = helper_command()
    for event, groups in plugin_hooks().items():
        for group in groups:
            inner = [{**h, "command": h["command"].replace(PLUGIN_HOOK_COMMAND, command)} for h in group["hooks"]]
            hooks.setdefault(event, []).append({**group, "hooks": inner})
    commands_dir = base / "commands" / COMMANDS_SUBDIR
    commands_dir.mkdir(parents=True, exist_ok=True)
    copied = []
    for md in sorted((plugin_root() / "commands").glob("*.md")):
        shutil.copyfile(md, commands_dir / md.name)
        copied.append(md.stem)
    _write_json(settings_path, {**settings, "hooks": hooks})
    return {"settings": str(settings_path), "commands": [f"/{COMMANDS_SUBDIR}:{c}" for c in copied], "commands_dir": str(commands_dir), "hook_command": command}


def uninstall(*, user: bool = False, project: str | None = None) -> dict[str, Any]:
    """Remove what :func:`install` added (other hooks and commands are left alone)."""
    base = target_dir(user, project)
    settings_path = base / "settings.json"
    settings = _read_settings(settings_path)
    removed_commands = []
    commands_dir = base / "commands" / COMMANDS_SUBDIR
    for md in sorted((plugin_root() / "commands").glob("*.md")):
        if (commands_dir / md.name).exists():
            (commands_dir / md.name).unlink()
            removed_commands.append(md.stem)
    if commands_dir.is_dir() and not any(commands_dir.iterdir()):
        commands_dir.rmdir()
    if settings_path.exists():
        hooks = _without_ours(settings.get("hooks", {}))
        new = {**settings, "hooks": hooks} if hooks else {k: v for k, v in settings.items() if k != "hooks"}
        _write_json(settings_path, new)
    return {"settings": str(settings_path), "removed_commands": removed_commands}
