"""The hook's entry point: decide with the standard library alone whether there is work to do.

Claude Code runs the PreToolUse hook before every Bash/Write/Edit/NotebookEdit and MCP tool call. Most are
harmless, so this module (stdlib only: settings, the matcher) answers those without importing
agentsnap_core; only a call that needs a snapshot loads :mod:`.hooks`. While that snapshot runs,
an alarm enforces ``snapshot_timeout``: a destructive command whose snapshot is not finished in
time is asked about instead of running unprotected when Claude Code's own hook timeout hits.
"""

from __future__ import annotations

import json
import os
import signal
import sys

from .config import DEFAULTS, InvalidInput, Settings, load_settings, make_matcher
from .matcher import _name, _split, _tokens, _unwrap
from .mcptools import snapshot_before

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any

EDIT_TOOLS = ("Write", "Edit", "NotebookEdit")


def project_root_for(cwd: str) -> Path:
    """The project: ``$CLAUDE_PROJECT_DIR`` if it holds ``cwd``, else the git root, else ``cwd``."""
    from pathlib import Path

    return Path(project_root(cwd))


def project_root(cwd: str) -> str:
    """:func:`project_root_for` as a string, with os.path alone (the hook's entry point imports no pathlib)."""
    here = os.path.realpath(cwd)
    env = os.environ.get("CLAUDE_PROJECT_DIR")
    if env:
        proj = os.path.realpath(env)
        if here == proj or here.startswith(proj.rstrip(os.sep) + os.sep):
            return proj
    d = here
    while True:
        if os.path.exists(os.path.join(d, ".git")):
            return d
        parent = os.path.dirname(d)
        if parent == d:
            return here
        d = parent


def is_agentsnap_snapshot(command: str) -> bool:
    """True when one of the simple commands is ``agentsnap [-C DIR] snapshot ...``."""
    try:
        commands = list(_split(_tokens(command.strip())))
    except ValueError:
        return False
    for cmd in commands:
        words, _ = _unwrap(cmd)
        if not words or _name(words[0]) != "agentsnap":
            continue
        rest = words[1:]
        while rest[:1] == ["-C"]:
            rest = rest[2:]
        if rest[:1] == ["snapshot"]:
            return True
    return False


def needs_helper(payload: dict[str, Any], settings: Settings) -> bool:
    """False when the hook has nothing to do for this call (the common, cheap case)."""
    event = payload.get("hook_event_name")
    if event in ("UserPromptSubmit", "Stop"):
        return settings["turn_snapshots"] in (event, "both")
    if event != "PreToolUse":
        return False
    tool = payload.get("tool_name")
    tool_input = payload.get("tool_input") if isinstance(payload.get("tool_input"), dict) else {}
    cwd = str(payload.get("cwd") or os.getcwd())
    if tool == "Bash":
        command = str(tool_input.get("command") or "")
        return is_agentsnap_snapshot(command) or bool(make_matcher(settings, cwd).findings(command))
    if tool in EDIT_TOOLS and settings["snapshot_on_edit"]:
        target = tool_input.get("file_path") or tool_input.get("notebook_path")
        return isinstance(target, str) and os.path.isfile(os.path.join(cwd, target))  # a new file: nothing to lose
    return snapshot_before(tool, settings)  # an MCP call: what the server does is unknown, judged by the tool's name


def _alarm(signum: int, frame: object) -> None:
    raise TimeoutError("the snapshot did not finish within snapshot_timeout")


def respond(text: str, event: str | None) -> tuple[int, str, str]:
    """Exit status, stdout and stderr of the hook for ``text`` (Claude Code's JSON); the helper process answers the same."""
    settings: Settings = DEFAULTS
    try:
        payload = json.loads(text) if text.strip() else {}
        if isinstance(payload, dict):
            payload.setdefault("hook_event_name", event)
            settings = load_settings(project_root(str(payload.get("cwd") or os.getcwd())))
            if not needs_helper(payload, settings):
                return 0, "", ""
    except (ValueError, InvalidInput, OSError):
        pass  # the full hook reports bad input and bad settings
    if hasattr(signal, "SIGALRM"):
        signal.signal(signal.SIGALRM, _alarm)
        signal.alarm(int(settings["snapshot_timeout"]))
    try:
        from .hooks import run_hook

        result = run_hook(text, event)
    finally:
        if hasattr(signal, "SIGALRM"):
            signal.alarm(0)
    return result.exit_code, result.stdout, result.stderr


def main(argv: list[str] | None = None, *, start_helper: bool = False) -> int:
    """``agentsnap-claude-code-hook EVENT`` with Claude Code's JSON on stdin; always exit status 0.

    ``start_helper``: the quick script found no warm helper process (:mod:`.daemon`); start one for the next calls.
    """
    args = sys.argv[1:] if argv is None else argv
    text = sys.stdin.read()
    code, out, err = respond(text, args[0] if args else None)
    if out:
        print(out)
    if err:
        print(err, file=sys.stderr)
    if start_helper:
        sys.stdout.flush()
        from .daemon import spawn

        spawn()
    return code


if __name__ == "__main__":
    sys.exit(main())
