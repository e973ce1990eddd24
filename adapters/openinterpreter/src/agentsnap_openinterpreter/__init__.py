"""agentsnap for Open Interpreter: snapshot and restore a live interpreter session.

``attach(interpreter, repo)`` records every code cell the computer runs (guarding irreversible ones
with the effects ledger) and adds ``interpreter.snapshot(name)`` / ``interpreter.checkout(name)``;
:func:`snapshot` / :func:`restore` are the same as functions.
"""

from __future__ import annotations

from ._api import RestoreReport, attach, restore, snapshot
from ._classify import CommandClassifier, Verdict
from ._session import Session, session_of
from .offline import ScriptedModel, use_offline_model

__all__ = [
    "CommandClassifier",
    "RestoreReport",
    "ScriptedModel",
    "Session",
    "Verdict",
    "attach",
    "restore",
    "session_of",
    "snapshot",
    "use_offline_model",
]
