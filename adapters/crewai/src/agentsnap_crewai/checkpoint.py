"""A checkpoint provider for CrewAI's ``CheckpointConfig``: crew/flow checkpoints as agentsnap snapshots.

``CheckpointConfig(location=<repo path>, provider=AgentsnapCheckpointProvider())`` makes every
checkpoint a snapshot on the agentsnap branch ``crewai/<CrewAI branch>`` whose parent is the
previous checkpoint (CrewAI's ``parent_id``). Checkpoint ids are snapshot ids.

CrewAI 1.15 accepts only its own provider types in ``CheckpointConfig.provider`` and restores
through a file path, so this provider is a ``JsonProvider`` subclass (``provider_type == "json"``)
and every checkpoint is also materialised as ``<store>/crewai/checkpoints/<id>.json``, a
rebuildable view (:func:`checkpoint_path` writes it again from the snapshot).
"""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path
from typing import Any

from agentsnap_core import Repo
from agentsnap_core.errors import AgentSnapError
from agentsnap_core.objects import is_oid
from agentsnap_core.repo import check_ref_name
from agentsnap_core.store import RefUpdate
from crewai.state.provider.json_provider import JsonProvider
from pydantic import Field, field_validator

from .storage import _open_or_init

CHECKPOINT_KIND = "crewai.checkpoint"
DEFAULT_PREFIX = "crewai/"
_WRITE_LOCK = threading.Lock()  # CrewAI writes checkpoints from event-bus worker threads


def _materialised(repo: Repo, oid: str) -> Path:
    return repo.store_dir / "crewai" / "checkpoints" / f"{oid}.json"


def checkpoint_data(repo: Repo, spec: str) -> str:
    """The CrewAI checkpoint JSON held by snapshot ``spec`` (id, branch or tag)."""
    snap = repo.get(spec)
    payload = repo.read_layer(snap, "state")
    if not isinstance(payload, dict) or payload.get("kind") != CHECKPOINT_KIND:
        raise AgentSnapError(f"snapshot {snap.id[:12]} is not a CrewAI checkpoint")
    return json.dumps(payload["runtime"])


def checkpoint_path(repo: Repo | str | Path, spec: str) -> str:
    """A path for ``CheckpointConfig(restore_from=...)`` for snapshot ``spec``.

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

    @field_validator("branch_prefix")
    @classmethod
    def _valid_prefix(cls, value: str) -> str:
        check_ref_name(value + "x")  # a prefix such as "crewai/" must make valid names
        return value

    def _ref(self, branch: str) -> str:
        """The agentsnap ref of CrewAI branch ``branch`` (validated: ``a..b``, ``x~1`` are refused)."""
        return f"refs/heads/{check_ref_name(self.branch_prefix + branch)}"

    def _repo(self, location: str) -> Repo:
        return _open_or_init(Path(location))

    def checkpoint(self, data: str, location: str, *, parent_id: str | None = None, branch: str = "main") -> str:
        self._ref(branch)  # before anything is created
        runtime = json.loads(data)
        with _WRITE_LOCK:
            return self._write(runtime, location, parent_id, branch)

    def _write(self, runtime: Any, location: str, parent_id: str | None, branch: str) -> str:
        repo = self._repo(location)
        try:
            ref = self._ref(branch)
            head = repo.refs.get_ref(ref)
            if parent_id and is_oid(parent_id) and repo.objects.has(parent_id):
                parents = [parent_id]
            else:
                parents = [head] if head else []
            trigger = runtime.get("trigger") if isinstance(runtime, dict) else None
            snap = repo.snapshot(
                f"crewai checkpoint ({trigger or 'manual'}) on {branch}",
                agent="crewai.checkpoint",
                layers={"state": {"kind": CHECKPOINT_KIND, "v": 1, "branch": branch, "runtime": runtime}},
                trace=[],
                capture_world=False,
                parents=parents,
                move_head=False,
                meta={"crewai_branch": branch, "trigger": trigger, "crewai_parent": parent_id},
            )
            repo.update_refs([RefUpdate(ref, snap.id, head)], f"crewai checkpoint on {branch}")
            return checkpoint_path(repo, snap.id)
        finally:
            repo.close()

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
        """Drop the materialised JSON of all but the newest ``max_keep`` checkpoints on ``branch``.

        The snapshots themselves stay in the branch's history (agentsnap never rewrites it);
        ``checkpoint_path`` rebuilds a dropped file on demand.
        """
        repo = self._repo(location)
        try:
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
        finally:
            repo.close()
