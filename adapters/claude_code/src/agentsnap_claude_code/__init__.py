"""agentsnap for Claude Code: a plugin (slash commands + hooks) and the helper that runs its hooks.

Importing this package imports nothing heavy: the hook's entry script (:mod:`.gate`) must decide
about a harmless tool call with the standard library alone.
"""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["ClaudeSession", "Matcher", "encode_project_dir", "is_destructive", "read_transcript", "write_forked_session", "__version__"]

_LAZY = {
    "ClaudeSession": "session",
    "Matcher": "matcher",
    "is_destructive": "matcher",
    "encode_project_dir": "transcript",
    "read_transcript": "transcript",
    "write_forked_session": "transcript",
}


def __getattr__(name: str) -> object:
    if name in _LAZY:
        from importlib import import_module

        return getattr(import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(name)
