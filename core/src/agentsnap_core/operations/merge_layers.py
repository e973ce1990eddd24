"""Three-way merge of the non-world layers: trace, state (mappings), cache, model.

Each merger takes ``(base, ours, theirs, context)`` payloads (``None`` = the snapshot has no such
layer) and returns a :class:`agentsnap_core.operations.merge.LayerMerge`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from agentsnap_core.errors import InvalidInput
from agentsnap_core.layers import effects, effects_ledger
from agentsnap_core.plugins.hookspecs import HookContext

if TYPE_CHECKING:
    pass

#: a missing key in a mapping merge
MISSING: Any = type("Missing", (), {"__repr__": lambda self: "<missing>"})()


class Summarizer(Protocol):
    """Folds a branch's trace tail into one note message."""

    def __call__(self, messages: list[dict[str, Any]], context: HookContext) -> dict[str, Any]: ...


# ------------------------------------------------------------------ mappings (state and generic layers)
def merge_values(base: Any, ours: Any, theirs: Any, take: str | None = None, path: tuple[Any, ...] = ()) -> tuple[Any, list[dict[str, Any]]]:
    """Key-wise three-way merge; return ``(merged, conflicts)``.

    One side changed: take it; both changed equally: take it; both changed differently: recurse
    when all are mappings, else a conflict at that key path (the merged value holds ours, or
    ``take``'s side when given). ``MISSING`` marks an absent key.
    """
    if _eq(ours, theirs):
        return ours, []
    if _eq(ours, base):
        return theirs, []
    if _eq(theirs, base):
        return ours, []
    if isinstance(ours, dict) and isinstance(theirs, dict) and (isinstance(base, dict) or base is MISSING or base is None):
        b = base if isinstance(base, dict) else {}
        out: dict[Any, Any] = {}
        conflicts: list[dict[str, Any]] = []
        for key in _ordered_keys(b, ours, theirs):
            value, sub = merge_values(b.get(key, MISSING), ours.get(key, MISSING), theirs.get(key, MISSING), take, (*path, key))
            conflicts += sub
            if value is not MISSING:
                out[key] = value
        return out, conflicts
    conflict = {
        "kind": "value" if ours is not MISSING and theirs is not MISSING else "modify/delete",
        "path": ".".join(str(p) for p in path) or "(whole layer)",
        "key": list(path),
        "base": None if base is MISSING else base,
        "ours": None if ours is MISSING else ours,
        "theirs": None if theirs is MISSING else theirs,
    }
    if take:
        conflict["resolved"] = take
    return (theirs if take == "theirs" else ours), [conflict]


def _eq(a: Any, b: Any) -> bool:
    if a is MISSING or b is MISSING:
        return a is b
    return bool(a == b)


def _ordered_keys(*maps: dict[Any, Any]) -> list[Any]:
    seen: dict[Any, None] = {}
    for m in maps[1:] + maps[:1]:
        for k in m:
            seen.setdefault(k, None)
    return list(seen)


def merge_mapping_layer(layer: str, base: Any, ours: Any, theirs: Any, context: HookContext) -> Any:
    """The default merger of ``state`` and of any layer without a registered merger."""
    from agentsnap_core.operations.merge import LayerMerge

    take = _take(context)
    b = MISSING if base is None else base
    o = MISSING if ours is None else ours
    t = MISSING if theirs is None else theirs
    value, conflicts = merge_values(b, o, t, take)
    for c in conflicts:
        c["layer"] = layer
        c.setdefault("message", f"{layer} key {c['path']} changed differently on both sides")
    unresolved = [c for c in conflicts if "resolved" not in c]
    notes = [f"{layer}: {len(conflicts)} conflict(s) resolved to {take}"] if take and conflicts else []
    return LayerMerge(None if value is MISSING else value, unresolved, notes, resolved=[c for c in conflicts if "resolved" in c])


def merge_state(base: Any, ours: Any, theirs: Any, context: HookContext) -> Any:
    """``state``: the first adapter implementing ``agentsnap_merge_state`` wins, else key-wise."""
    from agentsnap_core.operations.merge import LayerMerge

    pm = context.get("pm")
    if pm is not None:
        got = pm.hook.agentsnap_merge_state(base=base, ours=ours, theirs=theirs, context=context)
        if got is not None:
            value, conflicts = got
            conflicts = [{"layer": "state", "kind": "value", "message": "state conflict (adapter)", **c} for c in conflicts or []]
            return LayerMerge(value, conflicts, ["state: merged by an adapter (agentsnap_merge_state)"])
    from agentsnap_core.format.snapshottable import shares_objects

    if not (_eq(ours, theirs) or _eq(ours, base) or _eq(theirs, base)) and (shares_objects(ours) or shares_objects(theirs)):
        # a typed state's second references are numbered in the order its side wrote them: taken key by key from two
        # sides, a reference can end up naming another object of the merged state (a list where the memory was)
        take = _take(context)
        conflict = {"layer": "state", "kind": "value", "path": "(whole layer)", "key": [], "base": base, "ours": ours,
                    "theirs": theirs, "message": "state: both sides changed an agent whose state shares objects between "
                    "places (one object held by two attributes, or a cycle); merged key by key the shared references "
                    "could name the wrong objects, so the state is taken whole from one side: choose it with --strategy "
                    "ours or theirs ('merge --continue' keeps ours)"}
        if take:
            return LayerMerge(theirs if take == "theirs" else ours, [], [f"state: taken whole from {take} (it shares objects)"],
                              resolved=[{**conflict, "resolved": take}])
        return LayerMerge(ours, [conflict], [])
    return merge_mapping_layer("state", base, ours, theirs, context)


def _take(context: HookContext) -> str | None:
    s = context.get("strategy", "auto")
    return None if s == "auto" else s


# ------------------------------------------------------------------ cache
def merge_cache(base: Any, ours: Any, theirs: Any, context: HookContext) -> Any:
    """``cache`` is never merged: the target (ours) is kept; theirs stays reachable from its snapshot."""
    from agentsnap_core.operations.merge import LayerMerge

    note = "cache: not merged - kept the target branch's KV cache"
    if theirs is not None and theirs != ours:
        note += f"; theirs stays in snapshot {str(context.get('theirs', ''))[:12]}"
    return LayerMerge(ours, [], [note])


# ------------------------------------------------------------------ model
def merge_model(base: Any, ours: Any, theirs: Any, context: HookContext) -> Any:
    """``model``: TIES (default) or DARE on task vectors against the ancestor (needs ``agentsnap-core[model]``)."""
    from agentsnap_core.operations.merge import LayerMerge

    if _eq(ours, theirs) or _eq(theirs, base):
        return LayerMerge(ours)
    if _eq(ours, base):
        return LayerMerge(theirs)
    take = _take(context)
    if take:
        return LayerMerge(ours if take == "ours" else theirs, [], [f"model: both changed, took {take} (strategy)"])
    conflict = {"layer": "model", "kind": "value", "path": "(whole layer)"}
    if base is None:
        return LayerMerge(ours, [{**conflict, "message": "both sides added model weights and there is no ancestor to "
                                  "compute task vectors from; kept ours"}])
    try:
        from agentsnap_core.operations import modelmerge
    except ImportError:
        return LayerMerge(ours, [{**conflict, "message": "merging model weights needs numpy and safetensors: "
                                  "pip install 'agentsnap-core[model]' (kept ours)"}])
    options = {{"lambda": "lambda_"}.get(k, k): v for k, v in (context.get("model") or {}).items()}
    value = modelmerge.merge_model_payloads(base, [ours, theirs], **options)
    method = options.get("method", "ties")
    return LayerMerge(value, [], [f"model: merged task vectors with {method} against the ancestor"])


# ------------------------------------------------------------------ trace
MARK_ROLE = "system"


def merge_trace(
    base: list[dict[str, Any]] | None,
    ours: list[dict[str, Any]] | None,
    theirs: list[dict[str, Any]] | None,
    context: HookContext,
) -> Any:
    """Common prefix + our tail + their tail (as a marked block, or folded into one note)."""
    from agentsnap_core.operations.merge import LayerMerge

    o, t = list(ours or []), list(theirs or [])
    k = 0
    while k < len(o) and k < len(t) and o[k] == t[k]:
        k += 1
    tail_o, tail_t = o[k:], t[k:]
    if not tail_t:
        return LayerMerge(o)
    if not tail_o:
        return LayerMerge(t, [], [f"trace: took their {len(tail_t)} new message(s) (ours had none)"])
    ids_o = {m.get("id") for m in tail_o if m.get("id")}
    tail_t = [m for m in tail_t if not (m.get("id") in ids_o and m in tail_o)]
    if not tail_t:
        return LayerMerge(o)
    label = str(context.get("theirs_label") or "theirs")
    theirs_id = str(context.get("theirs") or "")
    summarizer = context.get("summarizer")
    if summarizer:
        note = summarize(tail_t, summarizer, context)
        return LayerMerge(o + [note], [], [f"trace: folded their {len(tail_t)} message(s) into one note"])
    begin = {
        "id": f"merge-{theirs_id[:12]}-begin",
        "role": MARK_ROLE,
        "content": f"[agentsnap merge] begin: {len(tail_t)} message(s) from branch {label} ({theirs_id[:12]})",
        "agentsnap_merge": {"block": "begin", "from": theirs_id, "branch": label, "count": len(tail_t)},
    }
    end = {
        "id": f"merge-{theirs_id[:12]}-end",
        "role": MARK_ROLE,
        "content": f"[agentsnap merge] end of messages from branch {label}",
        "agentsnap_merge": {"block": "end", "from": theirs_id, "branch": label},
    }
    return LayerMerge(o + [begin, *tail_t, end], [], [f"trace: appended their {len(tail_t)} message(s) as a marked block"])


def summarize(messages: list[dict[str, Any]], summarizer: Any, context: HookContext) -> dict[str, Any]:
    """Run ``summarizer`` (a callable, or ``True`` = the hook, else the deterministic default)."""
    note: Any = None
    if callable(summarizer):
        note = summarizer(messages, context)
    else:
        pm = context.get("pm")
        if pm is not None:
            note = pm.hook.agentsnap_summarize_branch(messages=messages, context=context)
        if note is None:
            note = default_summary(messages, context)
    if not isinstance(note, dict) or not isinstance(note.get("content"), str) or not note.get("role"):
        raise InvalidInput("a branch summarizer must return a message dict with 'role' and a string 'content'")
    theirs_id = str(context.get("theirs") or "")
    note.setdefault("id", f"merge-{theirs_id[:12]}-summary")
    note.setdefault("agentsnap_merge", {"summary_of": len(messages), "from": theirs_id})
    return note


def _text(m: dict[str, Any]) -> str:
    c = m.get("content")
    return c if isinstance(c, str) else json.dumps(c, default=str, sort_keys=True)


def default_summary(messages: list[dict[str, Any]], context: HookContext) -> dict[str, Any]:
    """A deterministic note: counts by role, tools called, and the last assistant answer."""
    label = str(context.get("theirs_label") or "theirs")
    roles: dict[str, int] = {}
    tools: list[str] = []
    for m in messages:
        roles[str(m.get("role"))] = roles.get(str(m.get("role")), 0) + 1
        for call in m.get("tool_calls") or []:
            name = call.get("name") or (call.get("function") or {}).get("name") if isinstance(call, dict) else None
            if name and name not in tools:
                tools.append(str(name))
    counts = ", ".join(f"{n} {r}" for r, n in sorted(roles.items()))
    last = next((_text(m) for m in reversed(messages) if m.get("role") == "assistant"), "")
    lines = [f"What branch {label} learned ({len(messages)} messages: {counts})."]
    if tools:
        lines.append("Tools used: " + ", ".join(tools) + ".")
    if last:
        lines.append("Its last answer: " + (last if len(last) <= 500 else last[:497] + "..."))
    return {"role": MARK_ROLE, "content": "\n".join(lines),
            "agentsnap_merge": {"summary_of": len(messages), "from": str(context.get("theirs") or ""), "summarizer": "default"}}


class LLMSummarizer:
    """A summarizer backed by any text-in/text-out callable (an LLM client, a fake in tests).

    Example:
        ``repo.merge("attempt-7", summarizer=LLMSummarizer(lambda prompt: client.complete(prompt)))``
    """

    PROMPT = (
        "Another attempt (branch {label}) of the same agent ran the conversation below after the point where the "
        "two attempts split. In at most {words} words, say what it learned that this attempt should know: facts "
        "found, results of tool calls, dead ends. Answer with the note only.\n\n{transcript}"
    )

    def __init__(self, llm: Callable[[str], str], *, max_chars: int = 12_000, words: int = 120) -> None:
        self.llm, self.max_chars, self.words = llm, max_chars, words

    def prompt(self, messages: list[dict[str, Any]], context: HookContext) -> str:
        lines = [f"[{m.get('role')}] {_text(m)}" for m in messages]
        transcript = "\n".join(lines)
        if len(transcript) > self.max_chars:  # keep the end: the latest findings matter most
            transcript = "...\n" + transcript[-self.max_chars :]
        return self.PROMPT.format(label=context.get("theirs_label") or "theirs", words=self.words, transcript=transcript)

    def __call__(self, messages: list[dict[str, Any]], context: HookContext) -> dict[str, Any]:
        answer = self.llm(self.prompt(messages, context))
        if not isinstance(answer, str) or not answer.strip():
            raise InvalidInput("the summarizer LLM returned no text; merge without a summarizer or retry")
        label = context.get("theirs_label") or "theirs"
        return {"role": MARK_ROLE, "content": f"What branch {label} learned: {answer.strip()}",
                "agentsnap_merge": {"summary_of": len(messages), "from": str(context.get("theirs") or ""), "summarizer": "llm"}}


def merge_effects(base: Any, ours: Any, theirs: Any, context: HookContext) -> Any:
    """The ``effects`` layer merger for :mod:`agentsnap_core.operations.merge` (union by idempotency key).

    The ledger is one chain shared by every branch, so the union needs no data merge: this plans and
    reports. When the merge is recorded, :func:`agentsnap_core.layers.effects.on_merge` runs their deferred effects exactly once; the
    merge snapshot binds the ledger as it is then, so its chain verifies. Notes flag an irreversible
    effect performed on both branches and effects that cannot run because their tool is not loaded.
    An adapter's own effects payload is merged key-wise (the core's default).
    """
    from agentsnap_core.operations.merge import LayerMerge

    repo = context["repo"]
    assert repo is not None  # a merge always runs on a repository
    led = effects_ledger.Ledger.for_repo(repo).sync()
    core = [p for p in (ours, theirs) if isinstance(p, dict) and p.get("format") == "agentsnap-effects"]
    if len(core) == len([p for p in (ours, theirs) if p is not None]):
        result = LayerMerge(value=ours if ours is not None else theirs)
    else:
        result = merge_mapping_layer("effects", base, ours, theirs, context)
    target = (effects.lineages_at(repo, led, context["ours"]) or ["main"])[0] if context.get("ours") else "main"
    for src in effects.lineages_at(repo, led, context["theirs"]) if context.get("theirs") else []:
        if src == target:
            continue
        waiting = [d for d in led.deferred.values() if d.lineage == src and d.status == "deferred"]
        if waiting:
            tools = effects.tool_names()
            missing = sorted({str(d.entry.get("tool")) for d in waiting if str(d.entry.get("tool")) not in tools})
            result.notes.append(f"effects: {len(waiting)} deferred effect(s) of {src} run for real when this merge is recorded")
            if missing:
                result.notes.append(f"effects: tools not loaded here ({', '.join(missing)}): they stay deferred; run "
                                    f"'agentsnap effects apply {src.split('@')[0]} --import MODULE'")
        for mine, their in effects.ran_on_both(led, target, src):
            result.notes.append(f"effects: irreversible effect ran on both branches: {mine} and {their}")
    return result
