"""Thread-level verbs of :class:`~agentsnap_langgraph.saver.PFSaver`: delete, copy, prune, fork, merge, files."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentsnap_core import content, world
from agentsnap_core.errors import AgentSnapError, InvalidInput, RefConflict, TargetNotEmpty, UnknownSnapshot
from agentsnap_core.plugins import get_plugin_manager
from agentsnap_core.store import RefUpdate
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import get_checkpoint_id

from ._store import FOREIGN, ChannelMap, thread_ref
from ._typed import expand
from ._writes import STOPS

if TYPE_CHECKING:
    from agentsnap_core.repo import Repo

    from ._index import CheckpointIndex
    from ._store import Shared, Written


class UnknownPruneStrategy(InvalidInput, ValueError):
    """``prune(strategy=...)`` got a strategy it does not know (a ValueError, as from PostgresSaver)."""


class ThreadVerbs:
    """Mixed into PFSaver; the methods use its store, index and flush queue."""

    if TYPE_CHECKING:
        repo: Repo
        index: CheckpointIndex
        world_root: Path | None
        _s: Shared
        serde: Any

        def flush(self) -> None: ...

        def _check_usable(self) -> None: ...

        def _drop_pruned(self) -> None: ...

        def _queue(self, ref: str, snap: str, cid: str, parents: Sequence[str]) -> None: ...

        def _write_snapshot(
            self,
            state_doc: dict[str, Any],
            channels: ChannelMap,
            parents: list[str],
            meta: dict[str, Any],
            world_rec: dict[str, Any] | None,
        ) -> Written: ...

    # ------------------------------------------------------------------ deletion and copies
    def delete_thread(self, thread_id: str) -> None:
        """Remove a thread's checkpoints, blobs and writes from the index and drop its refs.

        The snapshots stay in the object store (reachable through the reflog) until ``agentsnap gc``.
        """
        thread_id = str(thread_id)
        self.flush()
        namespaces = self.index.namespaces(thread_id)
        with self.index.tx() as db:
            for table in ("lg_checkpoints", "lg_blobs", "lg_writes"):
                db.execute(f"DELETE FROM {table} WHERE thread_id=?", (thread_id,))
        with self._s.lock:
            for key in [k for k in self._s.last if k[0] == thread_id]:
                del self._s.last[key]
            prefix = thread_ref(thread_id, "x").rsplit("/", 1)[0] + "/"
            for name in [n for n in self._s.node_tips if n.startswith(prefix)]:
                del self._s.node_tips[name]
        self._reset_refs(thread_id, namespaces)

    def _reset_refs(self, thread_id: str, namespaces: Sequence[str]) -> None:
        """Point each namespace ref of a thread at its newest remaining snapshot (or delete it)."""
        for _attempt in range(20):
            updates = []
            targets: dict[str, tuple[str, str] | None] = {}  # several subgraph calls share their node's ref
            for ns in namespaces:
                name = thread_ref(thread_id, ns)
                latest = self.index.latest_snapshot(thread_id, ns)
                if name not in targets or (latest and (targets[name] is None or latest[0] > targets[name][0])):  # type: ignore[index]
                    targets[name] = latest
            for name, latest in targets.items():
                current = self.repo.refs.get_ref(name)
                target = latest[1] if latest else None
                if current != target:
                    updates.append(RefUpdate(name, target, current))
            if not updates:
                return
            try:
                self.repo.refs.update_refs(updates, f"langgraph: reset {thread_id}")
                return
            except RefConflict:
                continue

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Remove the checkpoints (and their writes) whose metadata ``run_id`` is in ``run_ids``."""
        run_ids = [str(r) for r in _ids(run_ids, "run_ids")]
        if not run_ids:
            return
        self.flush()
        marks = ",".join("?" * len(run_ids))
        with self.index.tx() as db:
            victims = db.execute(
                f"SELECT thread_id, checkpoint_ns, checkpoint_id FROM lg_checkpoints WHERE run_id IN ({marks})", run_ids
            ).fetchall()
            db.executemany(
                "DELETE FROM lg_writes WHERE thread_id=? AND checkpoint_ns=? AND checkpoint_id=?", victims
            )
            db.execute(f"DELETE FROM lg_checkpoints WHERE run_id IN ({marks})", run_ids)
        touched: dict[str, set[str]] = {}
        for thread_id, ns, _cid in victims:
            touched.setdefault(thread_id, set()).add(ns)
        with self._s.lock:
            for thread_id, nss in touched.items():
                for ns in nss:
                    self._s.last.pop((thread_id, ns), None)
        for thread_id, nss in touched.items():
            self._reset_refs(thread_id, sorted(nss))
        # a thread back at a checkpoint with writes (the run that answered its interrupt is gone): its branch records
        # them again, as after the stop itself, so a push carries the question again
        newest = [(t, ns, self.index.latest_snapshot(t, ns)) for t, nss in touched.items() for ns in nss]
        with self._s.lock:
            self._s.stopped.update((t, ns, latest[0]) for t, ns, latest in newest if latest is not None)
        self.flush()

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy every checkpoint (the whole parent chain, all namespaces) and write of a thread.

        The target's checkpoints are the source's snapshots (nothing is written twice); the target's
        own later checkpoints branch off them, so ``agentsnap log --graph`` shows where it forked.
        """
        self._copy(str(source_thread_id), str(target_thread_id), None)

    def _copy(self, source: str, target: str, upto: str | None, replay: bool = False) -> None:
        """Copy ``source`` to ``target``; with ``upto``, only the root chain ending at that checkpoint.

        With ``replay`` (a fork at a checkpoint the caller named), a subgraph namespace keeps only the
        checkpoints written before ``upto``, as LangGraph's replay loads them (``ReplayState``): a
        subgraph that ran, or was answered, after the fork point runs again in the fork."""
        if source == target:
            raise InvalidInput("source and target thread are the same")
        self.flush()  # the snapshots shared with the copy must exist
        with self.index.read() as db:
            rows = db.execute(
                "SELECT checkpoint_ns, checkpoint_id, parent_id, snapshot, run_id, ckpt_type, ckpt, meta_type, meta "
                "FROM lg_checkpoints WHERE thread_id=? ORDER BY checkpoint_ns, checkpoint_id",
                (source,),
            ).fetchall()
        if upto is not None:
            by_id = {r[1]: r for r in rows if r[0] == ""}
            chain: set[str] = set()
            cur: str | None = upto
            while cur and cur in by_id and cur not in chain:
                chain.add(cur)
                cur = by_id[cur][2]
            rows = [r for r in rows if (r[1] in chain if r[0] == "" else not replay or r[1] < upto)]
        if not rows:
            if upto is None:  # (was: nothing copied, nothing said: a mistyped thread id looked like a copy)
                raise InvalidInput(f"copy_thread: thread {source!r} has no checkpoints to copy")
            return
        # the copies share the source's snapshots (like git branches): no object is written again
        queued = [(thread_ref(target, r[0]), r[3], r[1], self.repo.manifest(r[3])["parents"]) for r in rows]
        written = [(target, *r) for r in rows]
        copied_ids = {(r[0], r[1]) for r in rows}
        with self.index.tx() as db:
            # onto a thread with its own checkpoints, the copy would interleave with them: its latest state would
            # become whichever checkpoint id sorts last (checked in the writing transaction: a fork's fresh name too)
            if db.execute("SELECT 1 FROM lg_checkpoints WHERE thread_id=? LIMIT 1", (target,)).fetchone():
                raise InvalidInput(
                    f"thread {target!r} already has checkpoints; copy to a new thread id, or delete_thread({target!r}) first"
                )
            db.executemany(
                "INSERT OR REPLACE INTO lg_checkpoints (thread_id, checkpoint_ns, checkpoint_id, parent_id, snapshot, "
                "run_id, ckpt_type, ckpt, meta_type, meta, flushed) VALUES (?,?,?,?,?,?,?,?,?,?,0)",
                written,
            )
            db.execute(
                "INSERT OR REPLACE INTO lg_blobs SELECT ?, checkpoint_ns, channel, version, type, oid "
                "FROM lg_blobs WHERE thread_id=?",
                (target, source),
            )
            writes = db.execute(
                "SELECT checkpoint_ns, checkpoint_id, task_id, idx, channel, type, value, task_path FROM lg_writes "
                "WHERE thread_id=?",
                (source,),
            ).fetchall()
            writes = [w for w in writes if (w[0], w[1]) in copied_ids and not (replay and _replayed(w, upto))]
            db.executemany("INSERT OR REPLACE INTO lg_writes VALUES (?,?,?,?,?,?,?,?,?)", [(target, *w) for w in writes])
            seqs = [
                r[0]
                for r in db.execute("SELECT seq FROM lg_checkpoints WHERE thread_id=? AND flushed=0", (target,)).fetchall()
            ]
        with self._s.lock:
            self._s.pending_seqs.extend(seqs)
            for item in queued:
                self._queue(*item)
            # a copy of a thread stopped at an interrupt (or on an error) carries the stop on its own branch too, so
            # pushing the copy or the fork sends the question with it
            self._s.stopped.update((target, w[0], w[1]) for w in writes if w[4] in STOPS)
        self.flush()

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """``keep_latest``: keep only the newest checkpoint per namespace (its snapshot re-rooted);
        ``delete``: remove the threads. Errors as PostgresSaver's: TypeError for a single str,
        ValueError for an unknown strategy, NotImplementedError (nothing pruned) for ``keep_latest`` on a
        thread that uses a ``DeltaChannel`` (its value is rebuilt from older checkpoints)."""
        ids = [str(t) for t in _ids(thread_ids, "thread_ids")]
        if strategy not in ("keep_latest", "delete"):
            raise UnknownPruneStrategy(f"unknown prune strategy {strategy!r}; use 'keep_latest' or 'delete'")
        if strategy == "keep_latest":
            delta = [t for t in ids if self._uses_delta_channel(t)]
            if delta:
                raise NotImplementedError(f"keep_latest can't prune threads that use a DeltaChannel: {', '.join(delta)}")
        for thread_id in ids:
            if strategy == "delete":
                self.delete_thread(thread_id)
            else:
                self._keep_latest(thread_id)

    def _uses_delta_channel(self, thread_id: str) -> bool:
        """Whether any checkpoint of the thread carries DeltaChannel bookkeeping in its metadata (as
        PostgresSaver checks: ``counters_since_delta_snapshot`` / ``delta_writes_versioned``)."""
        with self.index.read() as db:
            rows = db.execute("SELECT meta_type, meta FROM lg_checkpoints WHERE thread_id=?", (thread_id,)).fetchall()
        for typ, raw in rows:
            md = self._serde_for(True).loads_typed(expand(typ, raw))  # (keys only: read as a checkpoint from elsewhere)
            if isinstance(md, dict) and ("counters_since_delta_snapshot" in md or "delta_writes_versioned" in md):
                return True
        return False

    def _keep_latest(self, thread_id: str) -> None:
        self.flush()
        for ns in self.index.namespaces(thread_id):
            row = self.index.get_row(thread_id, ns, None)
            if row is None:
                continue
            cid, snap = row[2], row[4]
            manifest = self.repo.manifest(snap)
            doc = content.get_value(self.repo.objects, manifest["layers"]["state"]["content"], "langgraph state")
            doc["parent_checkpoint_id"] = None
            doc["thread_id"] = thread_id  # the kept snapshot may have been shared with the thread it was copied from
            channels = {ch: tuple(v) for ch, v in doc["channels"].items()}
            meta = dict(manifest.get("meta", {}), thread_id=thread_id)
            new = self._write_snapshot(doc, channels, [], meta, manifest["layers"].get("world"))
            keep_versions = [(ch, v[0]) for ch, v in channels.items()]
            with self.index.tx() as db:
                # a checkpoint adopted from elsewhere (a clone, a pull) stays read as such on its new snapshot (was: read
                # as this store's own, with LangGraph's default serializer: a crafted checkpoint's bytes ran code)
                if db.execute("SELECT 1 FROM lg_meta WHERE key=?", (FOREIGN + snap,)).fetchone():
                    db.execute("INSERT OR REPLACE INTO lg_meta VALUES (?,?)", (FOREIGN + new.id, "1"))
                db.execute(
                    "DELETE FROM lg_checkpoints WHERE thread_id=? AND checkpoint_ns=? AND checkpoint_id<>?", (thread_id, ns, cid)
                )
                db.execute(
                    "DELETE FROM lg_writes WHERE thread_id=? AND checkpoint_ns=? AND checkpoint_id<>?", (thread_id, ns, cid)
                )
                db.execute(
                    "UPDATE lg_checkpoints SET snapshot=?, parent_id=NULL, flushed=0 WHERE thread_id=? AND checkpoint_ns=?",
                    (new.id, thread_id, ns),
                )
                blobs = db.execute(
                    "SELECT channel, version FROM lg_blobs WHERE thread_id=? AND checkpoint_ns=?", (thread_id, ns)
                ).fetchall()
                drop = set(blobs) - set(keep_versions)
                db.executemany(
                    "DELETE FROM lg_blobs WHERE thread_id=? AND checkpoint_ns=? AND channel=? AND version=?",
                    [(thread_id, ns, ch, v) for ch, v in drop],
                )
                seq = db.execute(
                    "SELECT seq FROM lg_checkpoints WHERE thread_id=? AND checkpoint_ns=?", (thread_id, ns)
                ).fetchone()[0]
            with self._s.lock:
                self._s.last.pop((thread_id, ns), None)
                self._s.pending_rows.append(new.row)
                self._s.pending_seqs.append(seq)
                self._queue(thread_ref(thread_id, ns), new.id, cid, [])
                # the kept checkpoint's writes (a thread waiting at an interrupt): recorded on the re-rooted branch
                # too, as the branch's tip was before, so a push still carries the question
                self._s.stopped.add((thread_id, ns, cid))
        self.flush()

    # ------------------------------------------------------------------ agentsnap verbs on threads
    def snapshot_id(self, config: RunnableConfig) -> str:
        """The agentsnap snapshot id of the checkpoint ``config`` names (or the thread's newest); flushes first,
        so the snapshot is in the store."""
        self.flush()
        self._drop_pruned()  # (a checkpoint agentsnap prune marked: its files and values are gc's)
        conf = config["configurable"]
        row = self.index.get_row(str(conf["thread_id"]), conf.get("checkpoint_ns", "") or "", get_checkpoint_id(config))
        if row is None:
            raise UnknownSnapshot(f"LangGraph checkpoint {conf.get('thread_id')}/{conf.get('checkpoint_id', 'latest')}")
        return row[4]

    def restore_world(self, config: RunnableConfig, *, to: str | os.PathLike[str] | None = None) -> dict[str, Any]:
        """Make ``world_root`` (or the empty directory ``to``) equal the files captured with a checkpoint.

        ``to`` inside ``world_root`` (and not left out by its ``.agentsnapignore``) is refused, as
        ``fork_thread(worktrees=...)`` is: the copy would be captured by the next checkpoints and deleted by an
        in-place ``restore_world`` to an earlier one."""
        snap = self.repo.get(self.snapshot_id(config))
        rec = snap.layers.get("world")
        if rec is None:
            raise AgentSnapError(
                f"checkpoint snapshot {snap.id[:12]} has no files: create the saver with PFSaver(world_root=...)"
            )
        if to is not None:
            dest = Path(to).resolve()
            # (the empty world_root itself is an in-place restore: allowed)
            if self.world_root is not None and self.repo.inside_tree(dest, self.world_root):
                inside = self.repo.inside_tree_line(dest, "restore_world(to=...)", "restored", self.world_root)
                raise InvalidInput(inside or f"restore_world(to=...) {dest}: inside world_root {self.world_root}")
            if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
                raise TargetNotEmpty(str(to))
            dest.mkdir(parents=True, exist_ok=True)
            entries, _, held = self.repo.guard_git_code(rec["tree"], world.load_tree(self.repo.objects, rec["tree"]), [])
            world.materialize(self.repo.objects, dest, entries, [], False, None, None)
            return {"id": snap.id, "to": str(dest), **({"git_held_back": held} if held else {})}
        if self.world_root is None:
            raise InvalidInput("this saver has no world_root; pass to=<empty directory>")
        pm = get_plugin_manager()
        context = {"repo": self.repo, "pm": pm, "allow_external_symlinks": False, "paths": None}
        changes = pm.hook.agentsnap_restore_world(root=str(self.world_root), world=rec, context=context)
        held = context.get("git_held_back")
        return {"id": snap.id, "changes": changes, **({"git_held_back": held} if held else {})}

    def fork_thread(
        self,
        config: RunnableConfig,
        n: int = 2,
        *,
        prefix: str | None = None,
        worktrees: str | os.PathLike[str] | None = None,
    ) -> list[RunnableConfig]:
        """Copy the checkpoint ``config`` names (with its ancestors and writes) into ``n`` new threads.

        Returns the new threads' configs; invoking the graph with one resumes from that checkpoint.
        With ``worktrees`` (and a saver made with ``world_root``), each fork's files are written to
        ``worktrees/<new thread id>``.
        """
        if isinstance(n, bool) or not isinstance(n, int) or n < 1 or n > 10_000:
            raise InvalidInput(f"fork count must be a whole number between 1 and 10000, not {n!r}")
        self._check_usable()
        conf = config["configurable"]
        thread_id = str(conf["thread_id"])
        if ns := conf.get("checkpoint_ns") or "":
            raise InvalidInput(
                f"fork_thread forks a whole thread at one of its root checkpoints; this config names the subgraph "
                f"namespace {ns!r}: pass the parent graph's config (graph.get_state(config).config, or a state from "
                "get_state_history), from which LangGraph replays the subgraph"
            )
        self._drop_pruned()  # a checkpoint agentsnap prune marked is not forked (its values are gc's)
        row = self.index.get_row(thread_id, "", get_checkpoint_id(config))
        if row is None:
            raise UnknownSnapshot(f"LangGraph checkpoint {thread_id}/{conf.get('checkpoint_id', 'latest')}")
        base = prefix or f"{thread_id}-fork"
        existing = set(self.index.thread_ids())
        names: list[str] = []
        i = 1
        while len(names) < n:
            name = f"{base}-{i}"
            if name not in existing:
                names.append(name)
            i += 1
        if worktrees is not None:  # refused before any fork is made, not after the first ones
            self.flush()
            if "world" not in self.repo.manifest(row[4]).get("layers", {}):
                raise AgentSnapError(
                    f"fork_thread(worktrees=...): checkpoint snapshot {row[4][:12]} has no files: create the saver "
                    "with PFSaver(world_root=...)"
                )
            inside = self.repo.inside_tree_line(Path(worktrees), "fork_thread(worktrees=...)", "forks", self.world_root)
            if inside:  # (the main thread's next checkpoint would capture the forks, its restore_world delete them)
                raise InvalidInput(inside)
            for name in names:
                dest = Path(worktrees) / name
                if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
                    raise TargetNotEmpty(str(dest))
        out: list[RunnableConfig] = []
        for name in names:
            self._copy(thread_id, name, row[2], replay=get_checkpoint_id(config) is not None)
            cfg: RunnableConfig = {"configurable": {"thread_id": name, "checkpoint_ns": ""}}
            if worktrees is not None:
                self.restore_world({"configurable": {"thread_id": name, "checkpoint_ns": ""}}, to=Path(worktrees) / name)
            out.append(cfg)
        return out

    def merge_thread(
        self,
        graph: Any,
        target: RunnableConfig,
        source: RunnableConfig,
        *,
        as_node: str | None = None,
        prefer: str | None = None,
    ) -> RunnableConfig:
        """Merge ``source``'s changes since the common checkpoint into thread ``target``.

        See :func:`agentsnap_langgraph.merge.merge_thread`; the resulting checkpoint's snapshot has
        both threads' snapshots as parents.
        """
        from .merge import merge_thread

        return merge_thread(self, graph, target, source, as_node=as_node, prefer=prefer)  # type: ignore[arg-type]




#: langgraph 1.2.22 ``langgraph._internal._constants``: the task id of writes no task made (update_state), and
#: the channel of an interrupt's answer
_NULL_TASK_ID = "00000000-0000-0000-0000-000000000000"
_RESUME = "__resume__"


def _replayed(write: Sequence[Any], upto: str | None) -> bool:
    """Whether a write of the fork point is one LangGraph's replay discards: tasks rerun there (their writes
    and interrupts are made again) and cached interrupt answers are dropped (``PregelLoop._first``)."""
    ns, cid, task_id, _idx, channel = write[:5]
    return ns == "" and cid == upto and (task_id != _NULL_TASK_ID or channel == _RESUME)


def _ids(ids: Sequence[str], what: str) -> Sequence[str]:
    """``ids`` as given, refusing a single string (it would be read one character at a time)."""
    if isinstance(ids, (str, bytes)):
        raise TypeError(f"{what} must be a sequence of ids, not a str")
    return ids
