"""agentsnap for Claude Code: a plugin (slash commands + hooks) and the helper that runs its hooks."""

from __future__ import annotations

from .matcher import Matcher, is_destructive
from .session import ClaudeSession
from .transcript import encode_project_dir, read_transcript, write_forked_session

__version__ = "0.1.0"

__all__ = ["ClaudeSession", "Matcher", "encode_project_dir", "is_destructive", "read_transcript", "write_forked_session", "__version__"]
