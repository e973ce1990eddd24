"""``AgentsnapFlowPersistence``: ``@persist(...)`` flow state as agentsnap snapshots.

Every save is a snapshot on the branch ``<prefix>/<flow uuid>`` whose parent is the previous
save of that flow; a run started with ``kickoff(restore_from_state_id=...)`` gets a branch whose
first snapshot's parent is the source flow's snapshot it was hydrated from, so forks show up in
``agentsnap log --all`` as branches. State is stored exactly as CrewAI's
``SQLiteFlowPersistence`` stores it (``model_dump(mode="json")`` through JSON).
"""

from __future__ import annotations

import contextvars
import json
import threading
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentsnap_core import InvalidInput, Repo
from agentsnap_core.repository.repo import check_ref_name
from agentsnap_core.stores.base import RefUpdate
from crewai.flow.flow_context import current_flow_request_id
from crewai.flow.persistence.base import FlowPersistence
from pydantic import BaseModel, Field, PrivateAttr, model_validator

from ._kinds import FLOW_KIND
from .storage import _open_or_init

if TYPE_CHECKING:
    from crewai.flow.async_feedback.types import PendingFeedbackContext


#: the snapshot the current flow run was hydrated from, per run: CrewAI loads (``load_state``) and saves inside
#: one kickoff's asyncio task, whose context ``asyncio.to_thread`` carries into worker threads; another
#: kickoff (another ``asyncio.run``) never sees it. Consumed by the run's first save. Set only by a load inside a
#: kickoff (CrewAI's ``current_flow_request_id`` is set; the run, :func:`_current_run`, is kept with the mark and must
#: match at the save, so a flow kicked off inside this run's methods never takes it): a
#: ``load_state`` called from plain code, to look at a saved state, would otherwise be copied into the next
#: ``kickoff()``'s context and make a fresh flow look like a fork of the one looked at.
_HYDRATED_FROM: contextvars.ContextVar[tuple[int, str, object] | None] = contextvars.ContextVar("agentsnap_crewai_hydrated",
                                                                                              default=None)

#: the flow kickoff running in this context: a fresh object per kickoff, set by an ``EXECUTION_START`` hook and put
#: back by its ``EXECUTION_END``. CrewAI's ``current_flow_request_id`` alone cannot tell runs apart: a flow kicked off
#: inside another flow's method inherits it (it is only set when unset), and with it the outer run's mark, so a fresh
#: inner flow was recorded as a fork of what the outer run was resumed or forked from.
_RUN: contextvars.ContextVar[object | None] = contextvars.ContextVar("agentsnap_crewai_flow_run", default=None)
_RUN_TOKENS: dict[int, list[contextvars.Token[object | None]]] = {}
_RUN_LOCK = threading.Lock()


def _run_started(ctx: Any) -> None:
    flow = getattr(ctx, "flow", None)
    if flow is not None and getattr(ctx, "crew", None) is None:
        token = _RUN.set(object())
        with _RUN_LOCK:
            _RUN_TOKENS.setdefault(id(flow), []).append(token)


def _run_ended(ctx: Any) -> None:
    flow = getattr(ctx, "flow", None)
    if flow is None:
        return
    with _RUN_LOCK:
        tokens = _RUN_TOKENS.get(id(flow))
        token = tokens.pop() if tokens else None
        if tokens == []:
            del _RUN_TOKENS[id(flow)]
    if token is not None:
        try:
            _RUN.reset(token)
        except ValueError:  # ended in another context than it started in: that context ends with the run
            pass


def _install_run_hooks() -> None:
    """Register the hooks that scope :data:`_RUN` (again after CrewAI's ``hooks.dispatch.clear_all()``)."""
    from crewai.hooks.dispatch import InterceptionPoint, get_global_hook_list

    with _RUN_LOCK:
        for point, hook in ((InterceptionPoint.EXECUTION_START, _run_started), (InterceptionPoint.EXECUTION_END, _run_ended)):
            hooks = get_global_hook_list(point)
            if hook not in hooks:
                hooks.append(hook)


def _current_run() -> object | None:
    """This context's flow kickoff (:data:`_RUN`; CrewAI's request id where no hook ran), None outside any."""
    run = current_flow_request_id.get()
    return None if run is None else (_RUN.get() or run)


def _json_default(obj: Any) -> Any:
    """What CrewAI 1.15's ``SQLiteFlowPersistence`` does with values JSON cannot hold (its ``_json_default``)."""
    if isinstance(obj, BaseModel):
        try:
            return obj.model_dump(mode="json")
        except Exception:  # a field JSON mode cannot serialise: python mode, then this function again
            return obj.model_dump(mode="python")
    if isinstance(obj, (set, tuple)):
        return list(obj)
    if hasattr(obj, "isoformat"):
        return obj.isoformat()
    return str(obj)


def _json_default_strict(obj: Any) -> Any:
    """:func:`_json_default`, refusing a value it could only store as its ``str()`` (restored as that string)."""
    if isinstance(obj, (BaseModel, set, tuple)) or hasattr(obj, "isoformat"):
        return _json_default(obj)
    raise InvalidInput(f"flow state holds a {type(obj).__name__} ({str(obj)[:60]!r}) that JSON cannot hold: a snapshot "
                       "would keep only its str() and restore that string in its place; store it as JSON data "
                       "(str, number, list, dict, a pydantic model) or leave it out of the state")


def _plain_state(state_data: dict[str, Any] | BaseModel, *, strict: bool = False) -> dict[str, Any]:
    """The state as JSON data, as ``SQLiteFlowPersistence`` stores it; ``strict``: refuse what only its ``str()`` keeps."""
    if isinstance(state_data, BaseModel):
        try:
            state_data = state_data.model_dump(mode="json")
        except Exception:  # as SQLiteFlowPersistence._to_state_dict: python mode, then JSON with _json_default
            state_data = state_data.model_dump(mode="python")
    if not isinstance(state_data, dict):
        raise InvalidInput(f"flow state must be a pydantic model or a dict, got {type(state_data).__name__}")
    result = json.loads(json.dumps(state_data, default=_json_default_strict if strict else _json_default))
    return dict(result)


class AgentsnapFlowPersistence(FlowPersistence):
    """Flow persistence in an agentsnap repository (``path``), one branch per flow uuid."""

    persistence_type: str = Field(default="AgentsnapFlowPersistence")
    path: str = Field(description="the agentsnap repository (created when missing)")
    branch_prefix: str = Field(default="crewai/flows")
    _repo: Repo | None = PrivateAttr(default=None)
    _lock: Any = PrivateAttr(default_factory=threading.RLock)

    def __init__(self, path: str | Path | None = None, /, **kwargs: Any) -> None:
        if path is not None:
            kwargs["path"] = str(path)
        super().__init__(**kwargs)

    @model_validator(mode="after")
    def _setup(self) -> AgentsnapFlowPersistence:
        check_ref_name(self.branch_prefix)
        _install_run_hooks()
        self.init_db()
        return self

    # ------------------------------------------------------------------ FlowPersistence
    def init_db(self) -> None:
        if self._repo is None:
            self._repo = _open_or_init(Path(self.path))

    @property
    def repo(self) -> Repo:
        self.init_db()
        assert self._repo is not None
        return self._repo

    def branch(self, flow_uuid: str) -> str:
        """The agentsnap branch holding flow ``flow_uuid``'s saves."""
        return check_ref_name(f"{self.branch_prefix}/{flow_uuid}")

    def head(self, flow_uuid: str) -> str | None:
        """The snapshot id of the latest save of ``flow_uuid``."""
        return self.repo.refs.get_ref(f"refs/heads/{self.branch(flow_uuid)}")

    def _write(self, flow_uuid: str, method_name: str, state: dict[str, Any], pending: dict[str, Any] | None, message: str,
               fork_of: str | None = None) -> str:
        with self._lock:
            head = self.head(flow_uuid)
            parents = [head] if head else []
            loaded = _HYDRATED_FROM.get()
            if loaded is not None and loaded[0] == id(self) and loaded[2] == _current_run():
                _HYDRATED_FROM.set(None)  # consumed: only this run's first save can be a fork's first save
                if not parents:
                    parents = [loaded[1]]  # a fork: the state this run was hydrated from
            if fork_of is not None and not parents:
                parents = [fork_of]
            payload = {"kind": FLOW_KIND, "v": 1, "flow_uuid": flow_uuid, "method": method_name, "state": state}
            if pending is not None:
                payload["pending_feedback"] = pending
            snap = self.repo.snapshot(
                message,
                agent="crewai.flow",
                layers={"state": payload},
                trace=[],
                capture_world=False,
                parents=parents,
                move_head=False,
                meta={"flow_uuid": flow_uuid, "method": method_name},
            )
            self.repo.update_refs([RefUpdate(f"refs/heads/{self.branch(flow_uuid)}", snap.id, head)], message[:200])
            return snap.id

    def save_state(self, flow_uuid: str, method_name: str, state_data: dict[str, Any] | BaseModel) -> None:
        self._write(str(flow_uuid), method_name, _plain_state(state_data), None, f"flow {str(flow_uuid)[:8]}: {method_name}")

    def _payload(self, flow_uuid: str) -> dict[str, Any] | None:
        head = self.head(str(flow_uuid))
        if head is None:
            return None
        payload = self.repo.read_layer(head, "state")
        if not isinstance(payload, dict) or payload.get("kind") != FLOW_KIND:
            return None
        run = _current_run()
        if run is not None:  # inside a kickoff: what this run was hydrated from (not a look from outside any run)
            _HYDRATED_FROM.set((id(self), head, run))
        return payload

    def load_state(self, flow_uuid: str) -> dict[str, Any] | None:
        payload = self._payload(flow_uuid)
        return dict(payload["state"]) if payload else None

    def save_pending_feedback(self, flow_uuid: str, context: PendingFeedbackContext, state_data: dict[str, Any] | BaseModel) -> None:
        pending = json.loads(json.dumps(context.to_dict(), default=_json_default))
        self._write(str(flow_uuid), context.method_name, _plain_state(state_data), pending, f"flow {str(flow_uuid)[:8]}: waiting for feedback")

    def load_pending_feedback(self, flow_uuid: str) -> tuple[dict[str, Any], PendingFeedbackContext] | None:
        from crewai.flow.async_feedback.types import PendingFeedbackContext

        payload = self._payload(flow_uuid)
        if not payload or payload.get("pending_feedback") is None:
            return None
        return dict(payload["state"]), PendingFeedbackContext.from_dict(payload["pending_feedback"])

    def clear_pending_feedback(self, flow_uuid: str) -> None:
        payload = self._payload(flow_uuid)
        if payload and payload.get("pending_feedback") is not None:
            self._write(str(flow_uuid), payload["method"], payload["state"], None, f"flow {str(flow_uuid)[:8]}: feedback received")

    # ------------------------------------------------------------------ agentsnap verbs
    def history(self, flow_uuid: str) -> list[dict[str, Any]]:
        """Saves of ``flow_uuid``, newest first, following forks back to their source flows."""
        head = self.head(flow_uuid)
        if head is None:
            return []
        return [{"id": s.id, **s.manifest.get("meta", {})} for s in self.repo.walk([head])]

    def fork(self, flow_uuid: str, new_uuid: str | None = None, at: str | None = None) -> str:
        """Branch flow ``flow_uuid`` (at its latest save, or snapshot ``at``) into a new flow id.

        Returns the new id; ``kickoff(inputs={"id": new_id})`` then continues the fork while the
        source flow is untouched.
        """
        new_uuid = new_uuid or str(uuid.uuid4())
        if self.head(new_uuid) is not None:
            raise InvalidInput(f"flow {new_uuid} already exists; pick another id")
        source = self.repo.resolve(at) if at else self.head(flow_uuid)
        if source is None:
            raise InvalidInput(f"no persisted state for flow {flow_uuid}")
        payload = self.repo.read_layer(source, "state")
        if not isinstance(payload, dict) or payload.get("kind") != FLOW_KIND:
            raise InvalidInput(f"snapshot {source[:12]} is not a persisted flow state")
        state = {**payload["state"], "id": new_uuid}
        self._write(new_uuid, payload["method"], state, None, f"flow {new_uuid[:8]}: fork of {flow_uuid[:8]}", fork_of=source)
        return new_uuid
