"""agentsnap for LangGraph: ``PFSaver``, a checkpointer whose checkpoints are agentsnap snapshots."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentsnap_core.plugins import lazy_exports

from .plugin import LangGraphThread

if TYPE_CHECKING:
    from .saver import FlushFailed, PFSaver, SaverClosed, StoreGone, thread_ref
    from .tools import guard_tools

# This package is imported with its plugin by every process that uses agentsnap (the CLI's too): LangGraph and
# LangChain (~0.2-0.4 s of imports) load when one of these names is first used, not before.
__getattr__ = lazy_exports(__name__, {
    **dict.fromkeys(("FlushFailed", "PFSaver", "SaverClosed", "StoreGone", "thread_ref"), "saver"),
    "guard_tools": "tools",
})

__all__ = ["FlushFailed", "LangGraphThread", "PFSaver", "SaverClosed", "StoreGone", "guard_tools", "thread_ref"]
