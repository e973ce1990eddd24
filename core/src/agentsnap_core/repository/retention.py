"""Retention for stores that snapshot every turn: tombstones, TTL expiry, ``prune`` and ``du``.

A snapshot is *dead* when it is expired (its ``meta["expires_at"]`` has passed, or ``expire`` marked it)
or pruned or deleted. Marks are refs under ``refs/tombstones/<id>`` (so they work on every store and sync
like any ref; the reflog message says why). gc treats a dead snapshot as a *tombstone*: its manifest is
kept while a live snapshot descends from it or a ref names it (history stays walkable and ``verify``
accepts it), its layers are no longer roots and are reclaimed; a dead snapshot nothing reaches goes
entirely. ``restore`` of a dead snapshot is refused with :class:`SnapshotGone`.
"""

from __future__ import annotations

import datetime as dt
import time
from collections import defaultdict
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from agentsnap_core.errors import AgentSnapError, ObjectMissing
from agentsnap_core.format.objects import Kind, is_oid, unpack_chunk_list
from agentsnap_core.stores.base import ANY, RefUpdate

if TYPE_CHECKING:
    from agentsnap_core.repository.repo import Repo, Snapshot

__all__ = ["TOMBSTONES", "Graveyard", "SnapshotGone", "bury", "death_of", "du", "prune", "refuse_dead"]

TOMBSTONES = "refs/tombstones/"
#: store config key: ``agentsnap du`` warns when the store's objects take more bytes than this
WARN_KEY = "du.warn_bytes"
DEFAULT_WARN_BYTES = 1 << 30


class SnapshotGone(AgentSnapError):
    """The snapshot was expired, pruned or deleted: only its manifest may remain."""

    def __init__(self, oid: str, reason: str, doing: str = "restored") -> None:
        self.id, self.reason = oid, reason
        super().__init__(
            f"snapshot {oid[:12]} was {reason}; only its record is kept (its layers are reclaimed by gc), so it "
            f"cannot be {doing} - pick a live snapshot from 'agentsnap log' or the agent's timeline"
        )


def expires_at(manifest: dict[str, Any]) -> float | None:
    value = (manifest.get("meta") or {}).get("expires_at")
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def tombstones(repo: Repo) -> dict[str, str]:
    """``{snapshot id: tombstone ref}`` of every snapshot marked expired, pruned or deleted."""
    return {name[len(TOMBSTONES) :]: name for name in repo.refs.list_refs(TOMBSTONES)}


def death_of(repo: Repo, oid: str, manifest: dict[str, Any] | None = None, *, now: float | None = None,
             marks: dict[str, str] | Iterable[str] | None = None) -> str | None:
    """Why ``oid`` is dead ("expired (TTL passed ...)", "pruned", ...), or None while it is live."""
    marked = tombstones(repo) if marks is None else marks
    if oid in marked:
        log = repo.refs.reflog(TOMBSTONES + oid, limit=1)
        word = log[0].message.split(":", 1)[0] if log else "expired"
        return {"prune": "pruned", "delete": "deleted"}.get(word, "expired")
    m = repo.manifest(oid) if manifest is None else manifest
    at = expires_at(m)
    if at is not None and at <= (time.time() if now is None else now):
        return f"expired (its TTL ran out at {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(at))})"
    return None


def refuse_dead(repo: Repo, snap: Snapshot, now: float | None = None, doing: str = "restored") -> None:
    """Raise :class:`SnapshotGone` when ``snap`` is dead (called before any restore, fork or branch writes)."""
    reason = death_of(repo, snap.id, snap.manifest, now=now)
    if reason:
        raise SnapshotGone(snap.id, reason, doing)


def bury(repo: Repo, ids: Iterable[str], reason: str) -> list[str]:
    """Mark snapshots dead (``reason`` is ``expire``, ``prune`` or ``delete``); returns the newly marked ids."""
    marks = tombstones(repo)
    new = [oid for oid in dict.fromkeys(ids) if oid not in marks]
    for oid in new:
        if not is_oid(oid) or not repo.objects.has(oid):
            raise AgentSnapError(f"cannot {reason} {oid[:12]}: no such snapshot")
    if new:
        repo.refs.update_refs([RefUpdate(TOMBSTONES + oid, oid, ANY) for oid in new], f"{reason}: {len(new)} snapshot(s)")
    return new


class Graveyard:
    """What gc and verify need: which roots to drop and which reached snapshots are tombstones."""

    def __init__(self, repo: Repo, now: float | None = None) -> None:
        self.repo, self.now = repo, time.time() if now is None else now
        self.marks = tombstones(repo)
        #: snapshots dropped as roots because their TTL ran out (no mark): gc marks those it may reclaim
        self.expired_roots: set[str] = set()

    def is_dead(self, oid: str, manifest: dict[str, Any]) -> bool:
        if oid in self.marks:
            return True
        at = expires_at(manifest)
        return at is not None and at <= self.now

    def skip_root(self, oid: str, where: str) -> bool:
        """A reflog entry alone does not keep a dead snapshot (a ref or a live child still does)."""
        if not where.startswith("reflog"):
            return False
        if oid in self.marks:
            return True
        try:
            dead = self.is_dead(oid, self.repo.manifest(oid))
        except AgentSnapError:
            return False  # reachable() reports the problem
        if dead:
            self.expired_roots.add(oid)
        return dead


# ---------------------------------------------------------------------------------------------- prune
def _live_rows(repo: Repo, now: float) -> list[tuple[str, float, str, dict[str, Any]]]:
    """``(id, time, agent, manifest)`` of every live snapshot in the index, newest first."""
    marks = tombstones(repo)
    out = []
    for row in repo.refs.list_snapshots():
        if row.id in marks or not repo.objects.has(row.id):
            continue
        try:
            m = repo.manifest(row.id)
        except AgentSnapError:
            continue
        if death_of(repo, row.id, m, now=now, marks=marks) is None:
            out.append((row.id, float(m["time"]), str(m.get("agent", "")), m))
    out.sort(key=lambda r: (-r[1], r[0]))
    return out


def _protected(repo: Repo) -> set[str]:
    """Snapshots a branch, session, undo ref or worktree HEAD names: the current state is never pruned."""
    keep = {oid for name, oid in repo.refs.list_refs().items() if not name.startswith((TOMBSTONES, "refs/tags/"))}
    keep |= {oid for _sym, oid in repo.refs.list_heads().values() if oid}
    return keep


def _merge_bases(repo: Repo, known: dict[str, dict[str, Any]]) -> set[str]:
    """The snapshots a merge of two branches (local or remote-tracking, or a worktree's detached HEAD) starts from.

    A fork's point is no branch's tip once both sides moved on; pruned, gc reclaims its layers and the merge of the
    fork back is refused ("snapshot ... was pruned"). Kept: every snapshot two tips reach that no single child of it
    leads both of them to (their lowest common ancestors; a criss-cross may keep one more). ``known``: manifests
    already read.
    """
    tips = {oid for name, oid in repo.refs.list_refs().items() if name.startswith(("refs/heads/", "refs/remotes/"))}
    tips |= {oid for _sym, oid in repo.refs.list_heads().values() if oid}
    parents: dict[str, list[str]] = {}

    def parents_of(oid: str) -> list[str]:
        if oid not in parents:
            try:
                m = known[oid] if oid in known else repo.manifest(oid)
                parents[oid] = [p for p in m["parents"] if isinstance(p, str)]
            except AgentSnapError:
                parents[oid] = []  # unreadable: its history is not walked (verify reports it)
        return parents[oid]

    reach: dict[str, int] = {}  # snapshot -> bit set of the tips it is an ancestor of (or is)
    for bit, tip in enumerate(sorted(tips)):
        stack = [tip]
        while stack:
            oid = stack.pop()
            if reach.get(oid, 0) >> bit & 1:
                continue
            reach[oid] = reach.get(oid, 0) | 1 << bit
            stack.extend(parents_of(oid))
    children: dict[str, list[str]] = defaultdict(list)
    for oid in reach:
        for p in parents_of(oid):
            children[p].append(oid)
    return {oid for oid, mask in reach.items() if oid not in tips and mask & (mask - 1)
            and not any(reach[c] == mask for c in children[oid])}


def prune(repo: Repo, *, keep_last: int | None = None, keep_daily: int | None = None, keep_tagged: bool = False,
          dry_run: bool = False, now: float | None = None) -> dict[str, Any]:
    """Mark snapshots outside the policy as pruned (per agent); ``gc`` then reclaims their layers.

    Kept, per agent: the ``keep_last`` newest; the newest of each of the ``keep_daily`` most recent UTC days
    that have snapshots; with ``keep_tagged``, every tagged one (a tag ref or ``meta["tags"]``). Snapshots a
    branch, session ref, undo ref or worktree HEAD points at are always kept, and so are the merge bases of the
    branches (a fork's point, which merging the fork back needs).
    """
    if keep_last is None and keep_daily is None and not keep_tagged:
        raise AgentSnapError("prune needs at least one of --keep-last, --keep-daily, --keep-tagged (it would remove everything)")
    for label, n in (("--keep-last", keep_last), ("--keep-daily", keep_daily)):
        if n is not None and n < 0:
            raise AgentSnapError(f"{label} must be 0 or more, not {n}")
    now = time.time() if now is None else now
    rows = _live_rows(repo, now)
    protected = _protected(repo) | _merge_bases(repo, {r[0]: r[3] for r in rows})
    tag_refs = repo.refs.list_refs("refs/tags/")
    tagged = set(tag_refs.values())
    groups: dict[str, list[tuple[str, float, str, dict[str, Any]]]] = defaultdict(list)
    for row in rows:
        groups[row[2]].append(row)
    keep: set[str] = set()
    report_groups: dict[str, dict[str, int]] = {}
    for agent, items in groups.items():
        kept_here: set[str] = set()
        if keep_last:
            kept_here |= {r[0] for r in items[:keep_last]}
        if keep_daily:
            days: dict[str, str] = {}
            for oid, t, _a, _m in items:  # newest first: the first seen per day is that day's newest
                day = dt.datetime.fromtimestamp(t, dt.timezone.utc).date().isoformat()
                if day not in days and len(days) < keep_daily:
                    days[day] = oid
            kept_here |= set(days.values())
        if keep_tagged:
            kept_here |= {oid for oid, _t, _a, m in items if oid in tagged or (m.get("meta") or {}).get("tags")}
        kept_here |= {r[0] for r in items if r[0] in protected}
        keep |= kept_here
        report_groups[agent or "-"] = {"kept": len(kept_here), "pruned": len(items) - len(kept_here)}
    doomed = [r[0] for r in rows if r[0] not in keep]
    names: dict[str, list[str]] = defaultdict(list)  # a tag is a name a user gave: its pruning is said, never silent
    for ref, oid in sorted(tag_refs.items()):
        if oid in doomed:
            names[oid].append(ref[len("refs/tags/"):])
    if not dry_run and doomed:
        bury(repo, doomed, "prune")
    return {"kept": len(keep), "pruned": doomed, "groups": report_groups, "dry_run": dry_run,
            "pruned_tagged": dict(names)}


# ---------------------------------------------------------------------------------------------- du
class _Sizer:
    def __init__(self, repo: Repo) -> None:
        self.repo = repo
        self.stored: dict[str, int] = {}
        self.logical: dict[str, int] = {}
        self.deps: dict[str, list[str]] = {}

    def stored_size(self, oid: str) -> int:
        if oid not in self.stored:
            try:
                sizer = getattr(self.repo.objects, "stored_size", None)  # a local store knows packed shares
                self.stored[oid] = sizer(oid) if sizer else len(self.repo.objects.get_stored(oid))
            except ObjectMissing:
                self.stored[oid] = 0
        return self.stored[oid]

    def content(self, cid: str) -> tuple[list[str], int]:
        """Object ids a content id depends on and its logical (uncompressed) length."""
        if cid not in self.deps:
            try:
                kind, raw = self.repo.objects.get(cid)
            except ObjectMissing:
                self.deps[cid], self.logical[cid] = [], 0
                return [], 0
            if kind == Kind.CHUNKS:
                chunks = unpack_chunk_list(cid, raw)
                self.deps[cid], self.logical[cid] = [cid] + [c for c, _ in chunks], sum(n for _, n in chunks)
            else:
                self.deps[cid], self.logical[cid] = [cid], len(raw)
        return self.deps[cid], self.logical[cid]

    def snapshot(self, oid: str, m: dict[str, Any], dead: bool) -> tuple[set[str], int]:
        """Objects a snapshot keeps alive and its logical size (a tombstone keeps only its manifest)."""
        from agentsnap_core.layers import world

        objs, logical = {oid}, 0
        if dead:
            return objs, 0
        for name, rec in m["layers"].items():
            ids = [rec[k] for k in ("tree", "env", "content") if is_oid(rec.get(k))] + [r for r in rec.get("refs", []) if is_oid(r)]
            for cid in ids:
                deps, size = self.content(cid)
                objs.update(deps)
                if name != "world":
                    logical += size
            if name == "world" and is_oid(rec.get("tree")):
                logical += int(rec.get("bytes", 0))
                for _path, kind, _mode, _size, ref in world.load_tree(self.repo.objects, rec["tree"]):
                    if kind == "f":
                        objs.update(self.content(ref)[0])
        return objs, logical


def du(repo: Repo, *, by: str = "branch", now: float | None = None, warn_bytes: int | None = None) -> dict[str, Any]:
    """Logical (uncompressed, counted per snapshot) vs physical (stored, deduplicated) size by branch or agent."""
    if by not in ("branch", "agent"):
        raise AgentSnapError(f"du groups by 'branch' or 'agent', not {by!r}")
    now = time.time() if now is None else now
    sizer, grave = _Sizer(repo), Graveyard(repo, now)
    members: dict[str, list[str]] = defaultdict(list)
    if by == "branch":
        for name, tip in repo.branches().items():
            members[name] = [s.id for s in repo.walk([tip])]
    else:
        for row in repo.refs.list_snapshots():
            if repo.objects.has(row.id):
                members[row.agent or "-"].append(row.id)
    groups = []
    for name, ids in sorted(members.items()):
        objs: set[str] = set()
        logical = 0
        for oid in ids:
            try:
                m = repo.manifest(oid)
            except AgentSnapError:
                continue
            o, size = sizer.snapshot(oid, m, grave.is_dead(oid, m))
            objs |= o
            logical += size
        physical = sum(sizer.stored_size(o) for o in objs)
        groups.append({"name": name, "snapshots": len(ids), "logical": logical, "physical": physical})
    from agentsnap_core.repository.maintenance import reachable

    live = reachable(repo, [], now=now)
    total = reclaimable = 0
    for oid in repo.objects.iter_oids():
        size = sizer.stored_size(oid)
        total += size
        if oid not in live:
            reclaimable += size
    if warn_bytes is None:
        configured = repo.refs.get_config(WARN_KEY)
        warn_bytes = int(configured) if configured and configured.isdigit() else DEFAULT_WARN_BYTES
    report: dict[str, Any] = {"by": by, "groups": groups, "physical": total, "reclaimable": reclaimable, "warn_bytes": warn_bytes}
    if total > warn_bytes:
        report["warning"] = (
            f"the store holds {human(total)}, over the {human(warn_bytes)} warning size; "
            "run 'agentsnap prune --keep-last N --keep-daily D' then 'agentsnap gc'"
        )
    return report


def human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"
