"""agentsnap for LangGraph: ``PFSaver``, a checkpointer whose checkpoints are agentsnap snapshots."""

from __future__ import annotations

from .plugin import LangGraphThread
from .saver import FlushFailed, PFSaver, thread_ref
from .tools import guard_tools

__all__ = ["FlushFailed", "LangGraphThread", "PFSaver", "guard_tools", "thread_ref"]
