"""Per-layer differences between snapshots (or a snapshot and the working tree)."""

from __future__ import annotations

import difflib
from typing import TYPE_CHECKING, Any

from agentsnap_core.errors import InvalidInput, ObjectCorrupt
from agentsnap_core.format import content
from agentsnap_core.layers import world
from agentsnap_core.stores.base import ObjectStore

if TYPE_CHECKING:
    from agentsnap_core.repository.repo import Repo

WORKING = "WORKING"
MAX_TEXT_DIFF = 2 * 1024 * 1024


def _file_bytes(repo: Repo, side: str, entry: world.Entry | None) -> bytes | None:
    if entry is None or entry[1] == "d":
        return None
    if entry[1] == "l":
        return f"-> {entry[4]}\n".encode()
    if side == WORKING:
        try:
            with open(repo.root / entry[0], "rb") as f:
                return f.read(MAX_TEXT_DIFF + 1)
        except OSError:
            return None
    return content.get_bytes(repo.objects, entry[4], limit=1 << 34)[: MAX_TEXT_DIFF + 1]


def is_binary(data: bytes) -> bool:
    return b"\x00" in data[:8192]


def unified(path: str, a: bytes | None, b: bytes | None) -> str:
    if (a is not None and is_binary(a)) or (b is not None and is_binary(b)):
        return f"Binary files {world.shown_path('a/' + path)} and {world.shown_path('b/' + path)} differ\n"
    at = (a or b"").decode("utf-8", "replace").splitlines(keepends=True)
    bt = (b or b"").decode("utf-8", "replace").splitlines(keepends=True)
    lines = difflib.unified_diff(
        at, bt, fromfile="/dev/null" if a is None else world.shown_path(f"a/{path}"),
        tofile="/dev/null" if b is None else world.shown_path(f"b/{path}"),
    )
    return "".join(x if x.endswith("\n") else x + "\n\\ No newline at end of file\n" for x in lines)


def diff_worlds(repo: Repo, a_side: str, a: list[world.Entry], b_side: str, b: list[world.Entry], patches: bool = True) -> dict[str, Any]:
    ch = world.compare(a, b)
    out: dict[str, Any] = ch.as_dict()
    if patches:
        ai = {e[0]: e for e in a}
        bi = {e[0]: e for e in b}
        out["patches"] = {
            p: unified(p, _file_bytes(repo, a_side, ai.get(p)), _file_bytes(repo, b_side, bi.get(p)))
            for p in ch.added + ch.modified + ch.deleted
            if not p.endswith("/")  # a directory (world.compare): no content
        }
    return out


def diff_trace(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> dict[str, Any]:
    common = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        common += 1
    return {"common": common, "only_a": a[common:], "only_b": b[common:]}


def diff_mapping(a: Any, b: Any) -> dict[str, Any]:
    if not isinstance(a, dict) or not isinstance(b, dict):
        return {"changed": a != b}
    return {
        "added": sorted(str(k) for k in b.keys() - a.keys()),
        "removed": sorted(str(k) for k in a.keys() - b.keys()),
        "changed": sorted(str(k) for k in a.keys() & b.keys() if a[k] != b[k]),
    }


def diff_snapshots(repo: Repo, a: str | None, b: str | None, layer: str | None = None,
                   paths: list[str] | None = None) -> dict[str, Any]:
    """``b`` None: the working tree and trace, against which only those two layers compare (the others a snapshot
    holds are listed in ``not_compared``). ``paths`` (tree-relative): only the files at or below them, and only the world layer (paths name files); a
    path that is in neither side is refused as a typo, never answered with an empty diff."""
    if paths and layer not in (None, "world"):
        raise InvalidInput(f"paths name files: they go with the world layer, not --layer {layer}")
    if paths:
        layer = "world"
    a_id = repo.resolve(a)
    b_id = repo.resolve(b) if b is not None else WORKING
    a_snap = repo.get(a_id)
    b_snap = repo.get(b_id) if b_id != WORKING else None
    out: dict[str, Any] = {"a": a_id, "b": b_id, "layers": {}}
    present = set(a_snap.layers) | (set(b_snap.layers) if b_snap else {"world", "trace"})
    if layer and layer not in present | ({"env"} if "world" in present else set()):
        raise InvalidInput(f"no layer {layer!r} in either side; the layers here are: {', '.join(sorted(present))}")
    layers = {layer} if layer else present
    bare = [snap.id for snap in (a_snap, b_snap) if snap is not None and "world" not in snap.layers]
    if "world" in layers and bare:  # saved without the working tree (the Python API, an adapter): no files to compare,
        if paths:  # never "every file added" (or deleted)
            raise InvalidInput(f"snapshot {bare[0][:12]} holds no files (saved without the working tree): there is "
                               "nothing to compare those paths with")
        layers = layers - {"world"}
        out["not_compared"] = ["world"]
        out["no_files"] = bare
    if "world" in layers:
        wa = repo.world_entries(a_snap)
        wb = repo.working_entries() if b_snap is None else repo.world_entries(b_snap)
        if paths:
            def under(e: world.Entry) -> bool:
                return any(e[0] == p or e[0].startswith(p + "/") for p in paths)

            wa, wb = [e for e in wa if under(e)], [e for e in wb if under(e)]
            held = {e[0] for e in wa} | {e[0] for e in wb}
            for p in paths:
                if p not in held and not any(h.startswith(p + "/") for h in held):
                    side = "the working tree" if b_snap is None else b_id[:12]
                    raise InvalidInput(f"{p!r} is neither a snapshot, branch or tag ('agentsnap log --all') nor a path "
                                       f"in {a_id[:12]} or {side}")
        out["layers"]["world"] = diff_worlds(repo, a_id, wa, b_id, wb)
    if b_snap is not None and layers & {"world", "env"}:
        out["layers"]["env"] = diff_mapping(_env(repo.objects, a_snap.layers.get("world")), _env(repo.objects, b_snap.layers.get("world")))
    if "trace" in layers:
        ta = read_trace(repo, a_snap)
        tb = repo.messages() if b_snap is None else read_trace(repo, b_snap)
        out["layers"]["trace"] = diff_trace(ta, tb)
    for name in sorted(layers - {"world", "trace", "env"}):
        if b_snap is None:  # an adapter's (or the effects ledger's) state, captured when a snapshot is taken: there
            out.setdefault("not_compared", []).append(name)  # is no working side to read, never "changed" for it
            continue
        out["layers"][name] = diff_mapping(repo.read_layer(a_snap, name), repo.read_layer(b_snap, name))
    return out


def read_trace(repo: Repo, snap: Any) -> list[dict[str, Any]]:
    """A snapshot's trace layer, checked to be a list of messages (a forged or damaged one is refused in one line)."""
    value = repo.read_layer(snap, "trace") or []
    if not isinstance(value, list) or not all(isinstance(m, dict) for m in value):
        raise ObjectCorrupt(repo.get(snap).id if isinstance(snap, str) else snap.id, "trace layer", "not a list of messages")
    return value


def _env(store: ObjectStore, rec: dict[str, Any] | None) -> dict[str, str]:
    if not rec or not rec.get("env"):
        return {}
    value = content.get_value(store, rec["env"], "environment")
    return value if isinstance(value, dict) else {}
