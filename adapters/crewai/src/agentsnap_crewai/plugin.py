"""agentsnap hooks for CrewAI objects: memory stores, ``Memory``, ``Crew`` and ``Flow``.

``repo.capture(obj)`` / ``repo.restore_into(obj, spec)`` work on:

* an :class:`AgentsnapStorage` or any CrewAI ``StorageBackend`` - its records;
* a ``Memory`` - the records of its storage (pending background saves are drained first);
* a ``Crew`` - its memory's records and the task outputs so far (restore into a crew the caller
  built: its LLMs and tools are the caller's live objects);
* a ``Flow`` - its state, exactly as ``@persist`` stores it.

Everything lands in the ``state`` layer; memory records are keyed by id, so diffs and merges
are per record (``agentsnap_merge_state``).
"""

from __future__ import annotations

import sys
from typing import Any

from agentsnap_core import hookimpl
from agentsnap_core.errors import AgentSnapError

from ._kinds import CREW_KIND, FLOW_KIND, MEMORY_KIND

# This module is loaded by every process that uses agentsnap (entry-point discovery, every CLI command): it imports
# no CrewAI module (seconds) at load. No CrewAI object - nor an AgentsnapStorage, whose module imports CrewAI - can
# exist in a process that has not imported crewai, so the hooks answer None there without importing it.

NAME = "crewai"
#: records per ``list_records`` call when reading a foreign StorageBackend (LanceDB takes an int64 limit)
PAGE = 500


def _kind(obj: Any) -> str | None:
    if "crewai" not in sys.modules:
        return None
    from .storage import AgentsnapStorage

    if isinstance(obj, AgentsnapStorage):
        return "storage"
    try:
        from crewai import Crew
        from crewai.flow.flow import Flow
        from crewai.memory.storage.backend import StorageBackend
        from crewai.memory.unified_memory import Memory
    except ImportError:  # pragma: no cover - crewai is a dependency
        return None
    if isinstance(obj, Memory):
        return "memory"
    if isinstance(obj, Crew):
        return "crew"
    if isinstance(obj, Flow):
        return "flow"
    if isinstance(obj, StorageBackend) and not isinstance(obj, type):
        return "storage"
    return None


def _storage_of(obj: Any) -> Any:
    """The StorageBackend behind a storage, a Memory (or scope/slice view) or a crew's memory."""
    kind = _kind(obj)
    if kind == "storage":
        return obj
    if kind == "crew":
        obj = obj._memory or (obj.memory if obj.memory not in (True, False, None) else None)
        if obj is None:
            return None
    backing = getattr(obj, "_memory", None) or obj  # MemoryScope / MemorySlice wrap a Memory
    drain = getattr(backing, "drain_writes", None)
    if drain is not None:
        drain()
    return getattr(backing, "_storage", None)


def capture_memory(storage: Any) -> dict[str, Any]:
    """The memory payload of any CrewAI StorageBackend."""
    from .storage import AgentsnapStorage, memory_payload, record_to_row

    if isinstance(storage, AgentsnapStorage):
        return storage.payload()
    return memory_payload({r.id: record_to_row(r) for r in sorted(all_records(storage), key=lambda r: (r.created_at, r.id))})


def all_records(storage: Any) -> list[Any]:
    """Every record of any StorageBackend, read page by page (the protocol's ``limit``/``offset``).

    Raises when the store changed while being read (a page boundary moved), so a capture is never partial.
    """
    expected = storage.count()
    out: dict[str, Any] = {}
    offset = 0
    while True:
        page = storage.list_records(limit=PAGE, offset=offset)
        out.update((r.id, r) for r in page)
        offset += len(page)
        if len(page) < PAGE:
            break
    if len(out) != expected:
        raise AgentSnapError(f"memory changed while it was captured ({expected} records, read {len(out)}); capture again")
    return list(out.values())


def restore_memory(storage: Any, payload: Any) -> None:
    """Replace a StorageBackend's contents with a memory payload (validated before any change)."""
    from .storage import AgentsnapStorage, row_to_record, rows_from_payload

    rows = rows_from_payload(payload)
    if isinstance(storage, AgentsnapStorage):
        storage.load_payload(payload)
        return
    records = [row_to_record(r) for r in rows.values()]
    storage.reset()
    storage.save(records)


@hookimpl
def agentsnap_handles(obj: Any) -> str | None:
    return NAME if _kind(obj) else None


@hookimpl
def agentsnap_capture(obj: Any, context: dict[str, Any]) -> dict[str, Any] | None:
    kind = _kind(obj)
    if kind in ("storage", "memory"):
        return {"state": capture_memory(_storage_of(obj))}
    if kind == "crew":
        storage = _storage_of(obj)
        tasks = [
            {"key": t.key, "output": t.output.model_dump(mode="json") if t.output is not None else None} for t in obj.tasks
        ]
        kickoff = getattr(obj, "_kickoff_event_id", None) or obj.checkpoint_kickoff_event_id
        return {"state": {"kind": CREW_KIND, "v": 1, "memory": capture_memory(storage) if storage else None, "tasks": tasks,
                          "kickoff_event_id": str(kickoff) if kickoff else None}}
    if kind == "flow":
        from .flow import _plain_state

        # strict: a value JSON cannot hold is refused, not snapshotted as its str() (restored as that string)
        return {"state": {"kind": FLOW_KIND, "v": 1, "state": _plain_state(obj._state, strict=True)}}
    return None


@hookimpl
def agentsnap_restore(obj: Any, layers: dict[str, Any], context: dict[str, Any]) -> bool | None:
    kind = _kind(obj)
    if kind is None:
        return None
    state = layers.get("state")
    skind = state.get("kind") if isinstance(state, dict) else None
    if kind in ("storage", "memory"):
        payload = state.get("memory") if skind == CREW_KIND else state
        if payload is None:
            raise AgentSnapError("this snapshot holds no CrewAI memory")
        restore_memory(_storage_of(obj), payload)
        return True
    if kind == "crew":
        if skind not in (CREW_KIND, MEMORY_KIND):
            raise AgentSnapError(f"snapshot holds {skind or 'no CrewAI state'}, not a crew")
        memory = state if skind == MEMORY_KIND else state.get("memory")
        storage = _storage_of(obj)
        if memory is not None and storage is None:
            raise AgentSnapError("the snapshot has crew memory but this crew has none; build it with memory=Memory(...)")
        outputs = state.get("tasks", []) if skind == CREW_KIND else None
        if outputs is not None and [t["key"] for t in outputs] != [t.key for t in obj.tasks]:
            raise AgentSnapError("the snapshot's tasks differ from this crew's tasks; restore into the same crew definition")
        if memory is not None:
            restore_memory(storage, memory)
        if outputs is not None:
            from crewai.tasks.task_output import TaskOutput

            for task, saved in zip(obj.tasks, outputs, strict=True):
                task.output = TaskOutput.model_validate(saved["output"]) if saved["output"] is not None else None
            _resume_from_outputs(obj, state.get("kickoff_event_id"))
        return True
    if kind == "flow":
        if skind != FLOW_KIND:
            raise AgentSnapError(f"snapshot holds {skind or 'no CrewAI state'}, not a flow state")
        obj._restore_state(dict(state["state"]))
        return True
    return None


def _resume_from_outputs(crew: Any, kickoff_event_id: str | None) -> None:
    """Make the next ``kickoff()`` continue after the restored task outputs, as CrewAI's own checkpoint resume does.

    CrewAI 1.15 starts at the first task without an output when ``checkpoint_kickoff_event_id`` is set
    (``Crew._get_execution_start_index``); restoring a snapshot taken before any task finished clears it.
    """
    import uuid

    if any(t.output is not None for t in crew.tasks):
        crew.checkpoint_kickoff_event_id = kickoff_event_id or str(uuid.uuid4())
        crew._kickoff_event_id = crew.checkpoint_kickoff_event_id
    else:
        crew.checkpoint_kickoff_event_id = None


@hookimpl
def agentsnap_merge_state(base: Any, ours: Any, theirs: Any, context: dict[str, Any]) -> Any:
    """Memory records are merged per id; a crew's other state keeps ours."""
    kinds = {x.get("kind") if isinstance(x, dict) else None for x in (ours, theirs)}
    if not kinds <= {MEMORY_KIND, CREW_KIND}:
        return None  # not CrewAI state: nothing imported
    from .merge import merge_memory

    if kinds == {MEMORY_KIND}:
        result = merge_memory(base, ours, theirs)
        return result.payload, result.conflicts
    if kinds == {CREW_KIND} and ours.get("memory") is not None and theirs.get("memory") is not None:
        base_memory = base.get("memory") if isinstance(base, dict) else None
        result = merge_memory(base_memory, ours["memory"], theirs["memory"])
        return {**ours, "memory": result.payload}, result.conflicts
    return None
