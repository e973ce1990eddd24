"""A checkpoint provider for CrewAI's ``CheckpointConfig``: crew/flow checkpoints as agentsnap snapshots.

``CheckpointConfig(location=<repo path>, provider=AgentsnapCheckpointProvider())`` makes every
checkpoint a snapshot on the agentsnap branch ``crewai/<CrewAI branch>`` whose parent is the
previous checkpoint (CrewAI's ``parent_id``). Checkpoint ids are snapshot ids.

The checkpoint JSON CrewAI hands over is stored as it is, as one content-addressed blob (FastCDC chunks,
zstd): consecutive checkpoints of a growing run share most chunks, and nothing is parsed or re-encoded.
CrewAI 1.15 accepts only its own provider types in ``CheckpointConfig.provider`` and ``Crew.from_checkpoint``
reads a file path, so this provider is a ``JsonProvider`` subclass (``provider_type == "json"``); the
location it returns names ``<store>/crewai/checkpoints/<id>.json``, a file written only on demand by
:func:`checkpoint_path` (what ``restore_from`` needs), never once per checkpoint.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
from pathlib import Path
from typing import Any

from agentsnap_core import Repo
from agentsnap_core.errors import AgentSnapError, InvalidRefName, UnknownSnapshot
from agentsnap_core.format import content
from agentsnap_core.format.objects import is_oid
from agentsnap_core.layers.redact import redact
from agentsnap_core.repository.repo import check_ref_name
from crewai.hooks.dispatch import HookAborted
from crewai.state.provider.json_provider import JsonProvider
from pydantic import Field, PrivateAttr, field_validator

from .storage import _open_or_init

CHECKPOINT_KIND = "crewai.checkpoint"
DEFAULT_PREFIX = "crewai/"
_WRITE_LOCK = threading.Lock()  # CrewAI writes checkpoints from event-bus worker threads
#: CrewAI appends ``"trigger": "<event type>"`` last to the checkpoint JSON (``checkpoint_listener._do_checkpoint``)
_TRIGGER = re.compile(r'"trigger":\s*"([A-Za-z0-9_.:-]{1,100})"\s*}\s*$')


#: lower-case substrings of the JSON text, one of which every secret core's ``redact`` finds contains: a key ending
#: in a secret-looking name with a string (or list) value, a URL password, a secret query parameter, a credential
#: after ``Bearer``/``Basic``/``Token`` (JSON escapes the whitespace), a token shape (``sk-``, ``ghp_``, a JWT ...)
_SECRET_HINTS = tuple(f"{name}{sep}" for name in ('key"', 'token"', 'sig"') for sep in (': "', ':"', ": [", ":[")) + (
    "secret", "password", "passwd", "bearer", "authorization", "credential", "connection_string", "connection-string",
    "cookie", "signature", "://", "key=", "token=", "sig=", "code=", "x-amz-", "x-goog-", "basic", "token ",
    "token\\t", "token\\n", "token\\r", "token\\u", "sk-", "ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_",
    "xox", "akia", "asia", "aiza", "glpat-", "hf_", "eyj", "-----begin")
#: between the objects of a list in CrewAI's JSON (json.dumps): tasks, agents, events. No hint contains or overlaps
#: it (none starts with "{" or " {" or ends with "}" or "},"), so every hint in the JSON lies within one segment
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
        text = "\0".join(new).lower()
        if any(hint in text for hint in _SECRET_HINTS):
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


def _materialised(repo: Repo, oid: str) -> Path:
    return repo.store_dir / "crewai" / "checkpoints" / f"{oid}.json"


def _failure_log(repo: Repo) -> Path:
    """Where the checkpoints CrewAI failed to write at this location are noted (one JSON line each)."""
    return repo.store_dir / "crewai" / "failed.jsonl"


def checkpoint_failures(repo: Repo) -> list[dict[str, Any]]:
    """The checkpoints CrewAI failed to write at this repository, oldest first (``at``, ``branch``, ``trigger``, ``error``)."""
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


def checkpoint_data(repo: Repo, spec: str) -> str:
    """The CrewAI checkpoint JSON held by snapshot ``spec`` (id, branch or tag)."""
    try:
        snap = repo.get(spec)
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


def checkpoint_path(repo: Repo | str | Path, spec: str) -> str:
    """A path for ``CheckpointConfig(restore_from=...)`` for snapshot ``spec`` (the JSON is written there now).

    ``spec`` may be a snapshot id, an agentsnap branch (``crewai/main``) or tag.
    """
    repo = repo if isinstance(repo, Repo) else Repo.open(repo)
    oid = repo.resolve(spec)
    path = _materialised(repo, oid)
    if not path.exists():
        data = checkpoint_data(repo, oid)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(data, encoding="utf-8")
        tmp.replace(path)
    return str(path)


class AgentsnapCheckpointProvider(JsonProvider):
    """Writes CrewAI checkpoints as agentsnap snapshots (``location`` = the repository path)."""

    branch_prefix: str = Field(default=DEFAULT_PREFIX, description="agentsnap branch = prefix + CrewAI branch")
    _repos: dict[str, Repo] = PrivateAttr(default_factory=dict)
    _failures: list[dict[str, Any]] = PrivateAttr(default_factory=list)  # of the current run, raised at its end
    _started: list[tuple[str, str | None, str | None]] = PrivateAttr(default_factory=list)  # (location, branch, trigger)
    _ended: int = PrivateAttr(default=0)  # checkpoints of the current run that completed or failed
    _clean: _CleanSegments = PrivateAttr(default_factory=_CleanSegments)

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

    def close(self) -> None:
        """Close the repositories this provider opened."""
        with _WRITE_LOCK:
            for repo in self._repos.values():
                repo.close()
            self._repos.clear()

    def checkpoint(self, data: str, location: str, *, parent_id: str | None = None, branch: str = "main") -> str:
        ref = self._ref(branch)  # before anything is created
        with _WRITE_LOCK:
            repo = self._repo(location)
            head = repo.refs.get_ref(ref)
            if parent_id and is_oid(parent_id) and repo.objects.has(parent_id):
                parents = [parent_id]
            else:
                parents = [head] if head else []
            found = _TRIGGER.search(data[-200:])
            trigger = found.group(1) if found else None
            data, redacted = redact_checkpoint(data, self._clean)
            blob = content.put_bytes(repo.objects, data.encode("utf-8"))
            snap = repo.snapshot(
                f"crewai checkpoint ({trigger or 'manual'}) on {branch}",
                agent="crewai.checkpoint",
                layers={"state": {"kind": CHECKPOINT_KIND, "v": 2, "branch": branch, "runtime": blob, "refs": [blob]}},
                trace=[],
                capture_world=False,
                parents=parents,
                ref=ref,
                move_head=False,
                meta={"crewai_branch": branch, "trigger": trigger, "crewai_parent": parent_id,
                      **({"redacted": redacted} if redacted else {})},
            )
            return str(_materialised(repo, snap.id))

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
        return path.parent.name == "checkpoints" and path.parent.parent.name == "crewai" and is_oid(path.stem)

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
        ``checkpoint_path`` writes a dropped file again on demand.
        """
        with _WRITE_LOCK:
            repo = self._repo(location)
            head = repo.refs.get_ref(self._ref(branch))
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
    if provider is None or getattr(ctx, "status", "completed") != "completed":
        return None  # a failed run raises its own error
    crewai_event_bus.flush()  # the checkpoint workers still running...
    crewai_event_bus.flush()  # ...and the CheckpointFailedEvent handlers they emitted
    failures = provider._take_failures()
    if failures:
        raise CheckpointFailed(failures, output=getattr(ctx, "output", None))
    return None
