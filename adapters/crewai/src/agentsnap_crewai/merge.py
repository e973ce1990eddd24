"""Merging two forks of a CrewAI memory: records unioned by id, conflicting updates reported.

:func:`merge_memory` is a pure function on state-layer payloads; the plugin exposes it to the core
merge engine through ``agentsnap_merge_state``, and :func:`merge_storages` merges two
:class:`~agentsnap_crewai.storage.AgentsnapStorage` branches into a two-parent snapshot.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agentsnap_core import Snapshot

from .storage import Row, memory_payload, rows_from_payload

if TYPE_CHECKING:
    from .storage import AgentsnapStorage

_ABSENT: Row = {}


@dataclass
class MemoryMerge:
    """The outcome of a memory merge.

    Attributes:
        records: the merged records by id (ours wins where the two sides conflict).
        conflicts: one dict per record changed differently on both sides:
            ``{"layer", "kind", "path", "id", "message", "base", "ours", "theirs"}`` (``None`` = deleted).
        snapshot: the merge snapshot, when one was written.
    """

    records: dict[str, Row]
    conflicts: list[dict[str, Any]] = field(default_factory=list)
    snapshot: Snapshot | None = None

    @property
    def payload(self) -> dict[str, Any]:
        return memory_payload(self.records)


def _same(a: Row | None, b: Row | None) -> bool:
    """Equal apart from ``last_accessed`` (a recall touching a record is not a change)."""
    if a is None or b is None:
        return a is b
    return {k: v for k, v in a.items() if k != "last_accessed"} == {k: v for k, v in b.items() if k != "last_accessed"}


def _later_access(a: Row, b: Row) -> Row:
    return a if a["last_accessed"] >= b["last_accessed"] else b


def merge_memory(base: Any, ours: Any, theirs: Any) -> MemoryMerge:
    """Three-way merge of memory payloads (``base`` may be None: no common ancestor).

    A record added or changed on one side only is taken; changed identically on both sides it
    is taken once; changed differently on both sides (or changed on one, deleted on the other)
    it is a conflict, and the merged records keep our version (or our deletion).
    """
    b = rows_from_payload(base) if base is not None else {}
    o, t = rows_from_payload(ours), rows_from_payload(theirs)
    merged: dict[str, Row] = {}
    conflicts: list[dict[str, Any]] = []
    for rid in [*o, *(k for k in t if k not in o), *(k for k in b if k not in o and k not in t)]:
        bv, ov, tv = b.get(rid), o.get(rid), t.get(rid)
        if _same(ov, tv):
            if ov is not None and tv is not None:
                merged[rid] = _later_access(ov, tv)
            continue
        if _same(ov, bv):
            result = tv
        elif _same(tv, bv):
            result = ov
        else:
            conflicts.append(
                {
                    "layer": "state",
                    "kind": "memory-record",
                    "path": f"memory/records/{rid}",
                    "id": rid,
                    "message": f"memory record {rid} was changed differently on both sides; kept ours",
                    "base": bv,
                    "ours": ov,
                    "theirs": tv,
                }
            )
            result = ov
        if result is not None:
            merged[rid] = result
    return MemoryMerge(merged, conflicts)


def merge_storages(ours: AgentsnapStorage, theirs: AgentsnapStorage | str, message: str | None = None) -> MemoryMerge:
    """Merge ``theirs`` (a storage or a branch/snapshot spec) into ``ours`` and snapshot the result.

    Both sides are snapshotted first when they have unsnapshotted writes; ``agentsnap_core.operations.merge.plan_merge``
    (the core engine) computes the merge against the common ancestor. The merge snapshot has
    two parents and lands on ``ours``' branch, conflicts or not (they are in the result and in
    the snapshot's ``meta``); ``ours`` then holds the merged records.
    """
    from agentsnap_core.operations.merge import plan_merge

    from .storage import AgentsnapStorage

    with ours._locked():  # no other writer of ours' branch slips a write in between
        ours_id = ours.snapshot("crewai memory: before merge").id
        theirs_id = theirs.snapshot("crewai memory: before merge").id if isinstance(theirs, AgentsnapStorage) else ours.repo.resolve(theirs)
        # the core merge engine finds the common ancestor and calls this adapter's agentsnap_merge_state
        plan = plan_merge(ours.repo, ours_id, theirs_id)
        state = plan.layers.get("state")
        result = MemoryMerge(rows_from_payload(state), [c for c in plan.conflicts if c.get("kind") == "memory-record"])
        ours.load_payload(result.payload)
        result.snapshot = ours.repo.snapshot(
            message or f"crewai memory: merge {theirs_id[:12]} into {ours.branch}",
            agent="crewai.memory",
            layers={"state": result.payload},
            trace=[],
            capture_world=False,
            parents=[ours_id, theirs_id],
            ref=ours.ref,
            meta={"records": len(result.records), "conflicts": [c["id"] for c in result.conflicts]},
        )
        ours.mark_snapshotted(result.snapshot.id)
    return result
