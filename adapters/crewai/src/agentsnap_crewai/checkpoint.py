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
from pathlib import Path
from typing import Any

from agentsnap_core import Repo, content
from agentsnap_core.errors import AgentSnapError
from agentsnap_core.objects import is_oid
from agentsnap_core.repo import check_ref_name
from crewai.state.provider.json_provider import JsonProvider
from pydantic import Field, PrivateAttr, field_validator

from .storage import _open_or_init

CHECKPOINT_KIND = "crewai.checkpoint"
DEFAULT_PREFIX = "crewai/"
_WRITE_LOCK = threading.Lock()  # CrewAI writes checkpoints from event-bus worker threads
#: CrewAI appends ``"trigger": "<event type>"`` last to the checkpoint JSON (``checkpoint_listener._do_checkpoint``)
_TRIGGER = re.compile(r'"trigger":\s*"([A-Za-z0-9_.:-]{1,100})"\s*}\s*$')


def _materialised(repo: Repo, oid: str) -> Path:
    return repo.store_dir / "crewai" / "checkpoints" / f"{oid}.json"


def checkpoint_data(repo: Repo, spec: str) -> str:
    """The CrewAI checkpoint JSON held by snapshot ``spec`` (id, branch or tag)."""
    snap = repo.get(spec)
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

    def model_post_init(self, __context: Any) -> None:
        super().model_post_init(__context)
        _install_kickoff_guard()

    @field_validator("branch_prefix")
    @classmethod
    def _valid_prefix(cls, value: str) -> str:
        check_ref_name(value + "x")  # a prefix such as "crewai/" must make valid names
        return value

    def _ref(self, branch: str) -> str:
        """The agentsnap ref of CrewAI branch ``branch`` (validated: ``a..b``, ``x~1`` are refused)."""
        return f"refs/heads/{check_ref_name(self.branch_prefix + branch)}"

    def _repo(self, location: str) -> Repo:
        """The repository at ``location``, opened once per provider (CrewAI checkpoints often)."""
        key = str(Path(location).resolve())
        repo = self._repos.get(key)
        if repo is None:
            repo = self._repos[key] = _open_or_init(Path(location))
        return repo

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
                meta={"crewai_branch": branch, "trigger": trigger, "crewai_parent": parent_id},
            )
            return str(_materialised(repo, snap.id))

    async def acheckpoint(self, data: str, location: str, *, parent_id: str | None = None, branch: str = "main") -> str:
        return await asyncio.to_thread(self.checkpoint, data, location, parent_id=parent_id, branch=branch)

    def extract_id(self, location: str) -> str:
        return Path(location).stem

    def _locate(self, location: str) -> tuple[Repo, str]:
        path = Path(location)
        oid = path.stem
        if path.parent.name == "checkpoints" and path.parent.parent.name == "crewai":
            return Repo.open(path.parent.parent.parent.parent), oid
        raise AgentSnapError(f"{location} is not an agentsnap checkpoint location (see agentsnap_crewai.checkpoint_path)")

    def from_checkpoint(self, location: str) -> str:
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
    """Register (once per process) a CrewAI ``EXECUTION_START`` hook that refuses a crew CrewAI cannot checkpoint.

    CrewAI 1.15 serialises the crew in an event-bus worker when a checkpoint is due, and only logs a failure
    ("Auto-checkpoint failed"), so a run would go on with no checkpoint at all. The hook runs in ``kickoff()``'s own
    thread before any task and aborts it (``HookAborted``) with what to change.
    """
    from crewai.hooks.dispatch import InterceptionPoint, register

    with _WRITE_LOCK:
        if not _GUARD:
            _GUARD.append(_refuse_uncheckpointable)
            register(InterceptionPoint.EXECUTION_START, _refuse_uncheckpointable)


def _refuse_uncheckpointable(ctx: Any) -> None:
    from crewai.hooks.dispatch import HookAborted

    crew = getattr(ctx, "crew", None)
    cfg = getattr(crew, "checkpoint", None)
    if crew is None or not isinstance(getattr(cfg, "provider", None), AgentsnapCheckpointProvider):
        return None
    try:
        crew.model_dump(mode="json")
    except Exception as exc:  # what CrewAI's checkpoint would raise, later and silently
        raise HookAborted(
            f"agentsnap: CrewAI cannot checkpoint this crew ({type(exc).__name__}: {str(exc).splitlines()[0][:200]}); "
            "give Memory a string storage (register_memory_storage(); storage='agentsnap:<path>') and a provider-config "
            "embedder, and agents no function tools, or run without CheckpointConfig",
            source="agentsnap_crewai",
        ) from None
    return None
