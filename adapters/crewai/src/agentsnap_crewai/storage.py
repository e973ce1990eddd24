"""``AgentsnapStorage``: a CrewAI memory ``StorageBackend`` whose contents are an agentsnap layer.

The records live in memory (searched exactly, like LanceDB's flat search), every write is appended
to a journal in the agentsnap worktree (so nothing is lost before the next snapshot), and
:meth:`AgentsnapStorage.snapshot` / :meth:`restore` / :meth:`fork` turn the whole memory into
snapshots on an agentsnap branch. Semantics follow CrewAI 1.15's ``LanceDBStorage`` (scores are
``1 / (1 + squared L2 distance)``, scope filters are string prefixes, lists are newest first).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import threading
import uuid
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import msgpack
import numpy as np
from agentsnap_core import InvalidInput, Repo, Snapshot
from agentsnap_core.errors import AgentSnapError
from agentsnap_core.format.encoding import pack_value
from agentsnap_core.repository.repo import check_ref_name
from crewai.memory.storage.backend import EmbeddingDimensionMismatchError
from crewai.memory.types import MemoryRecord, ScopeInfo
from pydantic_core import SchemaSerializer, core_schema

from ._kinds import MEMORY_KIND  # what the state layer of a memory snapshot says it is

DEFAULT_BRANCH = "crewai/memory"
_JOURNAL_SAFE = re.compile(r"[^A-Za-z0-9._-]+")

Row = dict[str, Any]


def record_to_row(record: MemoryRecord) -> Row:
    """A ``MemoryRecord`` as plain msgpack data (embedding as little-endian float32 bytes)."""
    try:
        metadata = json.loads(json.dumps(record.metadata))  # what LanceDB keeps: JSON only
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"memory record {record.id!r}: metadata must be JSON-serialisable ({exc})") from None
    emb = record.embedding
    return {
        "id": str(record.id),
        "content": str(record.content),
        "scope": str(record.scope),
        "categories": [str(c) for c in record.categories],
        "metadata": metadata,
        "importance": float(record.importance),
        "created_at": record.created_at.isoformat(),
        "last_accessed": record.last_accessed.isoformat(),
        "source": record.source or None,
        "private": bool(record.private),
        "embedding": np.asarray(emb, dtype="<f4").tobytes() if emb else None,
    }


def row_to_record(row: Row) -> MemoryRecord:
    emb = row.get("embedding")
    return MemoryRecord(
        id=row["id"],
        content=row["content"],
        scope=row["scope"],
        categories=list(row["categories"]),
        metadata=dict(row["metadata"]),
        importance=row["importance"],
        created_at=datetime.fromisoformat(row["created_at"]),
        last_accessed=datetime.fromisoformat(row["last_accessed"]),
        embedding=np.frombuffer(emb, dtype="<f4").astype(float).tolist() if emb else None,
        source=row.get("source"),
        private=bool(row.get("private", False)),
    )


def memory_payload(rows: dict[str, Row]) -> dict[str, Any]:
    """The state-layer payload of a memory: records keyed by id (key-wise diff and merge work)."""
    return {"kind": MEMORY_KIND, "v": 1, "records": {rid: dict(r) for rid, r in rows.items()}}


def rows_from_payload(payload: Any) -> dict[str, Row]:
    if not isinstance(payload, dict) or payload.get("kind") != MEMORY_KIND:
        raise AgentSnapError("this snapshot holds no CrewAI memory (take it with AgentsnapStorage.snapshot)")
    return {str(k): dict(v) for k, v in payload["records"].items()}


def _in_scope(scope: str, prefix: str | None) -> bool:
    """LanceDB's ``scope LIKE 'prefix%'`` after stripping trailing slashes (no filter for '/')."""
    if prefix is None or not prefix.strip("/"):
        return True
    return scope.startswith(prefix.rstrip("/"))


def _in_delete_scope(scope: str, prefix: str | None) -> bool:
    """The records ``delete(scope_prefix=...)`` takes: LanceDB 1.15's ``delete`` reads ``facts`` as ``/facts`` (as its
    ``list_records``, ``count`` and ``get_scope_info`` do, and as ``Memory`` writes scopes); a record stored under the
    bare ``facts`` (written without a root scope) is taken too, as before."""
    if _in_scope(scope, prefix):
        return True
    return prefix is not None and not prefix.startswith("/") and _in_scope(scope, "/" + prefix)


def _matches(row: Row, categories: list[str] | None, metadata_filter: dict[str, Any] | None) -> bool:
    if categories and not any(c in row["categories"] for c in categories):
        return False
    if metadata_filter and not all(row["metadata"].get(k) == v for k, v in metadata_filter.items()):
        return False
    return True


class AgentsnapStorage:
    """A complete CrewAI ``StorageBackend`` kept in an agentsnap repository.

    Args:
        repo: a :class:`agentsnap_core.Repo` or the path of one (created when missing; a tree whose store is
            outside it, ``agentsnap init --store-dir``, is found again even once its link file was deleted).
        branch: the agentsnap branch that holds this memory's snapshots.
        vector_dim: the embedding size; learnt from the first embedding when None.

    Use it as ``Memory(storage=AgentsnapStorage(path))``, or for every ``Memory`` built from a
    storage string with :func:`agentsnap_crewai.register_memory_storage`.
    """

    #: how CrewAI checkpoints (pydantic, ``mode="json"``) write a Memory holding this storage: its storage string,
    #: which ``Memory(storage="agentsnap:<path>#<branch>")`` turns back into a storage after register_memory_storage()
    __pydantic_serializer__ = SchemaSerializer(
        core_schema.any_schema(serialization=core_schema.plain_serializer_function_ser_schema(lambda s: s.spec))
    )

    def __init__(self, repo: Repo | str | os.PathLike[str], branch: str = DEFAULT_BRANCH, vector_dim: int | None = None) -> None:
        self._own_repo = not isinstance(repo, Repo)
        self.repo = repo if isinstance(repo, Repo) else _open_or_init(Path(repo))
        self.branch = check_ref_name(branch)
        self._lock = threading.RLock()
        self._rows: dict[str, Row] = {}
        self._vector_dim = vector_dim or 0
        self._base: str | None = None
        self._offset = 0  # journal bytes already applied to ``_rows``
        self._generation: bytes | None = None  # the journal generation ``_offset`` counts in (see _catch_up)
        self._lock_file: Any = None
        self._depth = 0
        with self._locked():  # loads the branch head and replays the journal
            pass

    # ------------------------------------------------------------------ identity
    @property
    def ref(self) -> str:
        return f"refs/heads/{self.branch}"

    @property
    def spec(self) -> str:
        """The storage string for ``Memory(storage=...)`` (see :func:`agentsnap_crewai.register_memory_storage`)."""
        return f"agentsnap:{self.repo.root}#{self.branch}"

    @property
    def head(self) -> str | None:
        """The snapshot this memory was last snapshotted to or restored from."""
        return self._base

    @property
    def _journal_path(self) -> Path:
        return self.repo.wt_dir / "crewai" / f"memory-{_JOURNAL_SAFE.sub('_', self.branch)}.journal"

    def __repr__(self) -> str:
        return f"AgentsnapStorage({str(self.repo.root)!r}, branch={self.branch!r}, records={len(self._rows)})"

    # ------------------------------------------------------------------ journal
    # The branch head plus the journal is the truth, shared by every writer of the branch (threads
    # and processes): every operation takes an exclusive file lock and first catches up (reload the
    # head when another writer snapshotted, apply journal entries others appended); a snapshot
    # then holds every write made before it and truncates the journal under the same lock.
    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        with self._lock:
            if self._depth == 0:
                if self._lock_file is None:
                    self._journal_path.parent.mkdir(parents=True, exist_ok=True)
                    self._lock_file = open(self._journal_path.with_suffix(".lock"), "a+b")  # noqa: SIM115 - held for the storage's life
                fcntl.flock(self._lock_file.fileno(), fcntl.LOCK_EX)
            self._depth += 1
            try:
                if self._depth == 1:
                    self._catch_up()
                yield
            finally:
                self._depth -= 1
                if self._depth == 0:
                    fcntl.flock(self._lock_file.fileno(), fcntl.LOCK_UN)

    def _catch_up(self) -> None:
        # A journal emptied by another writer (its snapshot, restore or merge) can have grown past this storage's
        # offset again before this storage looks: neither the head (a restore of the head itself leaves it) nor the
        # size then tells. The generation does: every emptying writes a new one into the lock file (under the lock).
        head = self.repo.refs.get_ref(self.ref)
        generation = self._read_generation()
        if head != self._base or generation != self._generation or self._journal_size() < self._offset:
            rows = rows_from_payload(_memory_part(self.repo.read_layer(head, "state"))) if head else {}
            self._load(rows)
            self._base, self._offset, self._generation = head, 0, generation
        self._replay_journal()

    def _read_generation(self) -> bytes:
        return os.pread(self._lock_file.fileno(), 64, 0)

    def _journal_size(self) -> int:
        try:
            return self._journal_path.stat().st_size
        except FileNotFoundError:
            return 0

    def _journal(self, op: str, arg: Any) -> None:
        path = self._journal_path
        path.parent.mkdir(parents=True, exist_ok=True)
        entry = pack_value([op, arg])  # (a record replayed after a crash keeps its metadata's order)
        with open(path, "ab") as f:
            if f.tell() > self._offset:
                f.truncate(self._offset)  # drop a torn entry left by a crashed writer before appending
            f.write(entry)
            f.flush()
            os.fsync(f.fileno())
        self._offset += len(entry)

    def _replay_journal(self) -> None:
        try:
            with open(self._journal_path, "rb") as f:
                f.seek(self._offset)
                data = f.read()
        except FileNotFoundError:
            return
        unpacker = msgpack.Unpacker(raw=False, strict_map_key=False)
        unpacker.feed(data)
        done = 0
        try:
            for op, arg in unpacker:
                self._apply(op, arg)
                done = unpacker.tell()
        except (ValueError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError):
            pass  # a torn last entry (crash mid-write) is dropped; earlier entries are applied
        self._offset += done

    def _clear_journal(self) -> None:
        """Empty the journal (the caller holds the lock); other writers reload the head at their next operation."""
        generation = uuid.uuid4().hex.encode()
        fd = self._lock_file.fileno()
        os.ftruncate(fd, 0)  # the new generation first: a crash after it only makes the others reload
        os.write(fd, generation)  # (opened for appending: lands at 0 after the truncation)
        with open(self._journal_path, "wb"):
            pass
        self._offset, self._generation = 0, generation

    def _apply(self, op: str, arg: Any) -> None:
        if op == "put":
            for row in arg:
                self._rows.pop(row["id"], None)  # re-insert: a replaced record moves to the end, like LanceDB
                self._rows[row["id"]] = row
                if row.get("embedding") and not self._vector_dim:
                    self._vector_dim = len(row["embedding"]) // 4
        elif op == "delete":
            for rid in arg:
                self._rows.pop(rid, None)
        elif op == "touch":
            for rid in arg["ids"]:
                if rid in self._rows:
                    self._rows[rid] = {**self._rows[rid], "last_accessed": arg["at"]}
        elif op == "reset":
            if arg is None:
                self._rows.clear()
                self._vector_dim = 0
            else:
                for rid in [r for r, row in self._rows.items() if _reset_match(row["scope"], arg)]:
                    del self._rows[rid]

    def _write(self, op: str, arg: Any) -> None:
        with self._locked():
            self._journal(op, arg)
            self._apply(op, arg)

    def _load(self, rows: dict[str, Row]) -> None:
        self._rows = dict(rows)
        self._vector_dim = next((len(r["embedding"]) // 4 for r in rows.values() if r.get("embedding")), 0)

    # ------------------------------------------------------------------ StorageBackend
    def save(self, records: list[MemoryRecord]) -> None:
        if not records:
            return
        dim = None
        for r in records:
            if r.embedding:
                if dim is None:
                    dim = len(r.embedding)
                elif len(r.embedding) != dim:
                    raise EmbeddingDimensionMismatchError(dim, len(r.embedding))
        if dim and self._vector_dim and dim != self._vector_dim:
            raise EmbeddingDimensionMismatchError(self._vector_dim, dim)
        self._write("put", [record_to_row(r) for r in records])

    def update(self, record: MemoryRecord) -> None:
        """Replace the record with the same id (or add it)."""
        if record.embedding and self._vector_dim and len(record.embedding) != self._vector_dim:
            raise EmbeddingDimensionMismatchError(self._vector_dim, len(record.embedding))
        self._write("put", [record_to_row(record)])

    def touch_records(self, record_ids: list[str]) -> None:
        """Set ``last_accessed`` of the given records to now (what ``Memory.recall`` calls)."""
        if record_ids:
            self._write("touch", {"ids": list(record_ids), "at": datetime.utcnow().isoformat()})

    def get_record(self, record_id: str) -> MemoryRecord | None:
        with self._locked():
            row = self._rows.get(str(record_id))
        return row_to_record(row) if row else None

    def search(
        self,
        query_embedding: list[float],
        scope_prefix: str | None = None,
        categories: list[str] | None = None,
        metadata_filter: dict[str, Any] | None = None,
        limit: int = 10,
        min_score: float = 0.0,
    ) -> list[tuple[MemoryRecord, float]]:
        with self._locked():
            rows = [r for r in self._rows.values() if _in_scope(r["scope"], scope_prefix)]
        if not rows:
            return []
        if self._vector_dim and len(query_embedding) != self._vector_dim:
            raise EmbeddingDimensionMismatchError(self._vector_dim, len(query_embedding))
        dim = self._vector_dim or len(query_embedding)
        matrix = np.zeros((len(rows), dim), dtype=np.float32)
        for i, r in enumerate(rows):
            if r.get("embedding"):
                matrix[i] = np.frombuffer(r["embedding"], dtype="<f4")
        diff = matrix - np.asarray(query_embedding, dtype=np.float32)
        distances = np.einsum("ij,ij->i", diff, diff)
        order = np.argsort(distances, kind="stable")
        # like LanceDB: fetch 3x the limit when post-filters apply, then filter
        candidates = order[: limit * 3 if (categories or metadata_filter) else limit]
        out: list[tuple[MemoryRecord, float]] = []
        for i in candidates:
            row = rows[int(i)]
            if not _matches(row, categories, metadata_filter):
                continue
            score = 1.0 / (1.0 + float(distances[int(i)]))
            if score >= min_score:
                out.append((row_to_record(row), score))
            if len(out) >= limit:
                break
        return out[:limit]

    def delete(
        self,
        scope_prefix: str | None = None,
        categories: list[str] | None = None,
        record_ids: list[str] | None = None,
        older_than: datetime | None = None,
        metadata_filter: dict[str, Any] | None = None,
    ) -> int:
        """Delete matching records; returns how many were deleted.

        ``record_ids`` alone deletes exactly those ids (other criteria are then ignored, as in
        LanceDB); otherwise every given criterion must match. A scope prefix without its leading
        ``/`` names the same scope as with it (``"facts"`` = ``"/facts"``, as LanceDB's delete and
        ``list_records`` read it). Unlike LanceDB 1.15, a scope prefix does not also delete records
        in the root scope ``/``.
        """
        if isinstance(record_ids, (str, bytes)):  # iterating it would delete the records named by its characters
            raise InvalidInput(f"record_ids must be a list of record ids, not a {type(record_ids).__name__} "
                               f"({record_ids!r}); to delete that record pass [{record_ids!r}]")
        with self._locked():
            if record_ids and not (categories or metadata_filter):
                ids = [rid for rid in dict.fromkeys(str(r) for r in record_ids) if rid in self._rows]
            else:
                cutoff = older_than.isoformat() if older_than is not None else None
                ids = [
                    rid
                    for rid, row in self._rows.items()
                    if _in_delete_scope(row["scope"], scope_prefix)
                    and _matches(row, categories, metadata_filter)
                    and (cutoff is None or row["created_at"] < cutoff)
                ]
            if ids:
                self._write("delete", ids)
            return len(ids)

    def _rows_in(self, scope_prefix: str | None) -> list[Row]:
        with self._locked():
            return [r for r in self._rows.values() if _in_scope(r["scope"], scope_prefix)]

    def list_records(self, scope_prefix: str | None = None, limit: int = 200, offset: int = 0) -> list[MemoryRecord]:
        """Records in a scope, newest ``created_at`` first."""
        if limit <= 0 or offset < 0:
            return []
        if scope_prefix is not None and scope_prefix.strip("/") and not scope_prefix.startswith("/"):
            scope_prefix = "/" + scope_prefix
        rows = sorted(self._rows_in(scope_prefix), key=lambda r: r["created_at"], reverse=True)
        return [row_to_record(r) for r in rows[offset : offset + limit]]

    def get_scope_info(self, scope: str) -> ScopeInfo:
        scope = scope.rstrip("/") or "/"
        prefix = scope if scope != "/" else ""
        if prefix and not prefix.startswith("/"):
            prefix = "/" + prefix
        rows = self._rows_in(prefix or None)
        if not rows:
            return ScopeInfo(path=scope, record_count=0, categories=[], child_scopes=[])
        child_prefix = (prefix + "/") if prefix else "/"
        children = {child_prefix + r["scope"][len(child_prefix) :].split("/", 1)[0] for r in rows if r["scope"].startswith(child_prefix)}
        children.discard(child_prefix)
        created = [datetime.fromisoformat(r["created_at"]) for r in rows]
        return ScopeInfo(
            path=scope,
            record_count=len(rows),
            categories=sorted({c for r in rows for c in r["categories"]}),
            oldest_record=min(created),
            newest_record=max(created),
            child_scopes=sorted(children),
        )

    def list_scopes(self, parent: str = "/") -> list[str]:
        parent = parent.rstrip("/") or ""
        prefix = (parent + "/") if parent else "/"
        children: set[str] = set()
        for r in self._rows_in(prefix if prefix != "/" else None):
            sc = r["scope"]
            if sc.startswith(prefix) and sc != (prefix.rstrip("/") or "/"):
                first = sc[len(prefix) :].split("/", 1)[0]
                if first:
                    children.add(prefix + first)
        return sorted(children)

    def list_categories(self, scope_prefix: str | None = None) -> dict[str, int]:
        counts: dict[str, int] = {}
        for r in self._rows_in(scope_prefix):
            for c in r["categories"]:
                counts[c] = counts.get(c, 0) + 1
        return counts

    def count(self, scope_prefix: str | None = None) -> int:
        if scope_prefix is None or not scope_prefix.strip("/"):
            with self._locked():
                return len(self._rows)
        return self.get_scope_info(scope_prefix).record_count

    def reset(self, scope_prefix: str | None = None) -> None:
        """Delete every record (``None`` or ``/``) or those at or below a scope."""
        if scope_prefix is None or not scope_prefix.strip("/"):
            self._write("reset", None)
        else:
            self._write("reset", scope_prefix.rstrip("/"))

    async def asave(self, records: list[MemoryRecord]) -> None:
        self.save(records)

    async def asearch(
        self,
        query_embedding: list[float],
        scope_prefix: str | None = None,
        categories: list[str] | None = None,
        metadata_filter: dict[str, Any] | None = None,
        limit: int = 10,
        min_score: float = 0.0,
    ) -> list[tuple[MemoryRecord, float]]:
        return self.search(query_embedding, scope_prefix, categories, metadata_filter, limit, min_score)

    async def adelete(
        self,
        scope_prefix: str | None = None,
        categories: list[str] | None = None,
        record_ids: list[str] | None = None,
        older_than: datetime | None = None,
        metadata_filter: dict[str, Any] | None = None,
    ) -> int:
        return self.delete(scope_prefix, categories, record_ids, older_than, metadata_filter)

    def close(self) -> None:
        """Release the repository when this storage opened it (``Memory.close`` calls this)."""
        if self._lock_file is not None:
            self._lock_file.close()
            self._lock_file = None
        if self._own_repo:
            self.repo.close()

    # ------------------------------------------------------------------ snapshots
    def rows(self) -> dict[str, Row]:
        """A copy of every record as plain data, keyed by id, in insertion order."""
        with self._locked():
            return {rid: dict(r) for rid, r in self._rows.items()}

    def payload(self) -> dict[str, Any]:
        """The state-layer payload of the current contents."""
        return memory_payload(self.rows())

    def load_payload(self, payload: Any) -> None:
        """Replace the contents with a state-layer payload (durably journalled, not yet snapshotted)."""
        rows = rows_from_payload(_memory_part(payload))
        with self._locked():
            self._write("reset", None)
            self._write("put", list(rows.values()))

    def mark_snapshotted(self, snapshot_id: str) -> None:
        """Record that the current contents are exactly snapshot ``snapshot_id`` (journal cleared)."""
        with self._locked():
            self._clear_journal()
            self._base = snapshot_id

    @property
    def dirty(self) -> bool:
        """True when there are writes since the last snapshot or restore."""
        with self._locked():
            return self._offset > 0 or self._base is None

    def snapshot(self, message: str = "crewai memory", *, meta: dict[str, Any] | None = None, force: bool = False) -> Snapshot:
        """Snapshot the memory on this storage's branch (parent: the branch's previous head).

        Without writes since the last snapshot/restore, the existing snapshot is returned unless ``force``.
        """
        with self._locked():
            if not force and not self.dirty and self._base is not None:
                return self.repo.get(self._base)
            snap = self.repo.snapshot(
                message,
                agent="crewai.memory",
                layers={"state": self.payload()},
                trace=[],
                capture_world=False,
                ref=self.ref,
                meta={"records": len(self._rows), **(meta or {})},
            )
            self._clear_journal()
            self._base = snap.id
            return snap

    def restore(self, spec: str | Snapshot) -> Snapshot:
        """Replace the contents with snapshot ``spec`` (a memory or crew snapshot) and move the branch there.

        Unsnapshotted writes are discarded. Raises before changing anything when ``spec`` holds
        no CrewAI memory.
        """
        snap = spec if isinstance(spec, Snapshot) else self.repo.get(spec)
        rows = rows_from_payload(_memory_part(self.repo.read_layer(snap, "state")))
        with self._locked():
            from agentsnap_core.stores.base import ANY, RefUpdate

            self.repo.update_refs([RefUpdate(self.ref, snap.id, ANY)], f"crewai memory: restore {snap.id[:12]}")
            self._clear_journal()
            self._load(rows)
            self._base = snap.id
        return snap

    def fork(self, branch: str, at: str | None = None) -> AgentsnapStorage:
        """A new storage on ``branch``, starting from snapshot ``at`` (default: a fresh snapshot of this one).

        The fork and this storage then change independently.
        """
        from agentsnap_core.stores.base import RefUpdate

        check_ref_name(branch)
        if self.repo.refs.get_ref(f"refs/heads/{branch}") is not None:  # before snapshotting anything
            raise InvalidInput(f"branch {branch!r} already exists; fork to a new name, or open it with "
                               f"AgentsnapStorage(repo, branch={branch!r})")
        oid = self.repo.resolve(at) if at else self.snapshot(f"crewai memory: fork to {branch}").id
        rows_from_payload(_memory_part(self.repo.read_layer(oid, "state")))  # validate before creating the branch
        self.repo.update_refs([RefUpdate(f"refs/heads/{branch}", oid, None)], f"crewai memory: fork {branch}")
        return AgentsnapStorage(self.repo, branch=branch)


def _memory_part(state: Any) -> Any:
    """The memory payload inside a state layer (a memory snapshot, or a crew snapshot holding one)."""
    if isinstance(state, dict) and state.get("kind") != MEMORY_KIND and isinstance(state.get("memory"), dict):
        return state["memory"]
    return state


def _reset_match(scope: str, prefix: str) -> bool:
    return scope == prefix or scope.startswith(prefix + "/")


def _open_or_init(path: Path) -> Repo:
    if path.exists() and not path.is_dir():
        raise InvalidInput(f"{str(path)!r} is a file; an agentsnap repository is a directory (give a directory's path)")
    if (path / ".agentsnap").exists():
        return Repo.open(path)
    found = Repo.open_at(path)  # a tree whose store is outside it (init --store-dir) and whose link was deleted
    return found if found is not None else Repo.init(path)
