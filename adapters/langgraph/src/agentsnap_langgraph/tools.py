"""Guarding LangChain / LangGraph tools with agentsnap's effects ledger.

``guard_tools(ToolNode([...]), fx, names={"send_email"})`` makes each chosen tool record its call in
the ledger before it runs, so a graph restored or forked from a checkpoint taken mid tool loop gets
the recorded result back instead of sending a second email (see :mod:`agentsnap_core.effects`).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import Any

from agentsnap_core.errors import InvalidInput


def guard_tools(
    tools: Any,
    session: Any = None,
    *,
    names: Collection[str] | None = None,
    kind: str | None = None,
    **options: Any,
) -> Any:
    """Guard tools in place and return ``tools``.

    Args:
        tools: a ``ToolNode``, a LangChain tool, or a list of tools.
        session: the :class:`agentsnap_core.effects.Effects` to record in (default: the active one).
        names: only these tool names (default: every tool).
        kind: ``pure`` / ``idempotent`` / ``irreversible`` (default irreversible: guarded).
        options: passed to :func:`agentsnap_core.effects.effect` (``simulate=``, ``key=``, ...).

    A tool built from a function (``@tool``, ``StructuredTool.from_function``) has its ``func`` /
    ``coroutine`` guarded - not ``_run`` too, which would guard one call twice; other tool classes go
    through :func:`agentsnap_core.effects.wrap_tool`.
    """
    from agentsnap_core.effects import IRREVERSIBLE, effect, wrap_tool

    by_name = getattr(tools, "tools_by_name", None)
    items: Iterable[Any] = by_name.values() if isinstance(by_name, dict) else tools if isinstance(tools, list) else [tools]
    wanted = set(names) if names is not None else None
    found: set[str] = set()
    for tool in items:
        name = str(getattr(tool, "name", "") or type(tool).__name__)
        if wanted is not None and name not in wanted:
            continue
        found.add(name)
        entry = [a for a in ("func", "coroutine") if callable(getattr(tool, a, None))]
        if not entry:
            wrap_tool(tool, session, kind=kind or IRREVERSIBLE, name=name, **options)
            continue
        for attr in entry:
            fn = getattr(tool, attr)
            if not hasattr(fn, "__agentsnap_effect__"):
                setattr(tool, attr, effect(fn, name=name, kind=kind or IRREVERSIBLE, session=session, **options))
    if wanted is not None and wanted - found:
        raise InvalidInput(f"no tool named {', '.join(sorted(wanted - found))} to guard")
    return tools
