"""Merging one LangGraph thread into another through the graph's own reducers.

The approach (simple on purpose):

1. the *base* is the newest checkpoint both threads share (``fork_thread`` / ``copy_thread`` keep
   checkpoint ids, so a fork and its origin share their history up to the fork point);
2. for every state key the source changed since the base:

   * a channel with a reducer (``Annotated[list, add_messages]``, ``Annotated[list, operator.add]``)
     whose value is a list: the items the source added (not in the base; messages compared by id)
     and the target lacks are sent as an update, so the reducer appends them after the target's own;
   * any other channel (last value wins): taken from the source when the target left it as in the
     base; left alone when both agree; otherwise a conflict, settled by ``prefer="source"|"target"``
     or raised as :class:`ThreadMergeConflict`;

3. the updates go through ``graph.update_state`` on the target (one new checkpoint); its agentsnap
   snapshot has the target's previous snapshot and the source's snapshot as parents.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agentsnap_core.errors import AgentSnapError, InvalidInput
from langchain_core.runnables import RunnableConfig

if TYPE_CHECKING:
    from .saver import PFSaver

_MISSING = object()


class ThreadMergeConflict(AgentSnapError):
    """Both threads changed the same last-value channels; pass ``prefer="source"`` or ``"target"``."""

    def __init__(self, channels: list[str]) -> None:
        self.channels = channels
        super().__init__(
            f"both threads changed {', '.join(channels)} since their common checkpoint; "
            "merge again with prefer='source' or prefer='target'"
        )


def _chain(saver: PFSaver, thread_id: str, checkpoint_id: str | None) -> list[str]:
    """Checkpoint ids from ``checkpoint_id`` (or the newest) back to the root of the thread."""
    out: list[str] = []
    row = saver.index.get_row(thread_id, "", checkpoint_id)
    while row is not None and row[2] not in out:
        out.append(row[2])
        row = saver.index.get_row(thread_id, "", row[3]) if row[3] else None
    return out


def _key(item: Any) -> Any:
    ident = getattr(item, "id", None)
    return ("id", ident) if ident is not None else ("value", repr(item))


def _added(base: Any, source: list[Any], target: Any) -> list[Any]:
    seen = {_key(x) for x in (base if isinstance(base, list) else [])}
    have = {_key(x) for x in (target if isinstance(target, list) else [])}
    return [x for x in source if _key(x) not in seen and _key(x) not in have]


def _has_reducer(graph: Any, key: str) -> bool:
    from langgraph.channels.binop import BinaryOperatorAggregate

    return isinstance(getattr(graph, "channels", {}).get(key), BinaryOperatorAggregate)


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
    t_chain = _chain(saver, t_thread, target["configurable"].get("checkpoint_id"))
    s_list = _chain(saver, s_thread, source["configurable"].get("checkpoint_id"))
    s_chain = set(s_list)
    if not t_chain or not s_chain:
        raise InvalidInput("both threads need at least one checkpoint to merge")
    base_id = next((c for c in t_chain if c in s_chain), None)
    if base_id is None:
        raise InvalidInput(
            f"threads {t_thread!r} and {s_thread!r} share no checkpoint; merge needs a common one (fork_thread makes it)"
        )

    def values(thread: str, cid: str) -> dict[str, Any]:
        return dict(graph.get_state({"configurable": {"thread_id": thread, "checkpoint_ns": "", "checkpoint_id": cid}}).values)

    base = values(t_thread, base_id)
    theirs = values(s_thread, s_list[0])
    ours = values(t_thread, t_chain[0])
    updates: dict[str, Any] = {}
    conflicts: list[str] = []
    for key, value in theirs.items():
        b, t = base.get(key, _MISSING), ours.get(key, _MISSING)
        if value == b:
            continue
        if _has_reducer(graph, key) and isinstance(value, list):
            added = _added(b, value, t)
            if added:
                updates[key] = added
        elif t == b or t is _MISSING:
            updates[key] = value
        elif t == value or prefer == "target":
            continue
        elif prefer == "source":
            updates[key] = value
        else:
            conflicts.append(key)
    if conflicts:
        raise ThreadMergeConflict(sorted(conflicts))
    target_cfg: RunnableConfig = {"configurable": {"thread_id": t_thread, "checkpoint_ns": "", "checkpoint_id": t_chain[0]}}
    if not updates:
        return target_cfg
    source_snap = saver.snapshot_id({"configurable": {"thread_id": s_thread, "checkpoint_id": s_list[0]}})
    with saver._s.lock:
        saver._s.extra_parents[(t_thread, "")] = source_snap
    result: RunnableConfig = graph.update_state(target_cfg, updates, as_node=as_node)
    return result
