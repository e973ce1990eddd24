"""agentsnap hooks for LangGraph: the ``state`` and ``trace`` layers of a graph thread.

``repo.capture(LangGraphThread(graph, config))`` snapshots the thread's current checkpoint (channel
values, versions, metadata and pending writes, serialized by the graph checkpointer's ``serde``) with
whatever checkpointer the graph uses - ``InMemorySaver`` included. ``repo.restore_into(thread, id)``
brings it back as LangGraph's own time travel does: the thread's next ``invoke`` continues from the
restored checkpoint (it is written into the checkpointer first when missing there).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from agentsnap_core import hookimpl
from agentsnap_core.errors import InvalidInput
from agentsnap_core.format import objects

STATE_FORMAT = "agentsnap-langgraph-state"
_ROLES = {"human": "user", "ai": "assistant", "tool": "tool", "system": "system"}


class LangGraphThread:
    """One thread of a compiled LangGraph graph: ``graph`` (with a checkpointer) plus ``config``.

    ``invoke`` runs the graph on the thread and then follows the thread's newest checkpoint.
    """

    def __init__(self, graph: Any, config: dict[str, Any]) -> None:
        if getattr(graph, "checkpointer", None) is None:
            raise InvalidInput("the graph has no checkpointer: compile it with checkpointer=PFSaver() or InMemorySaver()")
        if "thread_id" not in config.get("configurable", {}):
            raise InvalidInput("config needs configurable.thread_id")
        self.graph = graph
        self.config = config

    @property
    def thread_config(self) -> dict[str, Any]:
        conf = self.config["configurable"]
        return {"configurable": {"thread_id": conf["thread_id"], "checkpoint_ns": conf.get("checkpoint_ns", "")}}

    def invoke(self, value: Any, **kwargs: Any) -> Any:
        out = self.graph.invoke(value, self.config, **kwargs)
        self.config = self.thread_config
        return out

    def state(self) -> Any:
        return self.graph.get_state(self.config)


def capture_state(thread: LangGraphThread) -> dict[str, Any]:
    """The thread's current checkpoint as plain data (bytes from the checkpointer's serde)."""
    saver = thread.graph.checkpointer
    tup = saver.get_tuple(thread.config)
    if tup is None:
        return {"format": STATE_FORMAT, "v": 1, "checkpoint": None}
    cp = dict(tup.checkpoint)
    values = cp.pop("channel_values", {})
    dump = saver.serde.dumps_typed
    return {
        "format": STATE_FORMAT,
        "v": 1,
        "checkpoint": list(dump(cp)),
        "metadata": list(dump(dict(tup.metadata))),
        "channels": {ch: list(dump(v)) for ch, v in values.items()},
        "pending_writes": [[task, ch, *dump(v)] for task, ch, v in tup.pending_writes or []],
        "parent_checkpoint_id": (tup.parent_config or {}).get("configurable", {}).get("checkpoint_id"),
    }


def own_token(state: dict[str, Any]) -> str:
    """The token a capture made here notes in the store's own list (``Repo.remember_own``): a digest of its bytes."""

    def typed(pair: Any) -> Iterator[bytes]:
        data = bytes(pair[1])
        yield f"{pair[0]}\0{len(data)}\0".encode()
        yield data

    def parts() -> Iterator[bytes]:
        yield from typed(state["checkpoint"])
        yield from typed(state["metadata"])
        for ch in sorted(state["channels"]):
            yield f"{ch}\0".encode()
            yield from typed(state["channels"][ch])
        for task, ch, typ, data in state["pending_writes"]:
            yield f"{task}\0{ch}\0".encode()
            yield from typed((typ, data))

    return objects.own_token("lgstate", parts())


def _reader(serde: Any, own: bool) -> Any:
    """The serializer that reads a captured state: the saver's own for a state captured here; for one from
    elsewhere (a clone, a pull, a crafted store) LangGraph's strict msgpack allowlist where the saver's serializer
    is LangGraph's permissive default (it rebuilds any class and calls any function the bytes name, or unpickles),
    as :class:`PFSaver` reads checkpoints adopted from elsewhere. A serializer of the user's own kind reads as it is."""
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer  # (this module loads with every CLI command)

    if own or type(serde) is not JsonPlusSerializer:
        return serde
    if serde._allowed_msgpack_modules is not True and not serde.pickle_fallback:
        return serde
    return JsonPlusSerializer(allowed_msgpack_modules=None)


def restore_state(thread: LangGraphThread, state: dict[str, Any], repo: Any = None) -> None:
    """Make the thread continue from the captured checkpoint (``repo``: where it was read, to tell whether it was
    captured here; without it the state is read as from elsewhere)."""
    if not isinstance(state, dict) or state.get("format") != STATE_FORMAT:
        raise InvalidInput("not a LangGraph state layer (format agentsnap-langgraph-state)")
    base = thread.thread_config
    if state["checkpoint"] is None:
        thread.config = base
        return
    saver = thread.graph.checkpointer
    load = _reader(saver.serde, repo is not None and repo.captured_here(own_token(state))).loads_typed
    checkpoint = load(tuple(state["checkpoint"]))
    checkpoint["channel_values"] = {ch: load(tuple(v)) for ch, v in state["channels"].items()}
    pinned = {"configurable": {**base["configurable"], "checkpoint_id": checkpoint["id"]}}
    if saver.get_tuple(pinned) is None:
        parent = dict(base["configurable"])
        if state.get("parent_checkpoint_id"):
            parent["checkpoint_id"] = state["parent_checkpoint_id"]
        saved = saver.put({"configurable": parent}, checkpoint, load(tuple(state["metadata"])), checkpoint["channel_versions"])
        by_task: dict[str, list[tuple[str, Any]]] = {}
        for task, ch, typ, data in state["pending_writes"]:
            by_task.setdefault(task, []).append((ch, load((typ, data))))
        for task, writes in by_task.items():
            saver.put_writes(saved, writes, task)
    thread.config = pinned


def messages_of(thread: LangGraphThread) -> list[dict[str, Any]]:
    """The ``messages`` channel as trace messages (id, role, content, tool calls)."""
    values = thread.state().values
    raw: Sequence[Any] = values.get("messages", []) if isinstance(values, dict) else []
    out = []
    for m in raw:
        msg: dict[str, Any] = {"id": getattr(m, "id", None), "role": _ROLES.get(getattr(m, "type", ""), "other")}
        msg["content"] = getattr(m, "content", str(m))
        calls = getattr(m, "tool_calls", None)
        if calls:
            msg["tool_calls"] = [{"id": c.get("id"), "name": c.get("name"), "args": c.get("args")} for c in calls]
        if getattr(m, "tool_call_id", None):
            msg["tool_call_id"] = m.tool_call_id
        out.append(msg)
    return out


@hookimpl
def agentsnap_handles(obj: Any) -> str | None:
    return "langgraph" if isinstance(obj, LangGraphThread) else None


@hookimpl
def agentsnap_capture_state(obj: Any, context: dict[str, Any]) -> Any:
    if not isinstance(obj, LangGraphThread):
        return None
    state = capture_state(obj)
    if state["checkpoint"] is not None and context.get("repo") is not None:
        context["repo"].remember_own(own_token(state))  # (its bytes are read back with the saver's own serde)
    return state


@hookimpl
def agentsnap_restore_state(obj: Any, state: Any, context: dict[str, Any]) -> bool | None:
    if not isinstance(obj, LangGraphThread):
        return None
    restore_state(obj, state, context.get("repo"))
    return True


@hookimpl
def agentsnap_capture_trace(obj: Any, context: dict[str, Any]) -> list[dict[str, Any]] | None:
    return messages_of(obj) if isinstance(obj, LangGraphThread) else None


@hookimpl
def agentsnap_restore_trace(obj: Any, messages: list[dict[str, Any]], context: dict[str, Any]) -> bool | None:
    """The trace of a LangGraph thread is a view of its ``messages`` channel: the state layer restores it."""
    return True if isinstance(obj, LangGraphThread) else None
