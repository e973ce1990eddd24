"""Where Claude Code keeps its files (standard library only: the hook's entry point needs it)."""

from __future__ import annotations

import os
from pathlib import Path


def claude_config_dir() -> Path:
    """``$CLAUDE_CONFIG_DIR`` or ``~/.claude``."""
    env = os.environ.get("CLAUDE_CONFIG_DIR")
    return Path(env).expanduser() if env else Path.home() / ".claude"
