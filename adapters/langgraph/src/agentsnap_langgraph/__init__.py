"""agentsnap for LangGraph: ``PFSaver``, a checkpointer whose checkpoints are agentsnap snapshots."""

from __future__ import annotations

from .saver import PFSaver, thread_ref

__all__ = ["PFSaver", "thread_ref"]
