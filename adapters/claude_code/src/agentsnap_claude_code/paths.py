"""Where Claude Code keeps its files (standard library only: the hook's entry point needs it, without pathlib)."""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path


def config_dir() -> str:
    """``$CLAUDE_CONFIG_DIR`` or ``~/.claude``, as a string (the hook's entry point imports no pathlib)."""
    env = os.environ.get("CLAUDE_CONFIG_DIR")
    return os.path.expanduser(env) if env else os.path.join(os.path.expanduser("~"), ".claude")


def claude_config_dir() -> Path:
    """``$CLAUDE_CONFIG_DIR`` or ``~/.claude``."""
    from pathlib import Path

    return Path(config_dir())
