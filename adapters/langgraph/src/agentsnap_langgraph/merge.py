"""Merging one LangGraph thread into another through the graph's own reducers.

The approach:

1. the *base* is the newest checkpoint both threads share (``fork_thread`` / ``copy_thread`` keep
   checkpoint ids, so a fork and its origin share their history up to the fork point), counting the
   checkpoints an earlier merge brought in (its snapshot's parents), so a change is never merged twice;
2. every state key the source changed since the base is merged three-way (base, target, source):

   * a message list (``add_messages``): per message id - a message the source added, edited or removed
     is added, replaced (same id) or removed (``RemoveMessage``) in the target; when the target changed
     the same message another way it is a conflict;
   * ``operator.add`` on numbers: the target gets the source's change (``source - base``) added, so a
     counter both threads moved ends at base + both changes;
   * another reducer list (``operator.add`` on lists): the items the source appended (a pure
     extension of the base) are appended after the target's own; any other change is taken as is
     (``Overwrite``) when the target left the channel as in the base, else a conflict;
   * any other channel (last value wins, or a reducer on other values): taken from the source when the
     target left it as in the base; left alone when both agree; otherwise a conflict;

   conflicts are settled by ``prefer="source"|"target"`` or raised as :class:`ThreadMergeConflict`, one
   dict per conflict as other layers report them (``layer``, ``kind``, ``path``, ``message``);
3. the updates go through ``graph.update_state`` on the target (one new checkpoint); its agentsnap
   snapshot has the target's previous snapshot and the source's snapshot as parents.
"""

from __future__ import annotations

import operator
from numbers import Number
from typing import TYPE_CHECKING, Any

from agentsnap_core.errors import AgentSnapError, InvalidInput
from langchain_core.runnables import RunnableConfig
from langgraph.types import Overwrite

if TYPE_CHECKING:
    from .saver import PFSaver

_MISSING = object()


class ThreadMergeConflict(AgentSnapError):
    """Both threads changed the same state the same way; pass ``prefer="source"`` or ``"target"``.

    ``channels``: the state keys in conflict; ``conflicts``: one dict per conflict
    (``layer="state"``, ``kind`` such as ``modify/modify``, ``path`` = key or ``key/message id``, ``message``).
    """

    def __init__(self, conflicts: list[dict[str, Any]]) -> None:
        self.conflicts = conflicts
        self.channels = sorted({str(c["path"]).split("/")[0] for c in conflicts})
        super().__init__(
            f"both threads changed {', '.join(sorted(str(c['path']) for c in conflicts))} since their common "
            "checkpoint; merge again with prefer='source' or prefer='target'"
        )


def _history(saver: PFSaver, thread_id: str, checkpoint_id: str | None) -> dict[str, str]:
    """Checkpoint id -> a thread holding it, for the checkpoint ``checkpoint_id`` names (or the thread's newest) and
    every checkpoint it descends from: through parent ids and through the threads an earlier ``merge_thread`` merged
    in (its checkpoint's snapshot has the merged checkpoint's snapshot as a parent), as git finds a merge base."""
    out: dict[str, str] = {}
    todo: list[tuple[str, str | None]] = [(thread_id, checkpoint_id)]
    while todo:
        thread, cid = todo.pop()
        row = saver.index.get_row(thread, "", cid)
        while row is not None and row[2] not in out:
            out[row[2]] = thread
            for snap in saver.repo.manifest(row[4]).get("parents", []):
                with saver.index.read() as db:
                    found = db.execute(
                        "SELECT thread_id, checkpoint_id FROM lg_checkpoints WHERE snapshot=? AND checkpoint_ns='' "
                        "ORDER BY thread_id=? DESC LIMIT 1",
                        (snap, thread),
                    ).fetchone()
                if found is not None and found[1] not in out:
                    todo.append((str(found[0]), str(found[1])))
            row = saver.index.get_row(thread, "", row[3]) if row[3] else None
    return out


def _number(value: Any) -> bool:
    return isinstance(value, Number) and not isinstance(value, bool)


def _conflict(key: str, kind: str, why: str) -> dict[str, Any]:
    return {"layer": "state", "kind": kind, "path": key, "message": f"{key}: {why}"}


def _reducer(graph: Any, key: str) -> Any:
    """The channel's reducer (``BinaryOperatorAggregate.operator``), or None for a last-value channel."""
    from langgraph.channels.binop import BinaryOperatorAggregate

    channel = getattr(graph, "channels", {}).get(key)
    return channel.operator if isinstance(channel, BinaryOperatorAggregate) else None


def _is_messages(*lists: Any) -> bool:
    items = [x for v in lists if isinstance(v, list) for x in v]
    return bool(items) and all(getattr(x, "id", None) is not None for x in items)


def _merge_messages(key: str, base: Any, target: Any, source: list[Any], prefer: str | None,
                    conflicts: list[dict[str, Any]]) -> list[Any]:
    """Per message id: what the source added, edited or removed, as add_messages updates for the target."""
    from langchain_core.messages import RemoveMessage

    b = {m.id: m for m in (base if isinstance(base, list) else [])}
    t = {m.id: m for m in (target if isinstance(target, list) else [])}
    s = {m.id: m for m in source}
    out: list[Any] = []
    for ident, msg in s.items():
        old, mine = b.get(ident, _MISSING), t.get(ident, _MISSING)
        if old is not _MISSING and msg == old:
            continue  # the source did not touch it
        if mine == msg:
            continue  # both made the same change
        if mine == old or (old is _MISSING and mine is _MISSING):
            out.append(msg)  # added or edited in the source only
            continue
        kind = "modify/delete" if mine is _MISSING else ("add/add" if old is _MISSING else "modify/modify")
        if prefer == "source":
            out.append(msg)
        elif prefer != "target":
            conflicts.append(_conflict(f"{key}/{ident}", kind, f"message {ident} changed on both threads"))
    for ident, old in b.items():
        if ident in s or ident not in t:
            continue  # kept by the source, or removed on both
        if t[ident] == old or prefer == "source":
            out.append(RemoveMessage(id=ident))
        elif prefer != "target":
            conflicts.append(_conflict(f"{key}/{ident}", "delete/modify",
                                       f"message {ident} removed in the source, changed in the target"))
    return out


def merge_thread(
    saver: PFSaver,
    graph: Any,
    target: RunnableConfig,
    source: RunnableConfig,
    *,
    as_node: str | None = None,
    prefer: str | None = None,
) -> RunnableConfig:
    """Merge ``source``'s changes since the common checkpoint into ``target``; return the new target config."""
    if prefer not in (None, "source", "target"):
        raise InvalidInput(f"prefer must be 'source', 'target' or None, not {prefer!r}")
    t_thread = str(target["configurable"]["thread_id"])
    s_thread = str(source["configurable"]["thread_id"])
    t_row = saver.index.get_row(t_thread, "", target["configurable"].get("checkpoint_id"))
    s_row = saver.index.get_row(s_thread, "", source["configurable"].get("checkpoint_id"))
    if t_row is None or s_row is None:
        raise InvalidInput("both threads need at least one checkpoint to merge")
    saver.flush()  # the snapshots whose parents name earlier merges
    t_hist = _history(saver, t_thread, t_row[2])
    s_hist = _history(saver, s_thread, s_row[2])
    common = set(t_hist) & set(s_hist)
    if not common:
        raise InvalidInput(
            f"threads {t_thread!r} and {s_thread!r} share no checkpoint; merge needs a common one (fork_thread makes it)"
        )
    base_id = max(common)  # the newest (LangGraph's checkpoint ids sort by time)

    def values(thread: str, cid: str) -> dict[str, Any]:
        return dict(graph.get_state({"configurable": {"thread_id": thread, "checkpoint_ns": "", "checkpoint_id": cid}}).values)

    base = values(s_hist[base_id], base_id)
    theirs = values(s_thread, s_row[2])
    ours = values(t_thread, t_row[2])
    updates: dict[str, Any] = {}
    conflicts: list[dict[str, Any]] = []
    for key, value in theirs.items():
        b, t = base.get(key, _MISSING), ours.get(key, _MISSING)
        if value == b:
            continue  # the source left it as in the base
        reducer = _reducer(graph, key)
        if reducer is not None and isinstance(value, list) and _is_messages(b, t, value):
            if items := _merge_messages(key, b, t, value, prefer, conflicts):
                updates[key] = items
            continue
        # a reducer adds: the source's change is added to the target's even when both ended at the same value (each
        # thread's turn counted 1 -> 2: the merge is 3). A change already merged is not in it: the base is then the
        # source checkpoint that earlier merge took
        if reducer is operator.add and _number(value) and _number(b) and _number(t):
            updates[key] = value - b  # the source's change, added to the target's
            continue
        if reducer is not None and isinstance(value, list) and isinstance(b, list) and value[: len(b)] == b:
            updates[key] = value[len(b) :]  # the items the source appended, after the target's own
            continue
        if value == t:
            continue  # both threads set the same value
        if t == b or t is _MISSING or prefer == "source":
            updates[key] = Overwrite(value) if reducer is not None else value
        elif prefer != "target":
            conflicts.append(_conflict(key, "modify/modify", "changed on both threads"))
    if conflicts:
        raise ThreadMergeConflict(conflicts)
    target_cfg: RunnableConfig = {"configurable": {"thread_id": t_thread, "checkpoint_ns": "", "checkpoint_id": t_row[2]}}
    if not updates:
        return target_cfg
    source_snap = s_row[4]
    with saver._s.lock:
        saver._s.extra_parents[(t_thread, "")] = source_snap
    try:
        result: RunnableConfig = graph.update_state(target_cfg, updates, as_node=as_node)
    finally:  # an update that failed (an unknown as_node) must not leave the source as a parent of the next put
        with saver._s.lock:
            saver._s.extra_parents.pop((t_thread, ""), None)
    return result
