"""A checkpoint provider for CrewAI's ``CheckpointConfig``: crew/flow checkpoints as agentsnap snapshots.

``CheckpointConfig(location=<repo path>, provider=AgentsnapCheckpointProvider())`` makes every
checkpoint a snapshot on the agentsnap branch ``crewai/<CrewAI branch>`` whose parent is the
previous checkpoint (CrewAI's ``parent_id``). Checkpoint ids are snapshot ids.

The checkpoint JSON CrewAI hands over is stored as it is, as one content-addressed blob (FastCDC chunks,
zstd): consecutive checkpoints of a growing run share most chunks, and nothing is parsed or re-encoded.
By default a checkpoint is written behind (:mod:`agentsnap_crewai.writer`): the call queues CrewAI's JSON and returns
a checkpoint id at once (32 hex digits, resolvable wherever a snapshot id is taken here), a background writer commits
the snapshots in order; durable by the end of ``kickoff()``, on ``flush()``, at exit and before any read through this
package. Before it returns, the call also appends the checkpoint to its process's journal (:mod:`agentsnap_crewai.journal`,
no fsync), so a killed process loses none: :func:`recover` commits what a dead process's writer had not (run by every
open of the store and every read through this package). ``AgentsnapCheckpointProvider(durable=True)`` commits in the
call and returns the snapshot id.

CrewAI 1.15 accepts only its own provider types in ``CheckpointConfig.provider`` and ``Crew.from_checkpoint``
reads a file path, so this provider is a ``JsonProvider`` subclass (``provider_type == "json"``); the
location it returns names ``<store>/crewai/checkpoints/<id>.json``, a file written only on demand by
:func:`checkpoint_path` (what ``restore_from`` needs), never once per checkpoint.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from agentsnap_core import Repo
from agentsnap_core.errors import AgentSnapError, InvalidRefName, UnknownSnapshot
from agentsnap_core.format import content
from agentsnap_core.format.objects import is_oid
from agentsnap_core.layers import reach
from agentsnap_core.layers.reach import UntrustedSettings  # noqa: F401 - re-exported by the package
from agentsnap_core.layers.redact import may_hold_secret, redact
from agentsnap_core.repository.repo import check_ref_name
from crewai.hooks.dispatch import HookAborted
from crewai.state.provider.json_provider import JsonProvider
from pydantic import Field, PrivateAttr, field_validator

from .journal import dead_journal, frame, journal_dir, journals, read_entries
from .storage import _open_or_init
from .writer import CheckpointWriteFailed, Pending, existing_writer, known_ids, settle, writer_for

CHECKPOINT_KIND = "crewai.checkpoint"
DEFAULT_PREFIX = "crewai/"
_WRITE_LOCK = threading.Lock()  # CrewAI writes checkpoints from event-bus worker threads
#: CrewAI appends ``"trigger": "<event type>"`` last to the checkpoint JSON (``checkpoint_listener._do_checkpoint``)
_TRIGGER = re.compile(r'"trigger":\s*"([A-Za-z0-9_.:-]{1,100})"\s*}\s*$')
_TOKEN = re.compile(r"[0-9a-f]{32}")  # the id a written-behind checkpoint is known by (uuid4().hex)
#: the secret-free segments seen by each store's writer (used by that writer's thread only)
_CLEAN: dict[str, _CleanSegments] = {}


def is_checkpoint_token(value: object) -> bool:
    """True for the id of a written-behind checkpoint (as CrewAI's ``parent_id`` and ``checkpoint_id`` carry it)."""
    return isinstance(value, str) and _TOKEN.fullmatch(value) is not None


#: between the objects of a list in CrewAI's JSON (json.dumps): tasks, agents, events. A secret core's ``redact`` finds
#: never spans it (``may_hold_secret``'s hints hold no brace, its URL shape no space), so scanning segments suffices
_SEGMENT = "}, {"


class _CleanSegments:
    """Hashes of checkpoint segments already scanned and found free of secret hints.

    Consecutive checkpoints of a run repeat most of their tasks, agents and events: only segments not seen before
    are scanned, instead of the whole JSON each time.
    """

    def __init__(self, limit: int = 200_000) -> None:
        self.seen: set[int] = set()
        self.limit = limit

    def clean(self, data: str) -> bool:
        """True when ``data`` holds no secret hint (then its segments are remembered as clean)."""
        segments = data.split(_SEGMENT)
        new = [seg for seg in segments if hash(seg) not in self.seen]
        if may_hold_secret("\0".join(new)):
            return False
        if len(self.seen) > self.limit:
            self.seen.clear()
        self.seen.update(hash(seg) for seg in new)
        return True


def redact_checkpoint(data: str, clean: _CleanSegments | None = None) -> tuple[str, dict[str, str]]:
    """``(data, {path: reason})``: the checkpoint JSON with secrets redacted by core's shared ``redact``.

    CrewAI's checkpoint holds every agent's LLM config (``api_key``, ``base_url``), the crew's inputs and the
    task descriptions they were interpolated into. Unchanged (and not parsed) when nothing secret-looking is in it.
    """
    if (clean or _CleanSegments()).clean(data):
        return data, {}
    found = redact(json.loads(data))
    if not found.paths:
        return data, {}
    return json.dumps(found.value), found.paths


#: keys whose values are the run's data (task outputs, kickoff inputs, messages), never settings CrewAI acts on
_DATA_KEYS = frozenset({"output", "outputs", "tasks_output", "inputs", "messages", "raw", "json_dict", "pydantic",
                        "description", "expected_output", "backstory", "goal"})


def outside_settings(runtime: Any) -> dict[str, str]:
    """``{JSON path: value}`` of a checkpoint's settings that reach outside the process when CrewAI builds it
    (core's :func:`agentsnap_core.layers.reach.outside_settings`): a model's or embedder's endpoint (an
    ``OpenAICompletion`` without an ``api_key`` sends ``OPENAI_API_KEY`` to its ``base_url``) and ``mcps`` (CrewAI
    1.15 starts an ``MCPServerStdio``'s command, or connects to the server, at ``kickoff()``)."""
    return reach.outside_settings(runtime, data_keys=_DATA_KEYS)


def check_settings(repo: Repo, snapshot: str, runtime: Any, *, trust: bool = False, allowed: set[str] | None = None,
                   remedy: str = "Resume it with resume_crew(..., llm=...) to use your own model") -> None:
    """Refuse (:class:`UntrustedSettings`) a checkpoint naming endpoints or MCP servers this store never used itself
    (a clone's, a pull's, a crafted one's), apart from the paths in ``allowed`` (what the caller's live objects
    replace)."""
    reach.check(repo, snapshot, outside_settings(runtime), remedy=remedy, trust=trust, allowed=allowed or ())


def _materialised(repo: Repo, oid: str) -> Path:
    return repo.store_dir / "crewai" / "checkpoints" / f"{oid}.json"


def _failure_log(repo: Repo) -> Path:
    """Where the checkpoints CrewAI failed to write at this location are noted (one JSON line each)."""
    return repo.store_dir / "crewai" / "failed.jsonl"


def _left_behind(repo: Repo, heads: list[str]) -> list[str]:
    """Snapshots a branch pointed at before it moved elsewhere (the reflog), that no branch reaches any more.

    A run resumed from an earlier checkpoint of its branch (``resume_crew(repo, "crewai/main~1")``,
    ``Crew.from_checkpoint``) or a fork onto a branch that exists continues on that CrewAI branch, as CrewAI does:
    the agentsnap branch moves to the new checkpoint, and the checkpoints after the one resumed are then on no
    branch. JsonProvider keeps their files; here their ids must stay resolvable too (the reflog keeps them from gc).
    """
    on_branch = set(heads)
    out = []
    for entry in repo.refs.reflog():
        for oid in (entry.old, entry.new):
            if oid and oid not in on_branch and repo.objects.has(oid):
                on_branch.add(oid)
                out.append(oid)
    return out


def _checkpoint_snapshots(repo: Repo) -> Any:
    """Every snapshot on a branch, newest first, then those only the reflog still names (:func:`_left_behind`)."""
    heads = list(repo.refs.list_refs("refs/heads/").values())
    seen: set[str] = set()
    for snap in repo.walk(heads):
        seen.add(snap.id)
        yield snap
    for snap in repo.walk(_left_behind(repo, heads), past_unreadable=True):
        if snap.id not in seen:
            yield snap


def _committed_ids(repo: Repo) -> dict[str, str]:
    """Checkpoint id -> snapshot id of every written-behind checkpoint of ``repo`` (on a branch or left behind)."""
    out = {}
    for snap in _checkpoint_snapshots(repo):
        token = snap.manifest.get("meta", {}).get("crewai_id")
        if token:
            out[token] = snap.id
    return out


def _ignore(exc: BaseException) -> None:
    return None


def recover(repo: Repo) -> int:
    """Commit the checkpoints that processes which died left in their journals, then remove those journals.

    Exactly once: a journal is replayed under its flock (a live process's, or one being replayed, is skipped); an
    entry whose checkpoint id is already on a branch is skipped (a crash between a commit and the journal's removal,
    here or in the dead writer, duplicates nothing); the journal is removed only after its commit. The number committed.
    A journal that cannot be replayed now stays for the next open (said on stderr).
    """
    paths = journals(journal_dir(repo.store_dir))
    count = 0
    for path in paths:
        with dead_journal(path) as fd:
            if fd is None:
                continue
            entries = read_entries(fd)
            if entries:
                done = _committed_ids(repo)
                todo = [Pending(data, m["ref"], m["branch"], m.get("parent"), m.get("trigger"), m["id"], _ignore)
                        for m, data in entries if m.get("id") not in done]
                errors = [err for _, err in _commit_all(repo, todo, done) if err is not None] if todo else []
                if errors:
                    print(f"agentsnap: {len(errors)} CrewAI checkpoint(s) left in {path} by a process that died could not be "
                          f"committed yet ({type(errors[0]).__name__}: {errors[0]}); kept for the next open", file=sys.stderr)
                    continue
                count += len(todo)
            path.unlink(missing_ok=True)
    return count


def _caught_up(repo: Repo) -> None:
    """Read-your-writes: this process's queued checkpoints committed, and those dead processes journaled."""
    settle(repo.root)
    recover(repo)


def checkpoint_failures(repo: Repo) -> list[dict[str, Any]]:
    """The checkpoints CrewAI failed to write at this repository, oldest first (``at``, ``branch``, ``trigger``, ``error``)."""
    _caught_up(repo)  # a background commit that fails is noted here
    try:
        lines = _failure_log(repo).read_text(encoding="utf-8").splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        try:
            out.append(dict(json.loads(line)))
        except ValueError:
            continue  # a line cut short by a crash
    return out


def _describe(failure: dict[str, Any]) -> str:
    return f"{failure.get('trigger') or 'manual'} on branch {failure.get('branch')!r}: {failure.get('error')}"


class NoCheckpoint(UnknownSnapshot):
    """``spec`` names no checkpoint, and CrewAI failed to write checkpoints at this location: the message says why."""

    def __init__(self, spec: str, failures: list[dict[str, Any]]) -> None:
        super().__init__(spec)
        self.failures = failures
        last = failures[-1]
        self.args = (f"{self.args[0]}; {len(failures)} CrewAI checkpoint(s) at this location failed, the last at "
                     f"{last.get('at')}: {_describe(last)}",)


class InvalidBranch(InvalidRefName, ValueError):
    """A CrewAI branch name agentsnap refuses (``ValueError``, as JsonProvider's own refusal)."""

    def __init__(self, message: str, name: str) -> None:
        self.name = name
        Exception.__init__(self, message)


class CheckpointFailed(HookAborted):
    """CrewAI could not write checkpoint(s) of this run (CrewAI itself only logs that and goes on).

    Raised at the end of the run (``kickoff()``), so the run is not mistaken for a resumable one; ``output`` holds
    the run's result and ``failures`` what failed (``trigger``, ``branch``, ``error``).
    """

    def __init__(self, failures: list[dict[str, Any]], output: Any = None) -> None:
        self.failures = failures
        self.output = output
        super().__init__(
            f"agentsnap: {len(failures)} CrewAI checkpoint(s) of this run were not written, the first: {_describe(failures[0])}; "
            "the run finished, its result is on this exception's .output",
            source="agentsnap_crewai",
        )


def _find_token(repo: Repo, token: str) -> str | None:
    """The snapshot of the written-behind checkpoint ``token`` (committed by any process), or None."""
    known = known_ids(repo.root).get(token)
    if known:
        return known
    for snap in _checkpoint_snapshots(repo):  # also one a resume from an earlier checkpoint left behind
        if snap.manifest.get("meta", {}).get("crewai_id") == token:
            return snap.id
    return None


def resolve_checkpoint(repo: Repo, spec: str) -> str:
    """The snapshot id of checkpoint ``spec`` (a checkpoint id as CrewAI reports it, a snapshot id, branch or tag).

    Every checkpoint this process handed to the background writer is committed first (read-your-writes), and those
    processes that died journaled (:func:`recover`).
    """
    _caught_up(repo)
    if is_checkpoint_token(spec):
        oid = _find_token(repo, spec)
        if oid is None:
            raise UnknownSnapshot(spec)
        return oid
    return repo.resolve(spec)


def checkpoint_data(repo: Repo, spec: str) -> str:
    """The CrewAI checkpoint JSON held by checkpoint ``spec`` (checkpoint id, snapshot id, branch or tag)."""
    try:
        snap = repo.get(resolve_checkpoint(repo, spec))
    except UnknownSnapshot:
        failures = checkpoint_failures(repo)
        if failures:
            raise NoCheckpoint(spec, failures) from None
        raise
    payload = repo.read_layer(snap, "state")
    if not isinstance(payload, dict) or payload.get("kind") != CHECKPOINT_KIND:
        raise AgentSnapError(f"snapshot {snap.id[:12]} is not a CrewAI checkpoint")
    if payload.get("v") == 1:  # checkpoints written before the JSON was kept as a blob
        return json.dumps(payload["runtime"])
    return content.get_bytes(repo.objects, payload["runtime"]).decode("utf-8")


def checkpoint_runtime(repo: Repo, spec: str) -> dict[str, Any]:
    """The CrewAI runtime state of checkpoint ``spec``, parsed."""
    return dict(json.loads(checkpoint_data(repo, spec)))


def checkpoint_path(repo: Repo | str | Path, spec: str, *, trust_settings: bool = False) -> str:
    """A path for ``CheckpointConfig(restore_from=...)`` for snapshot ``spec`` (the JSON is written there now).

    ``spec`` may be a checkpoint id, a snapshot id, an agentsnap branch (``crewai/main``) or tag. A checkpoint this
    store did not write whose settings reach outside the process (model endpoints, MCP servers:
    :func:`outside_settings`) is refused (:class:`UntrustedSettings`) unless ``trust_settings``: CrewAI builds them
    as they are.
    """
    repo = repo if isinstance(repo, Repo) else Repo.open(repo)
    oid = resolve_checkpoint(repo, spec)
    data = checkpoint_data(repo, oid)
    if not trust_settings and reach.may_reach_out(data):
        check_settings(repo, oid, json.loads(data),
                       remedy="Resume it with resume_crew(..., llm=...) to use your own model and no MCP servers")
    path = _materialised(repo, oid)
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(data, encoding="utf-8")
        tmp.replace(path)
    return str(path)


class AgentsnapCheckpointProvider(JsonProvider):
    """Writes CrewAI checkpoints as agentsnap snapshots (``location`` = the repository path).

    ``durable=False`` (default): written behind, see :mod:`agentsnap_crewai.writer` for the durability;
    ``durable=True``: each call returns once its snapshot is committed and fsync'd. ``max_pending``: checkpoints
    a store's background writer may hold queued before a call waits (a killed process loses none: they are journaled).
    """

    branch_prefix: str = Field(default=DEFAULT_PREFIX, description="agentsnap branch = prefix + CrewAI branch")
    durable: bool = Field(default=False, description="commit each checkpoint in the call instead of writing behind")
    max_pending: int = Field(default=32, ge=1, description="checkpoints queued for the background writer at most")
    _repos: dict[str, Repo] = PrivateAttr(default_factory=dict)
    _failures: list[dict[str, Any]] = PrivateAttr(default_factory=list)  # of the current run, raised at its end
    _started: list[tuple[str, str | None, str | None]] = PrivateAttr(default_factory=list)  # (location, branch, trigger)
    _ended: int = PrivateAttr(default=0)  # checkpoints of the current run that completed or failed

    def model_post_init(self, __context: Any) -> None:
        super().model_post_init(__context)
        _install_kickoff_guard()

    @field_validator("branch_prefix")
    @classmethod
    def _valid_prefix(cls, value: str) -> str:
        check_ref_name(value + "x")  # a prefix such as "crewai/" must make valid names
        return value

    def _ref(self, branch: str) -> str:
        """The agentsnap ref of CrewAI branch ``branch`` (validated: ``a..b``, ``x~1`` are refused).

        Raises :class:`InvalidBranch`, a ``ValueError`` as JsonProvider raises for a branch it refuses.
        """
        try:
            return f"refs/heads/{check_ref_name(self.branch_prefix + branch)}"
        except InvalidRefName as exc:
            escapes = branch.startswith("/") or ".." in Path(branch).parts
            raise InvalidBranch(f"CrewAI checkpoint branch {branch!r} refused"
                                f"{': escapes checkpoint directory' if escapes else ''} ({exc})", branch) from None

    def _repo(self, location: str) -> Repo:
        """The repository at ``location``, opened once per provider (CrewAI checkpoints often)."""
        key = str(Path(location).resolve())
        repo = self._repos.get(key)
        if repo is None:
            repo = self._repos[key] = _open_or_init(Path(location))
            recover(repo)  # what a process that died before its writer committed left journaled
        return repo

    def _record_failure(self, location: str, branch: str | None, trigger: str | None, error: str) -> None:
        """Note a checkpoint CrewAI failed to write: for the end of this run, and in the store for a later resume."""
        entry = {"at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "branch": branch or "main", "trigger": trigger,
                 "error": " ".join(error.split())[:500]}
        with _WRITE_LOCK:
            self._failures.append(entry)
            try:
                log = _failure_log(self._repo(location))
                log.parent.mkdir(parents=True, exist_ok=True)
                with log.open("a", encoding="utf-8") as f:
                    f.write(json.dumps(entry) + "\n")
            except (OSError, AgentSnapError):
                pass  # the store itself is what failed; the run still hears of it at its end

    def _take_failures(self) -> list[dict[str, Any]]:
        """The failures of the run so far, checkpoints that started and never ended included; a new run begins."""
        with _WRITE_LOCK:
            lost = self._started[self._ended :] if len(self._started) > self._ended else []
            self._started, self._ended = [], 0
        for location, branch, trigger in lost:  # CrewAI's worker died outside its `except Exception` (no event)
            self._record_failure(location, branch, trigger, "CrewAI's checkpoint worker raised outside its error handling "
                                 "(e.g. pydantic's PanicException 'dictionary changed size during iteration'): not written")
        with _WRITE_LOCK:
            taken, self._failures = self._failures, []
            return taken

    def _roots(self) -> list[Path]:
        with _WRITE_LOCK:
            return [repo.root for repo in self._repos.values()]

    def flush(self) -> None:
        """Commit every checkpoint this provider's stores have queued; raise :class:`CheckpointWriteFailed` if any failed."""
        failures: list[tuple[str, BaseException]] = []
        for root in self._roots():
            writer = existing_writer(root)
            try:
                if writer is not None:
                    writer.flush()
            except CheckpointWriteFailed as exc:
                failures += exc.failures
        if failures:
            raise CheckpointWriteFailed(failures)

    def _settle(self) -> None:
        """Commit every queued checkpoint of this provider's stores; failures are already noted, and dropped here."""
        try:
            self.flush()
        except CheckpointWriteFailed:
            pass  # each was noted (on_error) in this run's failures and in the store's failure log

    def close(self) -> None:
        """Commit what is queued, then close the repositories this provider opened."""
        self._settle()
        with _WRITE_LOCK:
            for repo in self._repos.values():
                repo.close()
            self._repos.clear()

    def checkpoint(self, data: str, location: str, *, parent_id: str | None = None, branch: str = "main") -> str:
        """Hand checkpoint ``data`` to the store's writer; the location of the checkpoint (its id is the file stem).

        Written behind (default): returns at once with a new checkpoint id. ``durable``: returns once committed,
        with the snapshot id. Raises :class:`CheckpointWriteFailed` when an earlier background commit failed.
        """
        ref = self._ref(branch)  # before anything is created
        with _WRITE_LOCK:
            repo = self._repo(location)
        found = _TRIGGER.search(data[-200:])
        trigger = found.group(1) if found else None
        token = None if self.durable else uuid.uuid4().hex

        def on_error(exc: BaseException) -> None:
            if token is not None:  # a durable call raises to CrewAI, which reports the failure itself
                self._record_failure(location, branch, trigger, f"background write: {type(exc).__name__}: {exc}")

        item = Pending(data, ref, branch, parent_id, trigger, token, on_error)
        if token is not None:  # journaled before the call returns: a killed process loses none (see recover)
            item.frame = frame({"id": token, "ref": ref, "branch": branch, "parent": parent_id, "trigger": trigger}, data)
        writer_for(repo.root, _commit_all, self.max_pending, journal_dir(repo.store_dir)).submit(item, wait=self.durable)
        return str(_materialised(repo, token or str(item.oid)))

    async def acheckpoint(self, data: str, location: str, *, parent_id: str | None = None, branch: str = "main") -> str:
        return await asyncio.to_thread(self.checkpoint, data, location, parent_id=parent_id, branch=branch)

    def extract_id(self, location: str) -> str:
        return Path(location).stem

    def _locate(self, location: str) -> tuple[Repo, str]:
        path = Path(location)
        if self._is_ours(location):
            return Repo.open(path.parent.parent.parent.parent), path.stem
        raise AgentSnapError(f"{location} is not an agentsnap checkpoint location (see agentsnap_crewai.checkpoint_path)")

    def _is_ours(self, location: str) -> bool:
        path = Path(location)
        return (path.parent.name == "checkpoints" and path.parent.parent.name == "crewai"
                and (is_oid(path.stem) or is_checkpoint_token(path.stem)))

    def from_checkpoint(self, location: str) -> str:
        """The checkpoint JSON at ``location``: an agentsnap checkpoint, or a plain JSON checkpoint file (JsonProvider's)."""
        if not self._is_ours(location):
            return str(super().from_checkpoint(location))  # FileNotFoundError when missing, as JsonProvider
        repo, oid = self._locate(location)
        try:
            return checkpoint_data(repo, oid)
        finally:
            repo.close()

    async def afrom_checkpoint(self, location: str) -> str:
        return await asyncio.to_thread(self.from_checkpoint, location)

    def prune(self, location: str, max_keep: int, *, branch: str = "main") -> int:
        """Drop the JSON files :func:`checkpoint_path` wrote for all but the newest ``max_keep`` checkpoints on ``branch``.

        The snapshots themselves stay in the branch's history (agentsnap never rewrites it);
        ``checkpoint_path`` writes a dropped file again on demand. Does not wait for checkpoints still queued
        (CrewAI calls it after every checkpoint when ``max_checkpoints`` is set: waiting would make each one
        synchronous); those have no file yet, so not counting them only ever keeps more files.
        """
        ref = self._ref(branch)
        with _WRITE_LOCK:
            repo = self._repo(location)
            head = repo.refs.get_ref(ref)
            if head is None:
                return 0
            chain = [s.id for s in repo.walk([head]) if s.manifest.get("meta", {}).get("crewai_branch") == branch]
            removed = 0
            for oid in chain[max(max_keep, 0) :]:
                p = _materialised(repo, oid)
                if p.exists():
                    p.unlink()
                    removed += 1
            return removed


def _parent(repo: Repo, parent_id: str | None, ids: dict[str, str]) -> str | None:
    """The snapshot of CrewAI's ``parent_id`` (a checkpoint id or snapshot id), or None when it names none."""
    if not parent_id:
        return None
    if is_checkpoint_token(parent_id):
        return ids.get(parent_id) or _find_token(repo, parent_id)
    return parent_id if is_oid(parent_id) and repo.objects.has(parent_id) else None


def _commit_all(repo: Repo, items: list[Pending], ids: dict[str, str]) -> list[tuple[str | None, BaseException | None]]:
    """Commit queued checkpoints as snapshots on their branches, together (run by the store's writer thread).

    One ``Repo.batch()``: one pack, one durability barrier, one SQLite transaction for all of them. A checkpoint
    that cannot be made fails alone; a batch whose commit fails (the disk, a ref moved by another process) fails
    every checkpoint in it (its snapshots stay unreferenced).
    """
    known = dict(ids)
    out: list[tuple[str | None, BaseException | None]] = []
    try:
        with repo.batch():
            for item in items:
                try:
                    oid = _commit(repo, item, known)
                except Exception as exc:
                    out.append((None, exc))
                    continue
                if item.token:
                    known[item.token] = oid
                out.append((oid, None))
    except Exception as exc:
        out = [(None, exc)] * len(items)
    return out


def _commit(repo: Repo, item: Pending, ids: dict[str, str]) -> str:
    """Snapshot one checkpoint on its branch (inside the writer's batch); its id."""
    parent = _parent(repo, item.parent_id, ids)
    parents = [parent] if parent else None  # None: the branch head, as the batch left it
    clean = _CLEAN.setdefault(str(repo.root), _CleanSegments())
    data, redacted = redact_checkpoint(item.data, clean)
    blob = content.put_bytes(repo.objects, data.encode("utf-8"))
    snap = repo.snapshot(
        f"crewai checkpoint ({item.trigger or 'manual'}) on {item.branch}",
        agent="crewai.checkpoint",
        layers={"state": {"kind": CHECKPOINT_KIND, "v": 2, "branch": item.branch, "runtime": blob, "refs": [blob]}},
        trace=[],
        capture_world=False,
        parents=parents,
        ref=item.ref,
        move_head=False,
        meta={"crewai_branch": item.branch, "trigger": item.trigger, "crewai_parent": item.parent_id,
              **({"crewai_id": item.token} if item.token else {}), **({"redacted": redacted} if redacted else {})},
    )
    if reach.may_reach_out(data):  # its endpoints and MCP servers are this store's own (check_settings)
        reach.remember(repo, outside_settings(json.loads(data)))
    return snap.id


_GUARD: list[Any] = []


def _install_kickoff_guard() -> None:
    """Make a CrewAI checkpoint that cannot be written loud (CrewAI 1.15 only logs "Auto-checkpoint failed").

    Registered once per process: an ``EXECUTION_START`` hook refuses, before any task runs, a crew whose runtime
    state CrewAI cannot serialise; handlers of CrewAI's checkpoint started/completed/failed events note every other
    failure (in the provider and in the store, for :func:`resume_crew`'s error), a checkpoint that started and
    never ended included (CrewAI's worker died of a non-``Exception``); an ``EXECUTION_END`` hook raises
    :class:`CheckpointFailed` from ``kickoff()`` when any checkpoint of the run failed.
    """
    from crewai.events.event_bus import crewai_event_bus
    from crewai.events.types.checkpoint_events import (
        CheckpointCompletedEvent,
        CheckpointFailedEvent,
        CheckpointStartedEvent,
    )
    from crewai.hooks.dispatch import InterceptionPoint, register

    for event_type in (CheckpointStartedEvent, CheckpointCompletedEvent, CheckpointFailedEvent):
        crewai_event_bus.register_handler(event_type, _on_checkpoint_event)  # a set: idempotent
    with _WRITE_LOCK:
        if not _GUARD:
            _GUARD.append(_refuse_uncheckpointable)
            register(InterceptionPoint.EXECUTION_START, _refuse_uncheckpointable)
            register(InterceptionPoint.EXECUTION_END, _raise_on_failed_checkpoints)


def _provider_of(entity: Any) -> AgentsnapCheckpointProvider | None:
    provider = getattr(getattr(entity, "checkpoint", None), "provider", None)
    return provider if isinstance(provider, AgentsnapCheckpointProvider) else None


def _on_checkpoint_event(source: Any, event: Any) -> None:
    provider = getattr(source, "provider", None)  # CrewAI emits these events with the CheckpointConfig as source
    if not isinstance(provider, AgentsnapCheckpointProvider):
        return
    kind = getattr(event, "type", "")
    if kind == "checkpoint_started":
        with _WRITE_LOCK:
            provider._started.append((str(event.location), event.branch, event.trigger))
        return
    if kind == "checkpoint_failed":
        provider._record_failure(str(event.location), event.branch, event.trigger, str(event.error))
    with _WRITE_LOCK:
        provider._ended += 1


def _refuse_uncheckpointable(ctx: Any) -> None:
    from crewai.events.event_bus import crewai_event_bus

    crew = getattr(ctx, "crew", None)
    provider = _provider_of(crew)
    if crew is None or provider is None:
        return None
    provider._take_failures()  # a new run
    state = crewai_event_bus.runtime_state  # every entity of this run goes into each checkpoint, not only this crew
    entities = [e for e in (state.root if state is not None else []) if e is not crew] + [crew]
    try:
        for entity in entities:
            entity.model_dump(mode="json")
    except Exception as exc:  # what CrewAI's checkpoint would raise, later and silently
        cause = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
        provider._record_failure(crew.checkpoint.location, "main", "kickoff refused", cause)
        provider._take_failures()
        raise HookAborted(
            f"agentsnap: CrewAI cannot checkpoint this crew ({cause}); give Memory a string storage "
            "(register_memory_storage(); storage='agentsnap:<path>') and a provider-config or pydantic embedder, and agents "
            "no function tools, in this crew and in every crew or flow running with it, or run without CheckpointConfig",
            source="agentsnap_crewai",
        ) from None
    return None


def _raise_on_failed_checkpoints(ctx: Any) -> None:
    from crewai.events.event_bus import crewai_event_bus

    entity = getattr(ctx, "crew", None) or getattr(ctx, "flow", None)
    provider = _provider_of(entity)
    if provider is None:
        return None
    if getattr(ctx, "status", "completed") != "completed":
        provider._settle()  # durable at the end of every run; a failed run raises its own error
        return None
    crewai_event_bus.flush()  # the checkpoint workers still running...
    crewai_event_bus.flush()  # ...and the CheckpointFailedEvent handlers they emitted
    provider._settle()  # every checkpoint of the run committed (durable) before kickoff() returns
    failures = provider._take_failures()
    if failures:
        raise CheckpointFailed(failures, output=getattr(ctx, "output", None))
    return None
