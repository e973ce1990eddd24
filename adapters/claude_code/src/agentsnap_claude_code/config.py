"""Settings of the Claude Code integration.

Read from ``<claude config dir>/agentsnap.json`` (user) and then ``<project>/.claude/agentsnap.json``
(project; wins). Both are optional JSON objects with the keys of :data:`DEFAULTS`.
"""

from __future__ import annotations

import os

from .matcher import RULES, Matcher
from .paths import claude_config_dir, config_dir

CONFIG_NAME = "agentsnap.json"


class InvalidInput(ValueError):
    """A settings file cannot be used (the message names the file and key).

    A ``ValueError`` rather than the core's error so that this module stays stdlib-only: the hook's
    entry script (:mod:`.gate`) reads settings before deciding whether agentsnap_core is needed at all.
    """

TURN_EVENTS = ("Stop", "UserPromptSubmit", "both", "off")


TYPE_CHECKING = False
if TYPE_CHECKING:  # no typing (or pathlib) import at run time: the hook's entry point reads settings on every call
    from pathlib import Path
    from typing import Any, TypedDict
else:
    TypedDict = object


class Settings(TypedDict):
    auto_init: bool
    turn_snapshots: str
    snapshot_on_edit: bool
    capture_transcript: bool
    snapshot_on_mcp: bool
    mcp_read_only: list[str]
    extra_patterns: list[str]
    ignore_patterns: list[str]
    disabled_rules: list[str]
    log_file: str | None
    store_dir: str | None
    store_url: str | None
    capture_git: bool
    capture_secrets: bool | None
    snapshot_timeout: int
    busy_wait: int
    skip_bulky_ignored: bool
    bulky_files: int


DEFAULTS: Settings = {
    "auto_init": True,  # create .agentsnap/ in the project on the first hook if there is none
    "turn_snapshots": "Stop",  # per-turn snapshot on Stop, UserPromptSubmit, both, or off
    "snapshot_on_edit": True,  # snapshot before Write/Edit/NotebookEdit of an existing file
    "snapshot_on_mcp": True,  # snapshot before an MCP tool call that may change files (mcptools: by the tool's name)
    "mcp_read_only": [],  # globs over MCP tool names (mcp__github__*) declared read-only: no snapshot before them
    "capture_transcript": True,  # store the session transcript as the snapshot's trace layer
    "extra_patterns": [],  # regexes: commands that also count as destructive
    "ignore_patterns": [],  # regexes: command lines never treated as destructive
    "disabled_rules": [],  # names of built-in rules to switch off (see matcher.RULES)
    "log_file": None,  # default: <claude config dir>/agentsnap/hooks.log
    "store_dir": None,  # where the plugin's stores live (one per project); default: <user data dir>/agentsnap/claude-code
    "store_url": None,  # objects and refs in a shared store (file://, s3://, postgresql://); see docs/STORES.md
    "capture_git": True,  # capture .git too, so a dropped stash or a deleted .git comes back
    "capture_secrets": None,  # capture .env and other credential files; default: yes for a local store, no with store_url
    "snapshot_timeout": 45,  # seconds; a destructive command whose snapshot is not done by then is asked about
    "busy_wait": 10,  # seconds to wait for another agentsnap process snapshotting/restoring the same tree
    "skip_bulky_ignored": True,  # leave out folders .gitignore ignores that hold more than bulky_files files (node_modules/, target/)
    "bulky_files": 2000,
}


def config_files(project_dir: str | os.PathLike[str] | None) -> list[str]:
    """The settings files that apply to ``project_dir`` (user first, project last; either may be missing)."""
    files = [os.path.join(config_dir(), CONFIG_NAME)]
    if project_dir:
        files.append(os.path.join(os.fspath(project_dir), ".claude", CONFIG_NAME))
    return files


def load_settings(project_dir: str | os.PathLike[str] | None = None) -> Settings:
    """Merged settings; a bad file raises :class:`InvalidInput` naming the file and key."""
    merged: dict[str, Any] = dict(DEFAULTS)
    for path in config_files(project_dir):
        if not os.path.isfile(path):
            continue
        import json

        try:
            with open(path, encoding="utf-8") as f:
                data = json.loads(f.read())
        except (OSError, ValueError) as exc:
            raise InvalidInput(f"{path}: not valid JSON ({exc})") from None
        if not isinstance(data, dict):
            raise InvalidInput(f"{path}: expected a JSON object")
        for key, value in data.items():
            if key not in DEFAULTS:
                raise InvalidInput(f"{path}: unknown setting {key!r}; known: {sorted(DEFAULTS)}")
            merged[key] = value
    _validate(merged)
    return merged  # type: ignore[return-value]


def _validate(s: dict[str, Any]) -> None:
    for key in ("auto_init", "snapshot_on_edit", "snapshot_on_mcp", "capture_transcript", "capture_git", "skip_bulky_ignored"):
        if not isinstance(s[key], bool):
            raise InvalidInput(f"setting {key!r} must be true or false, not {s[key]!r}")
    if s["capture_secrets"] is not None and not isinstance(s["capture_secrets"], bool):
        raise InvalidInput(f"setting 'capture_secrets' must be true, false or null, not {s['capture_secrets']!r}")
    for key in ("store_dir", "store_url", "log_file"):
        if s[key] is not None and not (isinstance(s[key], str) and s[key]):
            raise InvalidInput(f"setting {key!r} must be a non-empty string or null, not {s[key]!r}")
    t = s["snapshot_timeout"]
    if isinstance(t, bool) or not isinstance(t, int) or not 1 <= t <= 600:
        raise InvalidInput(f"setting 'snapshot_timeout' must be a whole number of seconds from 1 to 600, not {t!r}")
    w = s["busy_wait"]
    if isinstance(w, bool) or not isinstance(w, int) or not 0 <= w <= 600:
        raise InvalidInput(f"setting 'busy_wait' must be a whole number of seconds from 0 to 600, not {w!r}")
    b = s["bulky_files"]
    if isinstance(b, bool) or not isinstance(b, int) or b < 1:
        raise InvalidInput(f"setting 'bulky_files' must be a positive whole number, not {b!r}")
    if s["turn_snapshots"] not in TURN_EVENTS:
        raise InvalidInput(f"setting 'turn_snapshots' must be one of {TURN_EVENTS}, not {s['turn_snapshots']!r}")
    for key in ("extra_patterns", "ignore_patterns", "disabled_rules", "mcp_read_only"):
        if not isinstance(s[key], list) or not all(isinstance(x, str) for x in s[key]):
            raise InvalidInput(f"setting {key!r} must be a list of strings")
    odd = [p for p in s["mcp_read_only"] if not p.startswith("mcp__")]
    if odd:
        raise InvalidInput(f"setting 'mcp_read_only' holds {odd}: each entry is a glob over MCP tool names, which "
                           "start with 'mcp__' (e.g. 'mcp__github__*', 'mcp__fs__read_file')")
    bad = [r for r in s["disabled_rules"] if r not in RULES]
    if bad:
        raise InvalidInput(f"setting 'disabled_rules' names unknown rules {bad}; known: {sorted(RULES)}")
    import re

    for p in s["extra_patterns"] + s["ignore_patterns"]:
        try:
            re.compile(p)
        except re.error as exc:
            raise InvalidInput(f"pattern {p!r} is not a valid regular expression: {exc}") from None


def make_matcher(settings: Settings, cwd: str | None) -> Matcher:
    return Matcher(
        extra_patterns=list(settings["extra_patterns"]),
        ignore_patterns=list(settings["ignore_patterns"]),
        disabled_rules=list(settings["disabled_rules"]),
        cwd=cwd,
    )


def log_path(settings: Settings | None = None) -> Path:
    from pathlib import Path

    configured = (settings or DEFAULTS)["log_file"]
    return Path(configured).expanduser() if configured else claude_config_dir() / "agentsnap" / "hooks.log"
