"""agentsnap hook implementations for Claude Code sessions (entry point ``claude_code``)."""

from __future__ import annotations

from typing import Any

from agentsnap_core import hookimpl

from .session import ClaudeSession

NAME = "claude_code"


@hookimpl
def agentsnap_handles(obj: Any) -> str | None:
    return NAME if isinstance(obj, ClaudeSession) else None


@hookimpl
def agentsnap_capture_trace(obj: Any, context: dict[str, Any]) -> list[dict[str, Any]] | None:
    if not isinstance(obj, ClaudeSession):
        return None
    return obj.transcript().entries


@hookimpl
def agentsnap_restore_trace(obj: Any, messages: list[dict[str, Any]], context: dict[str, Any]) -> bool | None:
    if not isinstance(obj, ClaudeSession):
        return None
    obj.restore_entries(messages)
    return True
