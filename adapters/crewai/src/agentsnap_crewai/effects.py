"""CrewAI tools guarded by the agentsnap effects ledger (exactly-once across restore and fork).

``guard_tool(send_email)`` returns a copy of a CrewAI tool whose calls go through
:func:`agentsnap_core.layers.effects.effect`: run inside ``with agentsnap_core.layers.effects.Effects(repo):``, an
irreversible call is recorded before and after it runs, and a restored or forked crew that makes
the same call gets the recorded result instead of a second email.
"""

from __future__ import annotations

from typing import Any

from agentsnap_core.layers.effects import IRREVERSIBLE, Effects, effect


def guard_tool(
    tool: Any,
    *,
    kind: str = IRREVERSIBLE,
    simulate: Any = None,
    key: Any = None,
    session: Effects | None = None,
) -> Any:
    """A copy of CrewAI ``tool`` (a ``@tool`` function tool or any ``BaseTool``) guarded by the ledger.

    Args:
        kind: ``pure`` / ``idempotent`` / ``irreversible`` (only irreversible calls are guarded by default).
        simulate: what a deferred call returns in a fork (see :mod:`agentsnap_core.layers.effects`).
        key: an idempotency key, or a function of the call's arguments.
        session: a fixed :class:`Effects`; default: the one active when the tool runs.
    """
    options: dict[str, Any] = {"name": tool.name, "kind": kind, "simulate": simulate, "key": key, "session": session}
    func = getattr(tool, "func", None)
    if callable(func):  # crewai.tools.base_tool.Tool calls .func directly
        return tool.model_copy(update={"func": effect(func, **options)})
    guarded = tool.model_copy()
    object.__setattr__(guarded, "_run", effect(tool._run, **options))
    return guarded


def guard_tools(tools: list[Any], **options: Any) -> list[Any]:
    """:func:`guard_tool` on each tool."""
    return [guard_tool(t, **options) for t in tools]
