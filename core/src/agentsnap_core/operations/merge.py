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
* ``model`` - TIES / DARE on task vectors (:mod:`agentsnap_core.operations.modelmerge`, needs ``agentsnap-core[model]``);
* any other layer - a merger registered with :func:`register_layer_merger`, else the key-wise merge.

A clean merge makes a snapshot with two parents. A conflicted one writes the merged world
(markers included) into the working tree, remembers the merge, and waits for
:func:`merge_continue` or :func:`merge_abort`.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentsnap_core import plugins
from agentsnap_core.errors import AgentSnapError, InvalidInput
from agentsnap_core.format.encoding import pack, unpack
from agentsnap_core.format.files import write_replacing
from agentsnap_core.layers import effects_ledger, world
from agentsnap_core.operations import merge_layers
from agentsnap_core.operations.merge_world import WorldMerge, marker_lines, merge_worlds
from agentsnap_core.plugins.hookspecs import HookContext
from agentsnap_core.repository.repo import Snapshot, _writing, git_held_back_note
from agentsnap_core.stores.base import RefUpdate

if TYPE_CHECKING:
    from agentsnap_core.repository.repo import Repo

#: a layer merger: ``fn(base, ours, theirs, context) -> LayerMerge`` (payloads are plain data, None = absent)
LayerMerger = Callable[[Any, Any, Any, HookContext], Any]  #: returns a LayerMerge

_LAYER_MERGERS: dict[str, LayerMerger] = {}


@dataclass
class LayerMerge:
    """What a layer merger returns.

    Attributes:
        value: the merged payload (plain msgpack data); ``None`` drops the layer.
        conflicts: one dict per conflict, at least ``{"layer", "kind", "path", "message"}``;
            ``value`` must still be a usable payload (e.g. ours on the conflicting keys).
        notes: short human-readable remarks ("cache: kept ours, not merged").
        resolved: conflicts the strategy settled (listed in the result, not blocking).
    """

    value: Any
    conflicts: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: conflicts settled by ``--strategy ours|theirs`` (reported, not blocking)
    resolved: list[dict[str, Any]] = field(default_factory=list)


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


# ====================================================================== the merge engine
STRATEGIES = ("auto", "ours", "theirs")
STATE_FORMAT = 1
_BUILTIN: dict[str, LayerMerger] = {
    "effects": merge_layers.merge_effects,
    "state": merge_layers.merge_state,
    "cache": merge_layers.merge_cache,
    "model": merge_layers.merge_model,
}


class MergeConflict(AgentSnapError):
    """``merge --continue`` found unresolved paths; edit them (or delete the side files) and retry."""

    def __init__(self, paths: list[str], reason: str) -> None:
        self.paths = paths
        shown = ", ".join(paths[:8]) + (" ..." if len(paths) > 8 else "")
        super().__init__(f"{reason}: {shown}; resolve them, then run 'agentsnap merge --continue' (or '--abort')")


class MergeInProgress(AgentSnapError):
    def __init__(self) -> None:
        super().__init__("a merge is in progress here; finish it with 'agentsnap merge --continue' or undo it with "
                         "'agentsnap merge --abort'")


class NoMergeInProgress(AgentSnapError):
    def __init__(self) -> None:
        super().__init__("no merge is in progress in this working tree")


@dataclass
class MergeResult:
    """What a merge did. ``status``: merged, conflict, fast-forward or up-to-date."""

    status: str
    ours: str
    theirs: str
    base: str | None
    snapshot: str | None = None
    conflicts: list[dict[str, Any]] = field(default_factory=list)
    resolved: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return self.status != "conflict"

    @property
    def conflicted_paths(self) -> list[str]:
        return sorted({str(c["path"]) for c in self.conflicts if c.get("layer") == "world"})

    def as_dict(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "clean": self.clean,
            "ours": self.ours,
            "theirs": self.theirs,
            "base": self.base,
            "snapshot": self.snapshot,
            "conflicts": self.conflicts,
            "resolved": self.resolved,
            "notes": self.notes,
        }


@dataclass
class MergePlan:
    """A computed merge, before anything is written to the working tree or refs."""

    ours: str
    theirs: str
    base: str | None
    world: WorldMerge | None
    trace: list[dict[str, Any]]
    layers: dict[str, Any]
    conflicts: list[dict[str, Any]] = field(default_factory=list)
    resolved: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


# ---------------------------------------------------------------------- the DAG
class _Dag:
    def __init__(self, repo: Repo) -> None:
        self.repo = repo
        self.manifests: dict[str, dict[str, Any]] = {}

    def manifest(self, oid: str) -> dict[str, Any]:
        if oid not in self.manifests:
            self.manifests[oid] = self.repo.manifest(oid)
        return self.manifests[oid]

    def ancestors(self, start: str) -> set[str]:
        """``start`` and everything reachable through parents."""
        seen = {start}
        stack = [start]
        while stack:
            for p in self.manifest(stack.pop())["parents"]:
                if p not in seen:
                    seen.add(p)
                    stack.append(p)
        return seen


def merge_bases(repo: Repo, a: str, b: str) -> list[str]:
    """The lowest common ancestors of snapshots ``a`` and ``b`` (newest first; usually one)."""
    dag = _Dag(repo)
    common = dag.ancestors(a) & dag.ancestors(b)
    below: set[str] = set()
    stack = [p for c in common for p in dag.manifest(c)["parents"]]
    while stack:
        x = stack.pop()
        if x not in below:
            below.add(x)
            stack.extend(dag.manifest(x)["parents"])
    lowest = common - below
    return sorted(lowest, key=lambda x: (-float(dag.manifest(x)["time"]), x))


# ---------------------------------------------------------------------- planning
def plan_merge(
    repo: Repo,
    ours: str,
    theirs: str,
    *,
    strategy: str = "auto",
    labels: tuple[str, str] = ("ours", "theirs"),
    summarizer: Any = None,
    model: dict[str, Any] | None = None,
) -> MergePlan:
    """Compute the merge of snapshot ``theirs`` into ``ours`` (ids); writes only new content objects."""
    if strategy not in STRATEGIES:
        raise InvalidInput(f"unknown merge strategy {strategy!r}; use one of {', '.join(STRATEGIES)}")
    bases = merge_bases(repo, ours, theirs)
    base = bases[0] if bases else None
    notes: list[str] = []
    if len(bases) > 1:
        notes.append(f"{len(bases)} lowest common ancestors (criss-cross); merged against the newest, {base[:12]}")  # type: ignore[index]
    if base is None:
        notes.append("no common ancestor: merged as if from an empty snapshot")
    s_base = repo.get(base) if base else None
    s_ours, s_theirs = repo.get(ours), repo.get(theirs)
    context = plugins.hook_context(
        repo,
        base=base,
        ours=ours,
        theirs=theirs,
        strategy=strategy,
        ours_label=labels[0],
        theirs_label=labels[1],
        summarizer=summarizer,
        model=model or {},
    )
    wm: WorldMerge | None = None
    if "world" in s_ours.layers or "world" in s_theirs.layers:
        wm = merge_worlds(
            repo.objects,
            repo.world_entries(s_base) if s_base else [],
            repo.world_entries(s_ours),
            repo.world_entries(s_theirs),
            labels=labels,
            strategy=strategy,
        )
    conflicts = list(wm.conflicts) if wm else []
    resolved = list(wm.resolved) if wm else []
    notes += wm.notes if wm else []

    def payload(snap: Any, layer: str) -> Any:
        return repo.read_layer(snap, layer) if snap is not None else None

    tm = merge_layers.merge_trace(payload(s_base, "trace"), payload(s_ours, "trace"), payload(s_theirs, "trace"), context)
    notes += tm.notes
    layers: dict[str, Any] = {}
    names = sorted((set(s_ours.layers) | set(s_theirs.layers)) - {"world", "trace"})
    for name in names:
        fn = _merger(name)
        ctx: HookContext = {**context, "layer": name}
        lm = fn(payload(s_base, name), payload(s_ours, name), payload(s_theirs, name), ctx)
        if not isinstance(lm, LayerMerge):
            raise AgentSnapError(f"the merger of layer {name!r} returned {type(lm).__name__}, not LayerMerge")
        for c in lm.conflicts:
            c.setdefault("layer", name)
        conflicts += lm.conflicts
        resolved += lm.resolved
        notes += lm.notes
        if lm.value is not None:
            layers[name] = lm.value
    return MergePlan(ours, theirs, base, wm, tm.value, layers, conflicts, resolved, notes)


def _merger(layer: str) -> LayerMerger:
    fn = _LAYER_MERGERS.get(layer) or _BUILTIN.get(layer)
    if fn is not None:
        return fn
    return lambda b, o, t, ctx: merge_layers.merge_mapping_layer(layer, b, o, t, ctx)


# ---------------------------------------------------------------------- merge / continue / abort
def _state_path(repo: Repo) -> Path:
    return repo.merge_state_path


def _pending_ref(repo: Repo) -> str:
    return f"refs/merge/{repo.worktree}"


def merge_state(repo: Repo) -> dict[str, Any] | None:
    """The recorded in-progress merge of this working tree, or None."""
    try:
        doc = unpack(_state_path(repo).read_bytes(), "merge state")
    except FileNotFoundError:
        return None
    if not isinstance(doc, dict) or doc.get("v") != STATE_FORMAT:
        raise AgentSnapError(f"{_state_path(repo)} is not a merge state this agentsnap understands; "
                             "run 'agentsnap merge --abort'")
    return doc


def _write_state(repo: Repo, doc: dict[str, Any]) -> None:
    path = _state_path(repo)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_replacing(path, pack(doc))


def _clear_state(repo: Repo, pending: str | None) -> None:
    if pending and repo.refs.get_ref(_pending_ref(repo)) == pending:
        repo.refs.update_refs([RefUpdate(_pending_ref(repo), None, pending)], "merge: done")
    try:
        _state_path(repo).unlink()
    except FileNotFoundError:
        pass


def _require_whole(repo: Repo, doing: str) -> None:
    """Refuse a tree a restore (or a checkout, a merge's write) cut short left: part one snapshot's, part another's,
    which no change list describes; said with the restore that finishes it or goes back."""
    cut = repo.restore_interrupted()
    if cut is not None:
        from agentsnap_core.repository.repo import restore_interrupted_line

        raise AgentSnapError(f"{restore_interrupted_line(cut)}; do that before {doing}")


def _require_clean(repo: Repo, doing: str = "merging") -> None:
    _require_whole(repo, doing)
    st = repo.status()
    if not st["clean"]:
        changed = [p for key in ("added", "modified", "deleted", "mode") for p in st["world"][key]]
        what = ", ".join(changed[:5]) or f"{st['trace']['pending']} trace message(s)"
        raise AgentSnapError(f"the working tree has changes since the last snapshot ({what}); run "
                             f"'agentsnap snapshot' (or restore) before {doing}")


@_writing  # a writer session: a 'gc --prune now' elsewhere never takes the objects the plan wrote before a ref names them
def merge(
    repo: Repo,
    spec: str,
    *,
    strategy: str = "auto",
    message: str | None = None,
    summarizer: Any = None,
    model: dict[str, Any] | None = None,
    no_ff: bool = False,
) -> MergeResult:
    """Merge snapshot/branch ``spec`` into HEAD.

    Args:
        repo: the repository (its working tree and current branch are the target, "ours").
        spec: branch, tag or id to merge in ("theirs").
        strategy: ``auto`` stops on conflicts; ``ours`` / ``theirs`` settles every conflict to that side.
        message: message of the merge snapshot.
        summarizer: fold their trace tail into one note: a callable ``(messages, context) -> message``
            (e.g. :class:`agentsnap_core.operations.merge_layers.LLMSummarizer`), or ``True`` for the
            ``agentsnap_summarize_branch`` hook with the deterministic default.
        model: options for the model layer (``method``: ties, dare_ties, dare_linear, task_arithmetic;
            ``density``, ``weights``, ``lambda``, ``seed``...; see :mod:`agentsnap_core.operations.modelmerge`).
        no_ff: make a merge snapshot even when HEAD is an ancestor of ``spec``.

    Returns:
        A :class:`MergeResult`; on conflicts the working tree holds the merge with markers and
        :func:`merge_continue` / :func:`merge_abort` finish it.
    """
    if merge_state(repo) is not None:
        raise MergeInProgress()
    if strategy not in STRATEGIES:
        raise InvalidInput(f"unknown merge strategy {strategy!r}; use one of {', '.join(STRATEGIES)}")
    symref, ours = repo.head()
    if ours is None:
        raise AgentSnapError("nothing to merge into: this branch has no snapshot yet")
    theirs = repo.resolve(spec)
    dag = _Dag(repo)
    s_ours, s_theirs = repo.get(ours), repo.get(theirs)
    has_world = "world" in s_ours.layers or "world" in s_theirs.layers
    if theirs in dag.ancestors(ours):
        return MergeResult("up-to-date", ours, theirs, theirs, ours, notes=[f"{spec} is already contained in HEAD"])
    if has_world:
        _require_clean(repo)
    branch = repo.current_branch()
    labels = (branch or "HEAD", spec)
    if ours in dag.ancestors(theirs) and not no_ff:
        held: list[str] = []
        if has_world:
            with repo.noting_restore(theirs, ours, None, merge=spec):  # (cut short: said, as a restore's)
                held = _apply_world(repo, repo.world_entries(s_theirs), s_theirs)
            repo.set_messages(repo.read_layer(s_theirs, "trace") or [])
        _move_head(repo, symref, ours, theirs, f"merge {spec}: fast-forward")
        from agentsnap_core.layers.effects import (  # no merge snapshot: run their deferred effects (once) here
            merge_notes,
            on_merge,
        )

        notes = merge_notes(on_merge(repo, ours, theirs, branch), spec, branch)  # applied, or said how to apply
        notes += [n for n in [git_held_back_note(held, theirs)] if n]
        return MergeResult("fast-forward", ours, theirs, ours, theirs, notes=notes)  # "fast-forward to ..." once
    plan = plan_merge(repo, ours, theirs, strategy=strategy, labels=labels, summarizer=summarizer, model=model)
    message = message or f"merge {spec} into {branch or ours[:12]}"
    meta = {"merge": {"base": plan.base, "ours": ours, "theirs": theirs, "strategy": strategy, "notes": plan.notes,
                      "resolved": len(plan.resolved)}}
    if not plan.conflicts:
        if has_world and plan.world is not None:
            with repo.noting_restore(None, ours, None, merge=spec):  # (the tree was clean: HEAD is the way back)
                plan.notes += [n for n in [git_held_back_note(_apply_world(repo, plan.world.entries, s_theirs), theirs)] if n]
            repo.set_messages(plan.trace)
        with effects_ledger.merge_reports() as reports:
            snap = repo.snapshot(message, layers=plan.layers, trace=plan.trace, capture_world=has_world,
                                 parents=[ours, theirs], meta=meta)
        notes = plan.notes + _effects_outcome(reports, plan.notes, spec, branch)
        return MergeResult("merged", ours, theirs, plan.base, snap.id, [], plan.resolved, notes)
    pending = repo.snapshot(f"merge in progress: {message}", layers=plan.layers, trace=plan.trace, capture_world=False,
                            parents=[ours, theirs], ref=_pending_ref(repo), move_head=False,
                            meta={**meta, "merge_pending": True})
    state = {
        "v": STATE_FORMAT, "ours": ours, "theirs": theirs, "base": plan.base, "pending": pending.id,
        "world": has_world, "message": message, "strategy": strategy, "labels": list(labels),
        "conflicts": plan.conflicts, "resolved": plan.resolved, "notes": plan.notes,
        "side_files": plan.world.side_files if plan.world else [], "marked": plan.world.marked if plan.world else [],
        "marker_floor": plan.world.marker_floor if plan.world else {},
    }
    _write_state(repo, state)  # first: a crash below leaves an abortable merge
    if has_world and plan.world is not None:
        plan.notes += [n for n in [git_held_back_note(_apply_world(repo, plan.world.entries, s_theirs), theirs)] if n]
        repo.set_messages(plan.trace)
    return MergeResult("conflict", ours, theirs, plan.base, None, plan.conflicts, plan.resolved, plan.notes)


def _apply_world(repo: Repo, entries: list[world.Entry], source: Snapshot) -> list[str]:
    """Make the working tree ``entries``; git's config and hooks only when ``source`` (the side they may come from)
    was captured by this store (:meth:`Repo.captured_here`). Returns those left as they were."""
    target, current, held = repo.guard_git_code((source.layers.get("world") or {}).get("tree"), entries,
                                                repo.working_entries())
    world.materialize(repo.objects, repo.root, target, current, allow_external_symlinks=True)
    return held


def _move_head(repo: Repo, symref: str | None, old: str, new: str, message: str) -> None:
    if symref:
        repo.update_refs([RefUpdate(symref, new, old)], message)
    else:
        repo.refs.set_head(repo.worktree, None, new)


@_writing  # (as merge: the objects it writes are named by a ref only at its end)
def merge_continue(repo: Repo, *, message: str | None = None, layers: dict[str, Any] | None = None) -> MergeResult:
    """Finish a conflicted merge after the user resolved it; make the two-parent snapshot.

    ``layers`` replaces merged non-world layer values (e.g. a hand-resolved ``state``); without it
    the merged values are kept (ours on conflicting keys).
    """
    state = merge_state(repo)
    if state is None:
        raise NoMergeInProgress()
    ours, theirs = state["ours"], state["theirs"]
    if repo.head()[1] != ours:
        raise AgentSnapError(f"HEAD moved away from {ours[:12]} during the merge; run 'agentsnap merge --abort'")
    if state["world"]:
        left = [p for p in state["side_files"] if os.path.lexists(repo.root / p)]
        if left:
            raise MergeConflict(left, "both versions are still there (keep one under the original name, delete the rest)")
        marked = []
        floor = state.get("marker_floor") or {}  # (absent in a merge stopped by an earlier version: none)
        for p in state["marked"]:
            full = repo.root / p
            if full.is_file() and not full.is_symlink() and marker_lines(full.read_bytes()) > floor.get(p, 0):
                marked.append(p)
        if marked:
            raise MergeConflict(marked, "conflict markers remain")
    pending = repo.get(state["pending"])
    values = {name: repo.read_layer(pending, name) for name in pending.layers if name not in ("world", "trace")}
    for name, value in (layers or {}).items():
        if name in ("world", "trace"):
            raise InvalidInput(f"layer {name!r} is resolved in the working tree, not through 'layers'")
        values[name] = value
    trace = repo.messages() if state["world"] else (repo.read_layer(pending, "trace") or [])
    meta = {"merge": {"base": state["base"], "ours": ours, "theirs": theirs, "strategy": state["strategy"],
                      "notes": state["notes"], "resolved": len(state["resolved"]), "conflicts": len(state["conflicts"])}}
    with effects_ledger.merge_reports() as reports:
        snap = repo.snapshot(message or state["message"], layers=values, trace=trace,
                             capture_world=bool(state["world"]), parents=[ours, theirs], meta=meta)
    _clear_state(repo, state["pending"])
    labels = state.get("labels") or []
    spec = str(labels[1]) if len(labels) == 2 else theirs[:12]
    return MergeResult("merged", ours, theirs, state["base"], snap.id, [], state["resolved"],
                       state["notes"] + [f"resolved {len(state['conflicts'])} conflict(s) by hand"]
                       + _effects_outcome(reports, state["notes"], spec, repo.current_branch()))


def _effects_outcome(reports: list[dict[str, Any]], planned: list[str], spec: str, branch: str | None) -> list[str]:
    """What the merge snapshot's deferred effects did (applied, FAILED, not run again...), as notes: a fast-forward
    said so, a merge snapshot dropped it. Calls the plan already named as waiting for tools not loaded here are
    not named twice."""
    from agentsnap_core.layers.effects import merge_notes

    notes: list[str] = []
    for report in reports:
        if any("tools not loaded here" in n for n in planned):
            report = {**report, "pending": []}
        notes += merge_notes(report, spec, branch)
    return notes


def merge_abort(repo: Repo) -> dict[str, Any]:
    """Undo a conflicted merge: the working tree and trace become exactly what they were before.

    What the tree held when the merge was aborted (conflicts resolved by hand, edits made meanwhile) is snapshotted
    first (``refs/undo/restore``, as restore does; ``undo`` in the result): an abort never loses work."""
    state = merge_state(repo)
    if state is None:
        raise NoMergeInProgress()
    ours = state["ours"]
    out: dict[str, Any] = {"aborted": True, "head": ours}
    if state["world"]:
        with repo.tree_lock("merge --abort"):
            head = repo.head()[1]
            undo = repo.snapshot(f"pre-abort: the merge of {state['theirs'][:12]} as it stood", ref="refs/undo/restore",
                                 parents=[head] if head else [], meta={"undo_of": ours},
                                 same_as=repo.get(head) if head else None)
            _apply_world(repo, repo.world_entries(ours), repo.get(ours))
            repo.set_messages(repo.read_layer(ours, "trace") or [])
        out["undo"] = undo.id
    _clear_state(repo, state.get("pending"))
    return out


def conflict_view(repo: Repo, path: str) -> dict[str, Any]:
    """Base, ours, theirs and working-tree bytes of ``path`` during a merge (``None`` = absent)."""
    state = merge_state(repo)
    if state is None:
        raise NoMergeInProgress()
    out: dict[str, Any] = {"path": path}
    for side in ("base", "ours", "theirs"):
        oid = state[side]
        entry = next((e for e in repo.world_entries(oid) if e[0] == path), None) if oid else None
        out[side] = _entry_bytes(repo, entry)
    full = repo.root / path
    out["working"] = full.read_bytes() if full.is_file() and not full.is_symlink() else None
    out["conflicts"] = [c for c in state["conflicts"] if c.get("path") == path or path in c.get("files", [])]
    if all(out[k] is None for k in ("base", "ours", "theirs")) and not out["conflicts"]:
        raise InvalidInput(f"{path!r} is not part of the merge in progress (see 'agentsnap merge --status')")
    return out


def _entry_bytes(repo: Repo, entry: world.Entry | None) -> bytes | None:
    from agentsnap_core.format import content

    if entry is None or entry[1] == "d":
        return None
    if entry[1] == "l":
        return f"-> {entry[4]}\n".encode()
    return content.get_bytes(repo.objects, entry[4])
