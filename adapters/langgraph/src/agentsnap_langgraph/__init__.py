"""agentsnap for LangGraph: ``PFSaver``, a checkpointer whose checkpoints are agentsnap snapshots."""

from __future__ import annotations

from .plugin import LangGraphThread
from .saver import PFSaver, thread_ref

__all__ = ["LangGraphThread", "PFSaver", "thread_ref"]
