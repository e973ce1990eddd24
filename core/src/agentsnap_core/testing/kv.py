"""Shared helpers for the KV-cache adapters' tests (transformers, vLLM, SGLang): a snapshot with one page perturbed.

A KV ``cache`` layer holds page records (``{"segment": <oid>, "offset": ..., ...}``, or ``{"content": <oid>, ...}``
in version-1 records) in ``pages`` lists, at the top or nested under per-sequence / per-request records; each record
with pages lists their objects in ``refs`` (gc roots), and the layer's own ``refs`` is the union. :func:`corrupted_copy` changes one page in every such list into a *valid, different* page
(float32 values + 0.25) or whatever ``change`` makes of it, so a test can show that the restored output changes, i.e. the pages are really used.
"""

from __future__ import annotations

import array
from collections.abc import Callable
from typing import Any

from agentsnap_core.format import content
from agentsnap_core.layers import kvcache
from agentsnap_core.repository.repo import Repo


def perturb_float32(raw: bytes, delta: float = 0.25) -> bytes:
    """``raw`` read as native float32 values, each plus ``delta``."""
    values = array.array("f")
    values.frombytes(raw[: len(raw) - len(raw) % 4])
    for i in range(len(values)):
        values[i] += delta
    return values.tobytes() + raw[len(raw) - len(raw) % 4 :]


def _page_lists(node: Any) -> list[dict[str, Any]]:
    """Every dict under ``node`` (itself included) that holds a ``pages`` list."""
    found: list[dict[str, Any]] = []
    if isinstance(node, dict):
        if isinstance(node.get("pages"), list):
            found.append(node)
        for value in node.values():
            if isinstance(value, (dict, list)):
                found += _page_lists(value)
    elif isinstance(node, list):
        for value in node:
            found += _page_lists(value)
    return found


def corrupted_copy(repo: Repo, snap_id: str, page: int, *, layer: str = "cache",
                   change: Callable[[bytes], bytes] = perturb_float32) -> str:
    """A new snapshot (HEAD does not move) equal to ``snap_id`` except that page ``page`` of every page list in its
    ``layer`` holds ``change(bytes)`` (default: a valid, different page; e.g. ``lambda b: b[: len(b) // 2]`` makes it
    unreadable as KV); the other layers (state, trace...) are kept as they are. The changed page is stored as its own
    segment, or as content where the page was content (the record's ``nbytes`` is kept, so a shorter page is caught
    as one)."""
    snap = repo.get(snap_id)
    layers = {name: repo.read_layer(snap, name) for name in snap.layers if name not in ("world", "trace")}
    record = layers[layer]
    holders = _page_lists(record)
    if not holders:
        raise ValueError(f"layer {layer!r} of {snap_id[:12]} holds no page list")
    for holder in holders:
        entry = holder["pages"][page]
        if "segment" in entry:  # a page inside a segment: the changed page becomes a segment of its own
            raw = bytes(kvcache.read_page(repo.objects, entry))
            entry.update(segment=content.put_raw(repo.objects, [change(raw)]), offset=0)
        else:  # a page stored as content of its own (version-1 KV records, other page lists)
            raw = content.get_bytes(repo.objects, entry["content"])
            entry["content"] = content.put_bytes(repo.objects, change(raw))
        holder["refs"] = kvcache.page_refs(holder["pages"])
    if holders[0] is not record:  # nested lists: the layer's refs are their union (and its own pages', if any)
        record["refs"] = list(dict.fromkeys(r for h in holders for r in h["refs"]))
    trace = repo.read_layer(snap, "trace") if "trace" in snap.layers else None
    return repo.snapshot(f"{layer}: page {page} perturbed", layers=layers, trace=trace, capture_world=False,
                         move_head=False).id
