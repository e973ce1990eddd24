"""verify and gc: walk everything reachable from refs, reflog and HEADs."""

from __future__ import annotations

import math
import os
import time
from typing import TYPE_CHECKING, Any

from agentsnap_core.errors import AgentSnapError, InvalidInput
from agentsnap_core.format import content
from agentsnap_core.format.objects import Kind, is_oid, unpack_chunk_list
from agentsnap_core.layers import world
from agentsnap_core.repository import writers
from agentsnap_core.repository.retention import TOMBSTONES, Graveyard, bury

if TYPE_CHECKING:
    from agentsnap_core.repository.repo import Repo


def roots(repo: Repo) -> dict[str, str]:
    """Every id a ref, a HEAD or a reflog entry names, with where it was found."""
    out: dict[str, str] = {}
    for name, oid in repo.refs.list_refs().items():
        if not name.startswith(TOMBSTONES):  # marks of dead snapshots keep nothing alive
            out.setdefault(oid, name)
    for wt, (_sym, oid) in repo.refs.list_heads().items():
        if oid:
            out.setdefault(oid, f"HEAD of worktree {wt}")
    for e in repo.refs.reflog():
        for oid in (e.old, e.new):
            if oid and not e.name.startswith(TOMBSTONES):
                out.setdefault(oid, f"reflog #{e.seq} of {e.name}")
    return out


def _content_ids(repo: Repo, oid: str) -> list[str]:
    return _content(repo, oid)[0]


def _content(repo: Repo, oid: str) -> tuple[list[str], int]:
    """The object ids a content id depends on, and the size of the content they hold."""
    kind, raw = repo.objects.get(oid)
    if kind == Kind.CHUNKS:
        chunks = unpack_chunk_list(oid, raw)
        return [oid] + [c for c, _ in chunks], sum(n for _, n in chunks)
    if kind != Kind.BLOB:
        raise AgentSnapError(f"object {oid[:12]} should be content but is kind {kind}")
    return [oid], len(raw)


def reachable(repo: Repo, problems: list[dict[str, Any]] | None = None, now: float | None = None,
              grave: Graveyard | None = None) -> set[str]:
    """Ids of all objects reachable from the roots; problems found on the way are appended.

    Expired, pruned and deleted snapshots (:mod:`agentsnap_core.repository.retention`) are tombstones: kept as a manifest
    when a ref or a live child reaches them, their layers not reached through them.
    """
    problems = problems if problems is not None else []
    seen: set[str] = set()
    sizes: dict[str, int] = {}  # content id of a world file -> bytes it holds
    grave = Graveyard(repo, now) if grave is None else grave
    stack = [(oid, where) for oid, where in roots(repo).items() if not grave.skip_root(oid, where)]
    manifests_seen: set[str] = set()
    while stack:
        oid, where = stack.pop()
        if oid in manifests_seen:
            continue
        manifests_seen.add(oid)
        try:
            m = repo.manifest(oid)
        except AgentSnapError as exc:
            named = "" if where.startswith("parent of ") else f" (named by {where})"  # which ref to mend or delete
            if where.startswith("reflog") and not repo.objects.has(oid):  # (was: no way to let it go)
                named += "; 'agentsnap expire --reflog' forgets snapshots that are gone"
            problems.append({"kind": "snapshot", "id": oid, "where": where, "error": f"{exc}{named}"})
            continue
        seen.add(oid)
        for p in m["parents"]:
            stack.append((p, f"parent of {oid[:12]}"))
        if grave.is_dead(oid, m):
            continue
        for name, rec in m["layers"].items():
            try:
                ids = [rec[k] for k in ("tree", "env", "content") if is_oid(rec.get(k))]
                ids += [r for r in rec.get("refs", []) if is_oid(r)]
                for cid in ids:
                    if cid in seen:
                        continue
                    seen.update(_content_ids(repo, cid))
                if name == "world" and is_oid(rec.get("tree")):
                    for path, kind, _m, size, ref in world.load_tree(repo.objects, rec["tree"]):
                        if kind != "f":
                            continue
                        if ref not in sizes:
                            ids, sizes[ref] = _content(repo, ref)
                            seen.update(ids)
                        if sizes[ref] != size:  # restore would refuse this file
                            problems.append({"kind": "layer", "id": oid, "layer": name, "path": path,
                                             "error": f"file {path!r}: size differs, tree says {size} bytes, "
                                                      f"content {ref[:12]} holds {sizes[ref]}"})
            except AgentSnapError as exc:
                problems.append({"kind": "layer", "id": oid, "layer": name, "error": str(exc)})
    from agentsnap_core.layers.effects_ledger import (
        Ledger,  # large effect results live in the object store: the ledger is a root
    )

    try:
        for cid in Ledger.for_repo(repo).sync().blob_ids():
            if cid not in seen:
                seen.update(_content_ids(repo, cid))
    except AgentSnapError as exc:
        problems.append({"kind": "effects", "id": None, "error": str(exc)})
    return seen


def verify(repo: Repo, now: float | None = None) -> dict[str, Any]:
    """Re-hash every object and check that refs, parents and layers resolve."""
    problems: list[dict[str, Any]] = []
    checked = 0
    for oid in repo.objects.iter_oids():  # a packed object is read (and re-hashed) from its pack
        checked += 1
        try:
            repo.objects.get(oid)
        except AgentSnapError as exc:
            problems.append({"kind": "object", "id": oid, "error": str(exc)})
    verify_packs = getattr(repo.objects, "verify_packs", None)
    if verify_packs is not None:  # pack structure, and packed copies shadowed by another copy
        problems += verify_packs()[1]
    live = reachable(repo, problems, now=now)
    return {
        "ok": not problems,
        "objects": checked,
        "reachable": len(live),
        "refs": len(repo.refs.list_refs()),
        "temp_files": len(repo.objects.temp_files()),
        "foreign_files": foreign_files(repo),
        "problems": problems,
    }


def foreign_files(repo: Repo) -> list[str]:
    """Files in the store's object directories that are not objects (left alone by every verb, named by verify/gc)."""
    find = getattr(repo.objects, "foreign_files", None)
    return find() if find is not None else []


#: ``agentsnap expire --reflog`` drops reflog entries older than this by default (90 days, as git's reflog expiry)
REFLOG_AGE = 90 * 86400.0


def expire_reflog(repo: Repo, older_than: float = REFLOG_AGE, *, dry_run: bool = False,
                  now: float | None = None) -> dict[str, Any]:
    """Drop reflog entries older than ``older_than`` seconds, and forget the ids of snapshots that are gone.

    The reflog is a root: a deleted branch's snapshots, an old undo point, a LangGraph thread's abandoned time-travel
    branch, stay until their entries go, and an entry naming a snapshot that no longer exists (lost, or reclaimed
    before gc marked what it reclaims) made every verify fail and every gc refuse, with no way out. Such an id is
    forgotten at any age (the entry stays while it names another snapshot that exists). The live snapshots only the
    dropped entries kept are marked expired first (as ``agentsnap expire`` marks them): ``show`` then says so, and
    indexes that name snapshots (PFSaver's checkpoint index) drop them as after a prune, instead of naming
    snapshots gc reclaims. The marks of expired, pruned and deleted snapshots are kept (they say why).
    Returns ``{"dropped", "stale", "kept", "expired", "dry_run"}``: entries removed, ids forgotten, entries left,
    snapshots marked expired.
    """
    if isinstance(older_than, bool) or not isinstance(older_than, (int, float)) or math.isnan(older_than) \
            or older_than < 0:
        raise InvalidInput(f"the reflog age must be 0 or more seconds, not {older_than!r}")
    edit = getattr(repo.refs, "edit_reflog", None)
    if edit is None:
        raise AgentSnapError("this store keeps its reflog for good: expiring it works on a directory store")
    cutoff = (time.time() if now is None else now) - older_than
    drop: list[int] = []
    clear_old: list[int] = []
    clear_new: list[int] = []
    stale: dict[str, None] = {}
    kept = 0
    exists: dict[str, bool] = {}
    dropped_ids: set[str] = set()
    kept_ids: set[str] = set()

    def gone(oid: str | None) -> bool:
        if not oid:
            return False
        if oid not in exists:
            exists[oid] = is_oid(oid) and repo.objects.has(oid)
        return not exists[oid]

    for e in repo.refs.reflog():
        if e.name.startswith(TOMBSTONES):
            continue
        old_gone, new_gone = gone(e.old), gone(e.new)
        stale.update(dict.fromkeys(o for o, g in ((e.old, old_gone), (e.new, new_gone)) if g and o))
        if e.time <= cutoff or ((old_gone or not e.old) and (new_gone or not e.new)):
            drop.append(e.seq)
            dropped_ids.update(o for o, g in ((e.old, old_gone), (e.new, new_gone)) if o and not g)
            continue
        kept += 1
        kept_ids.update(o for o, g in ((e.old, old_gone), (e.new, new_gone)) if o and not g)
        if old_gone:
            clear_old.append(e.seq)
        if new_gone:
            clear_new.append(e.seq)
    released = sorted(_only_through(repo, dropped_ids, kept_ids, Graveyard(repo, now))) if drop else []
    if not dry_run:
        if released:  # marked before the entries go: a gc in between never reclaims an unmarked snapshot
            bury(repo, released, "expire")
        if drop or clear_old or clear_new:
            edit(drop, clear_old, clear_new)
    return {"dropped": len(drop), "stale": list(stale), "kept": kept, "expired": released, "dry_run": dry_run}


def _only_through(repo: Repo, logged: set[str], keep: set[str], grave: Graveyard) -> set[str]:
    """The live snapshots reached from ``logged`` (reflog ids) and from no other root nor from ``keep``: a walk of
    the manifests' parents."""
    named: set[str] = set()
    stack = [oid for oid, where in roots(repo).items() if not where.startswith("reflog")] + sorted(keep)
    while stack:
        oid = stack.pop()
        if oid in named:
            continue
        named.add(oid)
        try:
            stack.extend(p for p in repo.manifest(oid)["parents"] if isinstance(p, str))
        except AgentSnapError:
            continue
    only: set[str] = set()
    seen: set[str] = set()
    stack = sorted(logged - named)
    while stack:
        oid = stack.pop()
        if oid in named or oid in seen:
            continue
        seen.add(oid)
        try:
            m = repo.manifest(oid)
        except AgentSnapError:
            continue
        if not grave.is_dead(oid, m):
            only.add(oid)
        stack.extend(p for p in m["parents"] if isinstance(p, str))
    return only


def kept_by_reflog(repo: Repo, grave: Graveyard | None = None) -> int:
    """Live snapshots only reflog entries keep (a deleted branch's, old undo points): what ``expire --reflog`` lets
    gc reclaim."""
    logged = {oid for e in repo.refs.reflog() if not e.name.startswith(TOMBSTONES) for oid in (e.old, e.new) if oid}
    return len(_only_through(repo, logged, set(), Graveyard(repo) if grave is None else grave))


def gc(repo: Repo, grace_seconds: float, now: float | None = None) -> dict[str, Any]:
    """Delete objects no root reaches and that are older than the grace period.

    New snapshots write (or re-touch) their objects before any ref names them, so an object
    younger than ``grace_seconds`` is kept even when unreachable: a gc running beside a
    snapshot never deletes what that snapshot is about to reference. "Older" counts up to the moment this gc started,
    or the start of the oldest snapshot still being written on this machine (:mod:`.writers`), whichever is earlier:
    an object written or re-touched after that is kept however long the walk and the sweep take and however short
    the grace period (``--prune now``): the ref naming it may be committed after the walk read the refs.
    """
    if isinstance(grace_seconds, bool) or not isinstance(grace_seconds, (int, float)) or not math.isfinite(grace_seconds) \
            or grace_seconds < 0:  # NaN compares false and a negative grace reaches past now: both deleted young objects
        raise InvalidInput(f"the gc grace period must be 0 or more seconds, not {grace_seconds!r}")
    problems: list[dict[str, Any]] = []
    cutoff = writers.fs_now(repo.store_dir)  # before reading the markers: a session starting later is newer
    oldest = writers.oldest_live_session(repo.store_dir)
    if oldest is not None:  # less a margin: an object written in the marker's own clock tick has the same mtime
        cutoff = min(cutoff, oldest - writers.TICK)
    footprint = getattr(repo.objects, "footprint", None)
    before = footprint() if footprint is not None else {"files": 0, "bytes": 0}
    grave = Graveyard(repo, now)
    live = reachable(repo, problems, grave=grave)
    if problems:
        raise AgentSnapError(f"gc refused: the store has {len(problems)} problem(s); run 'agentsnap verify'")
    # a snapshot whose TTL ran out that only the reflog names is reclaimed whole, manifest too: mark it first, as
    # 'expire' does, or its reflog entry names a snapshot that is gone, and every later verify fails and gc refuses
    # (was: "gc refused: the store has 1 problem(s)" on the next gc, for good)
    unmarked = [oid for oid in sorted(grave.expired_roots - live) if repo.objects.has(oid)]
    if unmarked:
        bury(repo, unmarked, "expire")
    removed = kept_young = 0
    kept_loose: set[str] = set()
    iter_loose = getattr(repo.objects, "iter_loose", None)  # packed objects: pack_live below
    for oid in list(iter_loose() if iter_loose is not None else repo.objects.iter_oids()):
        if oid in live:
            continue
        try:
            if time.time() - repo.objects.age(oid) > cutoff - grace_seconds:  # modified after the cutoff's grace
                kept_young += 1
                kept_loose.add(oid)
                continue
        except AgentSnapError:
            continue
        repo.objects.delete(oid)
        removed += 1
    report: dict[str, Any] = {}
    pack_live = getattr(repo.objects, "pack_live", None)
    if pack_live is not None:  # unreachable packed objects go only when no writer runs (one may re-use them)
        packs = pack_live(live, None if oldest is not None else cutoff - grace_seconds)
        removed += packs.get("dropped", 0)  # unreachable objects taken out of packs count as removed too
        # unreachable objects left in a pack (it was re-used within the grace period, or a writer runs) are kept
        # for now, as young loose ones are: said, or a prune then gc looks as if it freed everything
        kept_young += len(set(repo.objects.packs.oids_in_order()) - live - kept_loose)
        after = repo.objects.footprint()
        report["packs"] = {
            "written": packs.get("written", 0),  # packs this gc wrote (0: nothing to do)
            "packed": packs.get("packed", 0),  # loose objects moved into a pack
            "dropped": packs.get("dropped", 0),  # unreachable packed objects left out
            "merged": packs.get("merged", 0),  # packs rewritten into the new one
            "packs": packs.get("packs", 0),  # packs in the store now
            "objects_in_packs": repo.objects.packs.entry_count(),
            "files_before": before["files"], "files_after": after["files"],
            "bytes_before": before["bytes"], "bytes_after": after["bytes"],
        }
    temp_removed = 0
    for tmp in repo.objects.temp_files():
        if pack_live is not None and f"{os.sep}pack{os.sep}" in tmp:
            continue  # the pack step handles its own leftovers under its lock
        try:
            if os.stat(tmp).st_mtime <= cutoff - grace_seconds:  # a writer may still be filling a newer one
                os.unlink(tmp)
                temp_removed += 1
        except OSError:
            pass
    checkpoint = getattr(repo.refs, "checkpoint", None)
    if checkpoint is not None:  # the index's WAL back into the database, the file truncated
        checkpoint()
    _ = content
    from agentsnap_core.repository import vault  # secret files kept for snapshots that are gone now

    report["vault_dropped"] = vault.prune(repo, cutoff - grace_seconds)
    # the own list's trees that are gone now; not while a snapshot is being written here (a tree it noted may not be
    # in the store yet, and would lose its mark)
    report["own_dropped"] = repo.forget_own_gone() if writers.oldest_live_session(repo.store_dir) is None else 0
    report["kept_by_reflog"] = kept_by_reflog(repo, grave)
    report["foreign_files"] = foreign_files(repo)
    return {"removed": removed, "kept_recent": kept_young, "live": len(live), "temp_removed": temp_removed, **report}
