"""Which MCP tool calls may change the project's files, judged by the tool's name (stdlib only: the gate imports it).

Claude Code names an MCP server's tools ``mcp__<server>__<tool>`` (``mcp__filesystem__write_file``). The hook cannot
know what a server does with a call, so it goes by the tool's own name, conservatively: a call is read-only when the
name's first word is a reading verb (``read_file``, ``list_directory``, ``get_file_info``, ``searchFiles``) and no
word of it is a writing one (``get_or_create``, ``read_and_update``); every other MCP call - ``write_file``,
``edit_file``, ``move_file``, ``directory_tree`` (no verb), a tool of any name the rule does not know - is taken to
change files and gets a snapshot before it. The ``mcp_read_only`` setting (globs over the whole name, e.g.
``mcp__github__*``) declares more tools read-only.

The quick script (``plugin/hooks/agentsnap_quick.py``) passes every MCP call on to the gate: this module is the one
judge.
"""

from __future__ import annotations

import fnmatch
import re

TYPE_CHECKING = False  # (the hook's start imports no typing: see gate.py)
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

PREFIX = "mcp__"

#: first words of tools that only read
READ_VERBS = frozenset(
    "read get list search find view show describe stat info query fetch count lookup inspect browse cat head tail ls"
    " grep glob diff check validate status explain preview ping whoami echo resolve analyze summarize".split()
)
#: words that say a tool writes, whatever word comes first
WRITE_WORDS = frozenset(
    "write edit create delete remove move rename update set put save patch apply replace insert append upload copy"
    " mkdir rm touch exec execute run install commit push reset clean format fix modify change add drop truncate"
    " overwrite generate download extract import sync merge revert checkout restore"
    # (a reading first word with one of these still destroys: read_then_clear, search_and_destroy, list_and_prune)
    " clear purge destroy prune erase wipe unlink rmdir discard empty flush rewrite refactor convert transform"
    " substitute strip trim cleanup squash rebase amend stash upsert store persist compress decompress unzip zip"
    " archive encrypt decrypt rollback undo redo".split()
)


def is_mcp(tool: object) -> bool:
    """Whether ``tool`` names an MCP tool (``mcp__server__tool``)."""
    return isinstance(tool, str) and tool.startswith(PREFIX) and len(tool) > len(PREFIX)


def words(tool: str) -> list[str]:
    """The lower-case words of the tool part of ``mcp__server__tool`` (snake, kebab, dotted or camel case)."""
    name = tool[len(PREFIX):].split("__", 1)[-1] if tool.startswith(PREFIX) else tool
    spaced = re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", " ", name)
    return [w for w in re.split(r"[^A-Za-z0-9]+", spaced.lower()) if w]


def may_change_files(tool: str, read_only: list[str] | tuple[str, ...] = ()) -> bool:
    """True unless ``tool`` is read-only by its name or a ``read_only`` glob (``mcp_read_only``) matches it."""
    if any(fnmatch.fnmatchcase(tool, pattern) for pattern in read_only):
        return False
    ws = words(tool)
    return not (ws and ws[0] in READ_VERBS and not any(w in WRITE_WORDS for w in ws))


def snapshot_before(tool: object, settings: Mapping[str, Any]) -> bool:
    """Whether the hook snapshots before a call of ``tool`` under ``settings`` (``snapshot_on_mcp``,
    ``mcp_read_only``): the one test the gate and the hook both ask."""
    return is_mcp(tool) and bool(settings["snapshot_on_mcp"]) and may_change_files(str(tool), settings["mcp_read_only"])


def target_of(tool_input: dict[str, object]) -> str:
    """What the call acts on, for the snapshot's label: its path argument if it has one, else its input in short."""
    for key in ("path", "file_path", "filePath", "filename", "source", "destination", "target", "paths"):
        value = tool_input.get(key)
        if isinstance(value, str) and value:
            return value
        if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
            return ", ".join(value)
    import json

    return json.dumps(tool_input, ensure_ascii=False, sort_keys=True, default=str)[:200]
