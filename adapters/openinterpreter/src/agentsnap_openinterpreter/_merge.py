"""Merging two forks of one session: the ``cells`` layer's merger (registered by the plugin).

The cells are what the computer ran, in order. Like the trace, they merge as the common prefix,
then our cells, then the cells their branch ran after the fork point (each marked
``merged_from``): a ``replay="pure"`` restore of the merge re-runs both branches' pure cells, and
the classifier still skips every irreversible one (their effects merge in the ``effects`` layer).
"""

from __future__ import annotations

import copy
from typing import Any

from agentsnap_core.operations.merge import LayerMerge

from ._api import CELLS_FORMAT

__all__ = ["merge_cells"]


def _cells(layer: Any) -> list[dict[str, Any]] | None:
    if layer is None:
        return []
    if isinstance(layer, dict) and layer.get("format") == CELLS_FORMAT and isinstance(layer.get("cells"), list):
        return list(layer["cells"])
    return None


def merge_cells(base: Any, ours: Any, theirs: Any, context: dict[str, Any]) -> LayerMerge:
    """Common prefix + our cells + their cells since the fork (``fn(base, ours, theirs, context)``)."""
    b, o, t = _cells(base), _cells(ours), _cells(theirs)
    if o is None or t is None or b is None:
        return LayerMerge(ours, [{"kind": "format", "path": "cells",
                                  "message": "a cells layer is not from this Open Interpreter adapter; kept ours"}])
    k = 0
    while k < len(o) and k < len(t) and o[k] == t[k]:
        k += 1
    ours_tail, theirs_tail = o[k:], [c for c in t[k:] if c not in o[k:]]
    if not theirs_tail:
        return LayerMerge(ours)
    origin = str(context.get("theirs_label") or context.get("theirs") or "theirs")
    merged = copy.deepcopy(o) + [{**copy.deepcopy(c), "merged_from": origin} for c in theirs_tail]
    value = {**(ours or theirs), "format": CELLS_FORMAT, "v": 1, "cells": merged,
             "recorded": bool((ours or {}).get("recorded", True)) and bool((theirs or {}).get("recorded", True))}
    note = f"cells: {len(ours_tail)} of ours then {len(theirs_tail)} from {origin} after {k} shared"
    return LayerMerge(value, [], [note])
