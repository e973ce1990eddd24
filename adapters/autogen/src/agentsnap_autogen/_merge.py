"""Merging two AutoGen snapshots (the ``agentsnap_merge_state`` hook of ``agentsnap merge``).

A team's state is one conversation in flight, so it is not merged key by key: ours stays the
execution state, and what their branch added after the common ancestor is folded into ONE note
that is appended to the manager's thread and to every participant's buffer - the next speaker reads
it. The note is written by ``merge(..., summarizer=fn)`` when given, else by an
``agentsnap_summarize_branch`` plugin, else by :func:`findings_note`: what each agent of the other
branch said, in order (long messages shortened), so the winner learns what the other branch found.
Different component configs on both sides are a conflict (ours is kept until resolved).
"""

from __future__ import annotations

import copy
from typing import Any

from agentsnap_core.operations.merge_layers import MARK_ROLE, merge_values, summarize

from ._format import is_payload as _is_payload
from ._team import trace_of

NOTE_SOURCE = "agentsnap_merge"
#: a message longer than this is shortened in the default note; the note holds at most NOTE_LIMIT characters
MESSAGE_LIMIT, NOTE_LIMIT = 600, 6000


def findings_note(messages: list[dict[str, Any]], context: dict[str, Any]) -> dict[str, Any]:
    """The default merge note: every message of the other branch's tail as ``- speaker: text``, in order.

    A message over :data:`MESSAGE_LIMIT` characters is cut; past :data:`NOTE_LIMIT` the middle of the
    tail is left out and the note says how many messages were.
    """
    label = str(context.get("theirs_label") or context.get("theirs") or "theirs")
    lines = []
    for m in messages:
        text = m.get("content")
        text = text if isinstance(text, str) else repr(text)
        text = " ".join(text.split())
        lines.append(f"- {m.get('name') or m.get('role')}: {text if len(text) <= MESSAGE_LIMIT else text[:MESSAGE_LIMIT - 3] + '...'}")
    while sum(len(line) + 1 for line in lines) > NOTE_LIMIT and len(lines) > 2:
        lines.pop(len(lines) // 2)
    left_out = len(messages) - len(lines)
    if left_out:
        lines.insert(len(lines) // 2, f"- ({left_out} messages in between left out)")
    head = f"What branch {label} found ({len(messages)} messages since the fork):"
    return {"role": MARK_ROLE, "content": "\n".join([head, *lines]),
            "agentsnap_merge": {"summary_of": len(messages), "from": str(context.get("theirs") or ""),
                                "summarizer": "agentsnap_autogen.findings_note"}}


def _note(messages: list[dict[str, Any]], context: dict[str, Any]) -> dict[str, Any]:
    pm = context.get("pm")
    hooked = pm.hook.agentsnap_summarize_branch(messages=messages, context=context) if pm is not None else None
    return hooked if hooked is not None else findings_note(messages, context)


def _without_clients(config: Any) -> Any:
    if isinstance(config, dict):
        return {k: "(re-supplied)" if k == "model_client" else _without_clients(v) for k, v in config.items()}
    if isinstance(config, list):
        return [_without_clients(v) for v in config]
    return config


def merge_payloads(base: Any, ours: dict[str, Any], theirs: dict[str, Any], context: dict[str, Any]) -> tuple[Any, list[dict[str, Any]]]:
    """Return ``(merged payload, conflicts)``."""
    conflicts: list[dict[str, Any]] = []
    if ours["kind"] != theirs["kind"]:
        return ours, [{"path": "kind", "message": f"cannot merge an AutoGen {theirs['kind']} into a {ours['kind']}"}]
    # model clients are re-supplied on restore, so their configs (e.g. a replay script) do not conflict
    base_config = _without_clients(base.get("config")) if _is_payload(base) else None
    ours_config, theirs_config = _without_clients(ours["config"]), _without_clients(theirs["config"])
    config_merged, config_conflicts = merge_values(base_config, ours_config, theirs_config)
    for c in config_conflicts:
        conflicts.append({"path": f"config.{c['path']}", "message": "the team's component config changed on both sides"})
    config = ours["config"] if config_merged == ours_config else theirs["config"]
    seen = {m["id"] for m in trace_of(ours["kind"], base["state"])} if _is_payload(base) else set()
    seen |= {m["id"] for m in trace_of(ours["kind"], ours["state"])}
    tail = [m for m in trace_of(theirs["kind"], theirs["state"]) if m["id"] not in seen]
    merged = copy.deepcopy(ours)
    merged["config"] = config
    if not tail:
        return merged, conflicts
    summarizer = context.get("summarizer")
    note = summarize(tail, summarizer if callable(summarizer) else _note, context)
    text = str(note["content"])
    if merged["kind"] == "team":
        message = {"type": "TextMessage", "source": NOTE_SOURCE, "content": text, "metadata": {}}
        for agent_state in merged["state"].get("agent_states", {}).values():
            if "message_thread" in agent_state:
                agent_state["message_thread"].append({**message, "id": str(note["id"])})
            elif "message_buffer" in agent_state:
                agent_state["message_buffer"].append(dict(message))
    else:
        context_messages = merged["state"].setdefault("llm_context", {}).setdefault("messages", [])
        context_messages.append({"type": "UserMessage", "source": NOTE_SOURCE, "content": text})
    return merged, conflicts
