"""Three-way merge of the ``world`` layer (a flat tree of files, symlinks and directories).

Text files merge line by line with ``merge3`` and git-style markers; binary files and symlinks
merge whole (a conflict keeps both versions as ``PATH~ours`` and ``PATH~theirs``, never a
placeholder). Mode, add/add, modify/delete, file/directory and rename/rename conflicts are
reported by path. A file one side renamed without changing it (identical content) is followed:
the other side's edits land at the new path.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import merge3

from agentsnap_core.format import content
from agentsnap_core.layers import world
from agentsnap_core.repository.diffing import is_binary
from agentsnap_core.stores.base import ObjectStore

#: text files larger than this merge whole, like binary files
MAX_TEXT_MERGE = 16 * 1024 * 1024
START, MID, END = b"<<<<<<<", b"=======", b">>>>>>>"
SIDES = ("ours", "theirs")

Meta = tuple[str, int, str]  # kind, mode, ref  (size follows ref)


@dataclass
class WorldMerge:
    """The merged tree plus what happened on the way."""

    entries: list[world.Entry]
    conflicts: list[dict[str, Any]] = field(default_factory=list)
    resolved: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: side files written for conflicts (``PATH~ours`` ...): they must be gone before ``--continue``
    side_files: list[str] = field(default_factory=list)
    #: text files written with conflict markers
    marked: list[str] = field(default_factory=list)
    #: per marked file, the marker lines its three versions already held (a document about git's conflicts)
    marker_floor: dict[str, int] = field(default_factory=dict)


def merge_text(
    base: bytes, ours: bytes, theirs: bytes, labels: tuple[str, str] = SIDES, take: str | None = None
) -> tuple[bytes, int]:
    """Merge three versions of a text line by line; return ``(merged bytes, conflicting hunks)``.

    Conflicting hunks are written between git-style markers, or resolved to one side when
    ``take`` is ``"ours"`` / ``"theirs"`` (then the hunk count is still returned).
    """
    b, o, t = base.splitlines(keepends=True), ours.splitlines(keepends=True), theirs.splitlines(keepends=True)
    out: list[bytes] = []
    hunks = 0
    for group in merge3.Merge3(b, o, t).merge_groups():
        if group[0] != "conflict":
            out.extend(group[1])
            continue
        _, _gb, go, gt = group
        hunks += 1
        if take == "ours":
            out.extend(go)
        elif take == "theirs":
            out.extend(gt)
        else:
            out.append(START + b" " + labels[0].encode() + b"\n")
            out.extend(_terminated(go))
            out.append(MID + b"\n")
            out.extend(_terminated(gt))
            out.append(END + b" " + labels[1].encode() + b"\n")
    return b"".join(out), hunks


def _terminated(lines: Sequence[bytes]) -> list[bytes]:
    out = list(lines)
    if out and not out[-1].endswith((b"\n", b"\r")):
        out[-1] = out[-1] + b"\n"
    return out


def marker_lines(data: bytes) -> int:
    """How many ``<<<<<<< LABEL`` / ``>>>>>>> LABEL`` lines ``data`` holds.

    A bare ``=======`` line is not counted: it is also a Markdown or reStructuredText heading's underline (a
    seven-letter heading: License, Install, Example), which a resolved file keeps; the lines that open and close
    a conflict are what a merge leaves unresolved."""
    return sum(1 for line in data.splitlines() if line.startswith((START + b" ", END + b" ")))


def merge_worlds(
    store: ObjectStore,
    base: list[world.Entry],
    ours: list[world.Entry],
    theirs: list[world.Entry],
    *,
    labels: tuple[str, str] = SIDES,
    strategy: str = "auto",
    read: Callable[[str], bytes] | None = None,
) -> WorldMerge:
    """Merge three trees; new blobs (merged text) are written to ``store``.

    Args:
        store: where merged file contents are put.
        base, ours, theirs: the trees of the common ancestor and the two sides.
        labels: marker labels for ours and theirs.
        strategy: ``auto`` reports conflicts; ``ours`` / ``theirs`` resolves each conflict to that side.
        read: reads a content id (defaults to the store).
    """
    take = None if strategy == "auto" else strategy
    reader = read or (lambda oid: content.get_bytes(store, oid))
    sizes: dict[str, int] = {}
    files = [_split(t, sizes) for t in (base, ours, theirs)]
    dirs = [{e[0]: e[2] for e in t if e[1] == "d"} for t in (base, ours, theirs)]
    res = WorldMerge(entries=[])
    _follow_renames(files, res, take)
    fb, fo, ft = files
    merged: dict[str, Meta] = {}
    whole: list[tuple[str, Meta, Meta]] = []
    for path in sorted(set(fb) | set(fo) | set(ft)):
        got = _merge_path(store, path, fb.get(path), fo.get(path), ft.get(path), labels, take, reader, res, sizes)
        if isinstance(got, _KeepBoth):
            whole.append((path, got.ours, got.theirs))
        elif got is not None:
            merged[path] = got
    # directories: three-way on (present, mode), plus every parent of a merged entry
    merged_dirs: dict[str, int] = {}
    db, do, dt = dirs
    for path in sorted(set(db) | set(do) | set(dt)):
        mode = _three(db.get(path), do.get(path), dt.get(path))
        if mode is _CONFLICT:
            o_mode, t_mode = do.get(path), dt.get(path)
            if o_mode is not None and t_mode is not None:
                _report(res, take, {"kind": "mode", "path": path, "message": f"directory mode {o_mode:o} on ours, {t_mode:o} on theirs"})
                mode = t_mode if take == "theirs" else o_mode
            else:  # removed on one side, mode changed on the other: the changed directory is kept
                mode = o_mode if o_mode is not None else t_mode
        if mode is not None:
            merged_dirs[path] = int(mode)  # type: ignore[call-overload]
    _side_files(merged, merged_dirs, whole, res)
    _file_directory(merged, merged_dirs, fo, take, res)
    for path in list(merged):
        for parent in _parents(path):
            if parent not in merged_dirs:
                merged_dirs[parent] = do.get(parent) or dt.get(parent) or db.get(parent) or 0o755
    out: list[world.Entry] = [(p, "d", m, 0, "") for p, m in merged_dirs.items()]
    for p, (kind, mode, ref) in merged.items():
        size = _size_of(store, ref, sizes) if kind == "f" else 0
        out.append((p, kind, mode, size, ref))
    out.sort(key=lambda e: e[0])
    world.validate_entries(out)
    res.entries = out
    return res


# ------------------------------------------------------------------ helpers

_CONFLICT = object()


@dataclass(frozen=True)
class _KeepBoth:
    """A whole-file conflict: both versions are kept as side files."""

    ours: Meta
    theirs: Meta


def _split(entries: list[world.Entry], sizes: dict[str, int]) -> dict[str, Meta]:
    out: dict[str, Meta] = {}
    for path, kind, mode, size, ref in entries:
        if kind != "d":
            out[path] = (kind, mode, ref)
            if kind == "f":
                sizes[ref] = size
    return out


def _size_of(store: ObjectStore, ref: str, sizes: dict[str, int]) -> int:
    if ref not in sizes:
        sizes[ref] = len(content.get_bytes(store, ref))
    return sizes[ref]


def _three(b: Any, o: Any, t: Any) -> Any:
    """Plain three-way choice: the changed side, the common value, or ``_CONFLICT``."""
    if o == t:
        return o
    if o == b:
        return t
    if t == b:
        return o
    return _CONFLICT


def _report(res: WorldMerge, take: str | None, conflict: dict[str, Any]) -> None:
    conflict = {"layer": "world", **conflict}
    if take:
        res.resolved.append({**conflict, "resolved": take})
    else:
        res.conflicts.append(conflict)


def _parents(path: str) -> list[str]:
    parts = path.split("/")
    return ["/".join(parts[:i]) for i in range(1, len(parts))]


def _side_path(path: str, side: str, taken: set[str]) -> str:
    cand = f"{path}~{side}"
    n = 2
    while cand in taken or any(t.startswith(cand + "/") for t in taken):
        cand = f"{path}~{side}_{n}"
        n += 1
    taken.add(cand)
    return cand


def _follow_renames(files: list[dict[str, Meta]], res: WorldMerge, take: str | None) -> None:
    """Detect identical-content renames on each side and re-key the other side to follow them."""
    fb, fo, ft = files
    renames: list[dict[str, str]] = []
    for side in (fo, ft):
        added: dict[tuple[str, str], list[str]] = {}
        for p, (kind, _m, ref) in side.items():
            if p not in fb:
                added.setdefault((kind, ref), []).append(p)
        gone: dict[tuple[str, str], list[str]] = {}
        for p, (kind, _m, ref) in fb.items():
            if p not in side:
                gone.setdefault((kind, ref), []).append(p)
        found = {}
        for key, olds in gone.items():
            news = added.get(key, [])
            if len(olds) == 1 and len(news) == 1:
                found[olds[0]] = news[0]
        renames.append(found)
    ren_o, ren_t = renames
    for old in sorted(set(ren_o) | set(ren_t)):
        qo, qt = ren_o.get(old), ren_t.get(old)
        if qo and qt:
            if qo != qt:
                conflict = {
                    "kind": "rename/rename",
                    "path": old,
                    "paths": [old, qo, qt],
                    "message": f"renamed to {qo!r} on ours and to {qt!r} on theirs",
                }
                _report(res, take, conflict)
                if take == "ours":
                    ft.pop(qt, None)
                elif take == "theirs":
                    fo.pop(qo, None)
            continue
        new, mover, other = (qo, fo, ft) if qo else (qt, ft, fo)
        assert new is not None
        if old in other and new not in other and new not in fb:
            other[new] = other.pop(old)
            fb[new] = fb.pop(old)
            res.notes.append(f"followed rename {old} -> {new} ({'ours' if mover is fo else 'theirs'})")


def _merge_path(
    store: ObjectStore,
    path: str,
    b: Meta | None,
    o: Meta | None,
    t: Meta | None,
    labels: tuple[str, str],
    take: str | None,
    read: Callable[[str], bytes],
    res: WorldMerge,
    sizes: dict[str, int],
) -> Meta | _KeepBoth | None:
    """The merged entry of one path: a Meta, None (absent), or :class:`_KeepBoth`."""
    if o == t:
        return o
    if o == b:
        return t
    if t == b:
        return o
    if o is None or t is None:  # modify/delete
        by = "ours" if o is None else "theirs"
        _report(res, take, {"kind": "modify/delete", "path": path, "deleted_by": by,
                            "message": f"deleted on {by}, changed on the other side (the changed file is kept)"})
        return None if take == by else (o or t)
    # both present, both changed: content and mode merge separately
    mode = _three(b[1] if b else None, o[1], t[1])
    if mode is _CONFLICT or mode is None:
        if mode is _CONFLICT:
            _report(res, take, {"kind": "mode", "path": path, "message": f"mode {o[1]:o} on ours, {t[1]:o} on theirs"})
        mode = t[1] if take == "theirs" else o[1]
    ck = _three((b[0], b[2]) if b else None, (o[0], o[2]), (t[0], t[2]))
    if ck is not _CONFLICT:
        return (ck[0], int(mode), ck[1])  # type: ignore[index, call-overload]
    kind = "add/add" if b is None else "content"
    if o[0] == "f" and t[0] == "f" and (b is None or b[0] == "f"):
        data = [read(b[2]) if b else b"", read(o[2]), read(t[2])]
        if all(len(d) <= MAX_TEXT_MERGE and not is_binary(d) for d in data):
            merged, hunks = merge_text(data[0], data[1], data[2], labels, take)
            ref = content.put_bytes(store, merged)
            sizes[ref] = len(merged)
            if hunks:
                _report(res, take, {"kind": kind, "path": path, "hunks": hunks,
                                    "message": f"{hunks} conflicting hunk(s) marked with <<<<<<< ======= >>>>>>>"})
                if not take:
                    res.marked.append(path)
                    res.marker_floor[path] = max(marker_lines(d) for d in data)
            return ("f", int(mode), ref)  # type: ignore[call-overload]
        kind = "binary" if b is not None else "add/add (binary)"
    elif o[0] != t[0]:
        kind = "type"
    elif o[0] == "l":
        kind = "symlink" if b is not None else "add/add (symlink)"
    conflict = {"kind": kind, "path": path, "message": "both sides changed the whole file"}
    if take:
        _report(res, take, conflict)
        chosen = o if take == "ours" else t
        return (chosen[0], int(mode), chosen[2])  # type: ignore[call-overload]
    res.conflicts.append({"layer": "world", **conflict})
    return _KeepBoth(o, t)


def _side_files(
    merged: dict[str, Meta], merged_dirs: dict[str, int], whole: list[tuple[str, Meta, Meta]], res: WorldMerge
) -> None:
    """Keep both versions of each whole-file conflict as ``PATH~ours`` / ``PATH~theirs``."""
    if not whole:
        return
    taken = set(merged) | set(merged_dirs)
    by_path = {c["path"]: c for c in res.conflicts if c.get("layer") == "world"}
    for path, o, t in whole:
        files = []
        for side, meta in (("ours", o), ("theirs", t)):
            sp = _side_path(path, side, taken)
            merged[sp] = meta
            res.side_files.append(sp)
            files.append(sp)
        c = by_path[path]
        c["files"] = files
        c["message"] = f"both sides changed it: both versions kept as {files[0]} and {files[1]}; keep one as {path}"


def _file_directory(
    merged: dict[str, Meta], merged_dirs: dict[str, int], fo: dict[str, Meta], take: str | None, res: WorldMerge
) -> None:
    """Settle a file at P while a directory (or anything below P/) exists on the other side."""
    under: set[str] = set(merged_dirs)
    for p in merged:
        under.update(_parents(p))
    clashes = sorted(p for p in merged if p in under)
    taken = set(merged) | set(merged_dirs)
    for p in clashes:
        side = "ours" if fo.get(p) == merged[p] else "theirs"
        conflict: dict[str, Any] = {"kind": "file/directory", "path": p, "message": f"a file on {side}, a directory on the other side"}
        if take:
            _report(res, take, conflict)
            if take == side:
                for q in [q for q in merged if q.startswith(p + "/")]:
                    merged.pop(q)
                for q in [q for q in merged_dirs if q == p or q.startswith(p + "/")]:
                    merged_dirs.pop(q)
            else:
                merged.pop(p)
            continue
        sp = _side_path(p, side, taken)
        merged[sp] = merged.pop(p)
        res.side_files.append(sp)
        conflict["files"] = [sp]
        conflict["message"] = f"a directory on one side, a file on {side}: the file is kept as {sp}"
        _report(res, None, conflict)


def common_dir(paths: list[str]) -> str:
    """The deepest directory holding every path (for messages)."""
    return posixpath.commonpath(paths) if paths else ""
