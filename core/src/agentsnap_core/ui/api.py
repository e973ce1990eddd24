"""The data behind ``agentsnap ui``: paged snapshot lists, one snapshot's layers and per-layer diffs.

Every function takes an open :class:`~agentsnap_core.repository.repo.Repo` and plain, already validated arguments, and
returns JSON-ready data (shapes in docs/UI.md). Nothing here touches the file system outside the store's
own API: snapshots are named by hex ids only, layers by the names their manifest lists.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from typing import Any

from agentsnap_core.errors import InvalidInput, UnknownSnapshot
from agentsnap_core.repository.diffing import _env, _file_bytes, diff_mapping, diff_trace, diff_worlds, unified
from agentsnap_core.repository.repo import Repo, Snapshot, check_ref_name

API_VERSION = 1
DEFAULT_PAGE = 100
MAX_PAGE = 500
#: index rows a filtered page may look at before it returns what it found (with a cursor to go on)
SCAN_LIMIT = 5000
_BATCH = 200
MAX_TEXT = 4000  #: characters of one string shown before it is cut
MAX_ITEMS = 200  #: items of one list / keys of one map shown before it is cut
MAX_PATCHES = 300  #: files whose patch a diff returns
MAX_PATCH_CHARS = 200_000
_ID = re.compile(r"[0-9a-f]{4,64}")
_LAYER = re.compile(r"[A-Za-z0-9_.@:+-]{1,120}")


# ---------------------------------------------------------------------------------------------- validation
def snapshot(repo: Repo, text: str) -> Snapshot:
    """The snapshot named by a (short) hex id; anything else is refused before the store is asked."""
    if not isinstance(text, str) or not _ID.fullmatch(text):
        raise InvalidInput(f"not a snapshot id: {text[:80]!r} (give 4 to 64 lowercase hex digits)")
    return repo.get(repo.resolve(text))


def layer_name(name: str) -> str:
    if not _LAYER.fullmatch(name):
        raise InvalidInput(f"not a layer name: {name[:80]!r}")
    return name


def page_args(limit: int | None, default: int = DEFAULT_PAGE) -> int:
    if limit is None:
        return default
    if not 1 <= limit <= MAX_PAGE:
        raise InvalidInput(f"limit must be between 1 and {MAX_PAGE}")
    return limit


# ---------------------------------------------------------------------------------------------- plain data
def jsonable(value: Any, depth: int = 0) -> Any:
    """Layer payloads (msgpack data) as JSON, with long strings, lists and bytes cut to a preview."""
    if depth > 24:
        return "…(nested too deep)"
    if value is None or isinstance(value, (bool, int)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, str):
        return value if len(value) <= MAX_TEXT else value[:MAX_TEXT] + f"…(+{len(value) - MAX_TEXT} chars)"
    if isinstance(value, (bytes, bytearray, memoryview)):
        raw = bytes(value)
        return {"$bytes": len(raw), "hex": raw[:64].hex()}
    if isinstance(value, dict):
        items = list(value.items())
        out = {str(k): jsonable(v, depth + 1) for k, v in items[:MAX_ITEMS]}
        if len(items) > MAX_ITEMS:
            out["…"] = f"{len(items) - MAX_ITEMS} more keys"
        return out
    if isinstance(value, (list, tuple)):
        cut = [jsonable(v, depth + 1) for v in value[:MAX_ITEMS]]
        if len(value) > MAX_ITEMS:
            cut.append(f"…{len(value) - MAX_ITEMS} more items")
        return cut
    return str(value)[:MAX_TEXT]


def ref_labels(repo: Repo) -> dict[str, list[dict[str, str]]]:
    """Snapshot id -> the branches, tags and HEAD that point at it."""
    out: dict[str, list[dict[str, str]]] = {}
    symref, head = repo.head()
    for name, oid in sorted(repo.refs.list_refs().items()):
        if name.startswith("refs/heads/"):
            out.setdefault(oid, []).append({"kind": "branch", "name": name[11:], "head": str(name == symref).lower()})
        elif name.startswith("refs/tags/"):
            out.setdefault(oid, []).append({"kind": "tag", "name": name[10:]})
    if head and not symref:
        out.setdefault(head, []).insert(0, {"kind": "head", "name": "HEAD"})
    return out


def _thread(m: dict[str, Any]) -> str:
    meta = m.get("meta")
    if not isinstance(meta, dict):
        return ""
    value = meta.get("thread_id", meta.get("thread", ""))
    return str(value) if value is not None else ""


def node(s: Snapshot, labels: dict[str, list[dict[str, str]]]) -> dict[str, Any]:
    """One snapshot as a graph node: ids, who and when, its size and the refs on it."""
    m = s.manifest
    world_rec = s.layers.get("world") or {}
    trace_rec = s.layers.get("trace") or {}
    return {
        "id": s.id,
        "parents": s.parents,
        "message": s.message,
        "time": s.time,
        "agent": str(m.get("agent", "")),
        "author": str(m.get("author", "")),
        "thread": _thread(m),
        "layers": sorted(s.layers),
        "size": {
            "files": world_rec.get("files"),
            "bytes": world_rec.get("bytes"),
            "messages": trace_rec.get("count"),
        },
        "refs": labels.get(s.id, []),
    }


# ---------------------------------------------------------------------------------------------- endpoints
def refs(repo: Repo) -> dict[str, Any]:
    symref, head = repo.head()
    return {
        "v": API_VERSION,
        "store": str(repo.store_dir),
        "head": head,
        "branch": repo.current_branch(),
        "branches": repo.branches(),
        "tags": repo.tags(),
    }


def _index_source(repo: Repo, cursor: int) -> Iterator[tuple[int, str, str]]:
    """``(position, id, agent)`` from the snapshot index, newest first, fetched a batch at a time."""
    pos = cursor
    while True:
        rows = repo.refs.list_snapshots(_BATCH, pos)
        for row in rows:
            pos += 1
            yield pos, row.id, row.agent
        if len(rows) < _BATCH:
            return


def _branch_source(repo: Repo, branch: str, cursor: int) -> Iterator[tuple[int, Snapshot]]:
    tip = repo.refs.get_ref(f"refs/heads/{check_ref_name(branch)}")
    if tip is None:
        raise UnknownSnapshot(branch)
    for pos, s in enumerate(repo.walk([tip]), start=1):
        if pos > cursor:
            yield pos, s


def _keep(m: dict[str, Any], agent: str, thread: str, undo: bool) -> bool:
    if agent and m.get("agent") != agent:
        return False
    if thread and _thread(m) != thread:
        return False
    meta = m.get("meta")
    return undo or not (isinstance(meta, dict) and "undo_of" in meta)


def graph(
    repo: Repo,
    *,
    limit: int | None = None,
    cursor: int = 0,
    agent: str = "",
    branch: str = "",
    thread: str = "",
    undo: bool = False,
) -> dict[str, Any]:
    """One page of the DAG, newest first: at most ``limit`` nodes and a ``next`` cursor (None at the end).

    Without a branch the page comes from the snapshot index (``list_snapshots(limit, offset)``); with one,
    from a walk of that branch's history. Filters look at no more than :data:`SCAN_LIMIT` snapshots per page.
    The undo snapshots ``restore`` takes (``meta.undo_of``) are left out unless ``undo`` is true.
    """
    limit = page_args(limit)
    if cursor < 0:
        raise InvalidInput("cursor must be >= 0")
    labels = ref_labels(repo)

    def candidates() -> Iterator[tuple[int, Snapshot | None]]:
        if branch:
            yield from _branch_source(repo, branch, cursor)
            return
        for position, oid, row_agent in _index_source(repo, cursor):
            # the index knows the agent: a row of another agent is skipped without reading its manifest
            yield position, (repo.get(oid) if not agent or row_agent == agent else None)

    nodes: list[dict[str, Any]] = []
    scanned = 0
    pos = cursor
    done = True
    for position, s in candidates():
        pos = position
        scanned += 1
        if s is not None and _keep(s.manifest, agent, thread, undo):
            nodes.append(node(s, labels))
        if len(nodes) >= limit or scanned >= SCAN_LIMIT:
            done = False
            break
    if not done:  # is there anything after this page? one more row says so
        rest = _branch_source(repo, branch, pos) if branch else _index_source(repo, pos)
        done = next(rest, None) is None
    return {"v": API_VERSION, "nodes": nodes, "next": None if done else pos, "scanned": scanned}


def detail(repo: Repo, spec: str) -> dict[str, Any]:
    """One snapshot: its node, manifest layer records and meta."""
    s = snapshot(repo, spec)
    out = node(s, ref_labels(repo))
    out["v"] = API_VERSION
    out["meta"] = jsonable(s.manifest.get("meta", {}))
    out["layer_records"] = jsonable(s.layers)
    return out


def layer(repo: Repo, spec: str, name: str, *, offset: int = 0, limit: int | None = None) -> dict[str, Any]:
    """The content of one layer of a snapshot; world entries and trace messages come a page at a time."""
    s = snapshot(repo, spec)
    name = layer_name(name)
    if name not in s.layers and not (name == "env" and "world" in s.layers):
        raise UnknownSnapshot(f"{s.id[:12]}:{name}")
    limit = page_args(limit, MAX_PAGE)
    if offset < 0:
        raise InvalidInput("offset must be >= 0")
    out: dict[str, Any] = {"v": API_VERSION, "id": s.id, "layer": name}
    if name == "world":
        entries = repo.world_entries(s)
        out["kind"] = "files"
        out["total"] = len(entries)
        out["items"] = [
            {"path": p, "kind": k, "mode": f"{mode:o}", "size": size, "target": ref if k == "l" else None}
            for p, k, mode, size, ref in entries[offset : offset + limit]
        ]
    elif name == "env":
        out["kind"] = "value"
        out["value"] = jsonable(_env(repo.objects, s.layers["world"]))
    elif name == "trace":
        msgs = repo.read_layer(s, "trace") or []
        out["kind"] = "messages"
        out["total"] = len(msgs)
        out["items"] = jsonable(msgs[offset : offset + limit])
    elif name == "effects":
        out["kind"] = "effects"
        out["items"] = effects_at(repo, s)
    else:
        out["kind"] = "value"
        out["value"] = jsonable(repo.read_layer(s, name))
    if "total" in out:
        out["offset"] = offset
        out["next"] = offset + limit if offset + limit < out["total"] else None
    return out


# ---------------------------------------------------------------------------------------------- effects
def _ledger(repo: Repo) -> Any:
    try:
        from agentsnap_core.layers.effects_ledger import Ledger
    except ImportError:  # pragma: no cover - the effects module is part of core today
        return None
    led = Ledger.for_repo(repo)
    return led.sync() if led.store.count() else None


def _effects_count(s: Snapshot) -> int:
    rec = s.layers.get("effects")
    return int(rec["count"]) if isinstance(rec, dict) and isinstance(rec.get("count"), int) else 0


def effects_at(repo: Repo, s: Snapshot) -> list[dict[str, Any]]:
    """The effects ledger as the snapshot saw it: one row per effect, with its status then."""
    led = _ledger(repo)
    if led is None:
        return []
    return [jsonable(r) for r in led.rows(_effects_count(s))]


def _effects_diff(repo: Repo, a: Snapshot, b: Snapshot) -> dict[str, Any] | None:
    led = _ledger(repo)
    if led is None or ("effects" not in a.layers and "effects" not in b.layers):
        return None
    rows_a = {r["key"]: r for r in led.rows(_effects_count(a))}
    rows_b = {r["key"]: r for r in led.rows(_effects_count(b))}
    now = {r["key"]: r for r in led.rows()}
    keys = sorted(rows_a.keys() | rows_b.keys(), key=lambda k: (rows_a.get(k) or rows_b[k])["index"])
    items = []
    for k in keys:
        r = rows_a.get(k) or rows_b[k]
        items.append(
            {
                "key": k,
                "tool": r.get("tool"),
                "class": r.get("class"),
                "a": rows_a[k]["status"] if k in rows_a else None,
                "b": rows_b[k]["status"] if k in rows_b else None,
                "now": now[k]["status"] if k in now else None,
            }
        )
    return {"kind": "effects", "count_a": _effects_count(a), "count_b": _effects_count(b), "items": jsonable(items)}


# ---------------------------------------------------------------------------------------------- diff
def _mapping_diff(va: Any, vb: Any) -> dict[str, Any]:
    if not isinstance(va, dict) or not isinstance(vb, dict):
        return {"kind": "value", "equal": va == vb, "a": jsonable(va), "b": jsonable(vb)}
    added = sorted(vb.keys() - va.keys(), key=str)
    removed = sorted(va.keys() - vb.keys(), key=str)
    changed = sorted((k for k in va.keys() & vb.keys() if va[k] != vb[k]), key=str)
    rows = [{"key": str(k), "op": "added", "b": jsonable(vb[k])} for k in added]
    rows += [{"key": str(k), "op": "removed", "a": jsonable(va[k])} for k in removed]
    rows += [{"key": str(k), "op": "changed", "a": jsonable(va[k]), "b": jsonable(vb[k])} for k in changed]
    rows.sort(key=lambda r: r["key"])
    return {"kind": "keys", "rows": rows[:MAX_ITEMS], "unchanged": len(va.keys() & vb.keys()) - len(changed)}


def _world_diff(repo: Repo, a: Snapshot, b: Snapshot) -> dict[str, Any]:
    """Changed paths of the two trees, and unified patches for the first :data:`MAX_PATCHES` of them only."""
    wa, wb = repo.world_entries(a), repo.world_entries(b)
    changes = diff_worlds(repo, a.id, wa, b.id, wb, patches=False)
    ai, bi = {e[0]: e for e in wa}, {e[0]: e for e in wb}
    changed = sorted(changes["added"] + changes["modified"] + changes["deleted"])
    patches: dict[str, str] = {}
    total = 0
    for path in changed[:MAX_PATCHES]:
        if path.endswith("/"):  # a directory (world.compare): no content to show
            continue
        if total >= MAX_PATCH_CHARS:
            patches[path] = "(not shown: the diff is too large for one page)\n"
            continue
        text = unified(path, _file_bytes(repo, a.id, ai.get(path)), _file_bytes(repo, b.id, bi.get(path)))
        if total + len(text) > MAX_PATCH_CHARS:
            text = f"(patch of {len(text)} characters not shown)\n"
        total += len(text)
        patches[path] = text
    return {
        "kind": "files",
        **{k: changes.get(k, []) for k in ("added", "modified", "deleted", "mode")},
        "patches": patches,
        "truncated": len(changed) > len(patches),
    }


def diff(repo: Repo, a_spec: str, b_spec: str) -> dict[str, Any]:
    """Per-layer differences of two snapshots: files (unified patches), trace timeline, key diffs, effects."""
    a, b = snapshot(repo, a_spec), snapshot(repo, b_spec)
    labels = ref_labels(repo)
    layers: dict[str, Any] = {}
    bare = [x.id[:12] for x in (a, b) if "world" not in x.layers]
    if len(bare) == 1:  # saved without the working tree: no files, which is not an empty tree (never "all deleted")
        layers["world"] = {"kind": "note", "text": f"files not compared: snapshot {bare[0]} holds none (saved "
                                                   "without the working tree)"}
    elif not bare:
        layers["world"] = _world_diff(repo, a, b)
        env_a, env_b = _env(repo.objects, a.layers.get("world")), _env(repo.objects, b.layers.get("world"))
        layers["env"] = {"kind": "names", **diff_mapping(env_a, env_b)}
    if "trace" in a.layers or "trace" in b.layers:
        ta = repo.read_layer(a, "trace") or []
        t = diff_trace(ta, repo.read_layer(b, "trace") or [])
        common = t["common"]
        layers["trace"] = {
            "kind": "timeline",
            "common": common,
            "context": jsonable(ta[max(0, common - 3) : common]),
            "context_start": max(0, common - 3),
            "only_a": jsonable(t["only_a"]),
            "only_b": jsonable(t["only_b"]),
        }
    for name in sorted((set(a.layers) | set(b.layers)) - {"world", "trace", "effects"}):
        layers[name] = _mapping_diff(repo.read_layer(a, name), repo.read_layer(b, name))
    fx = _effects_diff(repo, a, b)
    if fx is not None:
        layers["effects"] = fx
    return {"v": API_VERSION, "a": node(a, labels), "b": node(b, labels), "layers": layers}
