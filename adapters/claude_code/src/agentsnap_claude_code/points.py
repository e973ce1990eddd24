"""Rewind points: "before the last destructive tool call", "before tool call N", "before prompt N".

Every hook snapshot records where in the session it was taken: the session id, the number of
user prompts so far (``prompt``) and, before a tool call, that call's number in the session
(``call``, counting every tool call in the transcript, snapshotted or not). A Stop snapshot
closes prompt N, so it is the state "before prompt N+1".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agentsnap_core import Repo, Snapshot
from agentsnap_core.errors import AgentSnapError, InvalidInput

#: user lines Claude Code writes that the user did not type: a local command's output, a `!` command's output, an
#: interruption notice (a slash command's expanded text and the local-command caveat are marked ``isMeta``)
_NOT_TYPED = ("<local-command-stdout>", "<local-command-stderr>", "<local-command-caveat>", "<bash-stdout>",
              "<bash-stderr>", "[Request interrupted by user")


def _is_prompt(e: dict[str, Any]) -> bool:
    """Whether a normalised transcript entry is something the user typed (a prompt, a slash command, a `!` line)."""
    if e.get("role") != "user" or e.get("type") != "user" or e.get("tool_results") or not e.get("content"):
        return False
    return not e.get("is_meta") and not str(e["content"]).lstrip().startswith(_NOT_TYPED)


def positions(entries: list[dict[str, Any]], tool_use_id: str | None) -> dict[str, int]:
    """``{"prompt": prompts so far, "call": number of the pending tool call}`` from normalised transcript entries.

    A prompt is what the user typed: a slash command counts once, although Claude Code writes it as two user lines
    (the command and its expanded text, ``isMeta``), and the output lines of local commands do not count."""
    prompts, calls = 0, []
    for e in entries:
        if _is_prompt(e):
            prompts += 1
        for c in e.get("tool_calls") or []:
            if c.get("id") not in calls:
                calls.append(c.get("id"))
    out = {"prompt": prompts}
    if tool_use_id is not None:
        out["call"] = calls.index(tool_use_id) + 1 if tool_use_id in calls else len(calls) + 1
    return out


@dataclass
class Point:
    snapshot: Snapshot
    meta: dict[str, Any]

    @property
    def label(self) -> str:
        m = self.meta
        if m.get("event") in ("Stop", "UserPromptSubmit"):
            return f"before prompt {int(m.get('prompt') or 0) + 1} (end of turn {m.get('prompt')})"
        what = m.get("command") or m.get("file") or ""
        kind = "destructive " if m.get("destructive") else ""
        late = " [conversation captured before this call was written: it may lack the last steps]" if self.incomplete else ""
        return f"before {kind}tool call {m.get('call', '?')} ({m.get('tool')}: {str(what)[:60]}){late}"

    @property
    def incomplete(self) -> bool:
        """The hook waited in vain for Claude Code to write this call into the transcript (the files are whole)."""
        return bool((self.meta.get("transcript") or {}).get("pending_call_missing"))

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.snapshot.id, "label": self.label, "time": self.snapshot.time, "conversation_incomplete": self.incomplete,
                **{k: self.meta.get(k) for k in ("session_id", "prompt", "call", "tool", "destructive")}}


def points(repo: Repo, session: str | None = None) -> list[Point]:
    """The plugin's snapshots of one session, oldest first.

    ``session``: an id, ``"*"`` for every session, or ``None`` for the newest session that snapshotted a tool call.
    """
    found: dict[str, Point] = {}
    # a restore moves the branch back (like git reset --hard): what it left behind is still in the reflog
    starts = {oid for e in repo.refs.reflog() for oid in (e.old, e.new) if oid}
    starts |= set(repo.refs.list_refs("refs/").values())
    head = repo.head()[1]
    for snap in _walk(repo, sorted(starts | ({head} if head else set()))):
        meta = (snap.manifest.get("meta") or {}).get("claude_code")
        if isinstance(meta, dict) and meta.get("event"):
            found[snap.id] = Point(snap, meta)
    ordered = sorted(found.values(), key=lambda p: p.snapshot.time)
    if session == "*":
        return ordered
    if session is None and ordered:  # the newest session that snapshotted a tool call (a later /agentsnap:rewind turn did not)
        calls = [p for p in ordered if p.meta.get("event") == "PreToolUse"] or ordered
        session = calls[-1].meta.get("session_id")
    return [p for p in ordered if p.meta.get("session_id") == session]


def _walk(repo: Repo, starts: list[str]) -> list[Snapshot]:
    try:
        return list(repo.walk(starts))
    except AgentSnapError:  # a reflog entry whose snapshot was expired or collected: walk the others
        out: list[Snapshot] = []
        for start in starts:
            try:
                out += repo.walk([start])
            except AgentSnapError:
                continue
        return out


def pick(repo: Repo, *, last_destructive: bool = False, call: int | None = None, prompt: int | None = None, session: str | None = None) -> Point:
    """The point one of the options names; :class:`InvalidInput` saying what exists when there is none."""
    pts = points(repo, "*" if last_destructive and session is None else session)
    if last_destructive:
        hits = [p for p in pts if p.meta.get("destructive")]
        want = "before the last destructive tool call"
    elif call is not None:
        hits = [p for p in pts if p.meta.get("call") == call and p.meta.get("event") == "PreToolUse"]
        want = f"before tool call {call}"
    elif prompt is not None:
        ends = [p for p in pts if p.meta.get("event") in ("Stop", "UserPromptSubmit") and int(p.meta.get("prompt") or 0) <= prompt - 1]
        firsts = [p for p in pts if int(p.meta.get("prompt") or 0) == prompt]
        hits = ends or firsts[:1]
        want = f"before prompt {prompt}"
    else:
        raise InvalidInput("name a point: a snapshot id, --last-destructive, --before-call N or --before-prompt N")
    if not hits:
        listing = "; ".join(f"{p.snapshot.id[:12]} {p.label}" for p in pts[-8:]) or "none"
        raise InvalidInput(f"no snapshot was taken {want} (only calls that can lose work are snapshotted); points: {listing}")
    return hits[-1]
