"""Three-way merge of snapshots, layer by layer.

``merge(repo, "attempt-7")`` finds the lowest common ancestor of HEAD and the other snapshot in
the DAG and merges every layer against it:

* ``world`` - text files line by line (``merge3``, git-style ``<<<<<<<`` markers), binary files
  and symlinks whole (a conflict keeps both versions as ``PATH~ours`` / ``PATH~theirs``),
  add/add, modify/delete, file/directory and mode conflicts reported by path, renames followed
  where the content is identical;
* ``trace`` - the common prefix, our tail, then their tail as a marked block (or one note made
  by a summarizer: the ``agentsnap_summarize_branch`` hook, or any callable);
* ``state`` - key-wise three-way merge of mappings (``agentsnap_merge_state`` lets an adapter
  take over);
* ``cache`` - not merged: ours is kept, and the result says so;
* ``model`` - TIES / DARE on task vectors (:mod:`agentsnap.modelmerge`, needs ``agentsnap[model]``);
* any other layer - a merger registered with :func:`register_layer_merger`, else the key-wise merge.

A clean merge makes a snapshot with two parents. A conflicted one writes the merged world
(markers included) into the working tree, remembers the merge, and waits for
:func:`merge_continue` or :func:`merge_abort`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

#: a layer merger: ``fn(base, ours, theirs, context) -> LayerMerge`` (payloads are plain data, None = absent)
LayerMerger = Callable[[Any, Any, Any, dict[str, Any]], "LayerMerge"]

_LAYER_MERGERS: dict[str, LayerMerger] = {}


@dataclass
class LayerMerge:
    """What a layer merger returns.

    Attributes:
        value: the merged payload (plain msgpack data); ``None`` drops the layer.
        conflicts: one dict per conflict, at least ``{"layer", "kind", "path", "message"}``;
            ``value`` must still be a usable payload (e.g. ours on the conflicting keys).
        notes: short human-readable remarks ("cache: kept ours, not merged").
    """

    value: Any
    conflicts: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def register_layer_merger(layer: str, fn: LayerMerger, *, replace: bool = False) -> None:
    """Make ``fn`` merge layer ``layer`` (e.g. ``"effects"``).

    ``fn(base, ours, theirs, context)`` receives the three payloads (``None`` where a snapshot
    has no such layer) and a context dict (``repo``, ``base``/``ours``/``theirs`` snapshot ids,
    ``strategy``) and returns a :class:`LayerMerge`. Registering a second merger for the same
    layer raises ``ValueError`` unless ``replace=True``.
    """
    if layer in ("world", "trace"):
        raise ValueError(f"layer {layer!r} is merged by the core and cannot be replaced")
    if layer in _LAYER_MERGERS and _LAYER_MERGERS[layer] is not fn and not replace:
        raise ValueError(f"a merger for layer {layer!r} is already registered; pass replace=True")
    _LAYER_MERGERS[layer] = fn


def unregister_layer_merger(layer: str) -> None:
    """Forget the merger of ``layer`` (tests)."""
    _LAYER_MERGERS.pop(layer, None)


def layer_merger(layer: str) -> LayerMerger | None:
    """The registered merger of ``layer``, or None."""
    return _LAYER_MERGERS.get(layer)
