"""Resuming a crew from an agentsnap checkpoint with the caller's live objects re-injected.

A checkpoint is JSON: a custom ``BaseLLM`` subclass, function tools, callable embedders and open
memory stores cannot be rebuilt from it (CrewAI 1.15 silently turns a custom LLM into an
``OpenAICompletion`` of the same model name). :func:`resume_crew` refuses to restore until the
caller hands those objects back, then puts them in place.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agentsnap_core import Repo
from agentsnap_core.errors import AgentSnapError
from agentsnap_core.layers.redact import REDACTED
from agentsnap_core.repository.repo import check_ref_name

from .checkpoint import (
    AgentsnapCheckpointProvider,
    check_settings,
    checkpoint_data,
    checkpoint_path,
    resolve_checkpoint,
)

#: llm types CrewAI 1.15 rebuilds from a checkpoint by itself (everything else is a custom class)
REBUILDABLE_LLM_TYPES = frozenset({"litellm", "openai", "anthropic", "azure", "bedrock", "gemini"})


class MissingLiveObjects(AgentSnapError):
    """The snapshot needs live objects (LLMs, tools) the caller did not pass; nothing was restored."""

    def __init__(self, missing: dict[str, list[str]]) -> None:
        self.missing = missing
        what = "; ".join(f"{kind} for agent(s) {', '.join(repr(r) for r in roles)}" for kind, roles in missing.items())
        super().__init__(
            f"cannot restore without live objects: {what}. Pass them to resume_crew(llms={{role: llm}}, "
            "tools={role: [tools]}) or llm=... for every agent; a default LLM is never substituted"
        )


def needed_live_objects(runtime: dict[str, Any]) -> dict[str, list[str]]:
    """Roles of the agents in a checkpoint whose LLM (or tools) must come from the caller."""
    needs: dict[str, list[str]] = {"llm": [], "tools": []}
    for entity in runtime.get("entities", []):
        for agent in entity.get("agents", []) or []:
            role = str(agent.get("role", "?"))
            llm = agent.get("llm")
            if isinstance(llm, dict) and (llm.get("llm_type") not in REBUILDABLE_LLM_TYPES or REDACTED in json.dumps(llm)):
                needs["llm"].append(role)  # a custom class, or a config whose secrets were redacted at checkpoint time
            if agent.get("tools"):
                needs["tools"].append(role)
    return needs


def resume_crew(
    repo: Repo | str | Path,
    spec: str = "crewai/main",
    *,
    llm: Any = None,
    llms: dict[str, Any] | None = None,
    tools: dict[str, list[Any]] | None = None,
    memory: Any = None,
    fork: str | bool | None = None,
    on_events: list[str] | None = None,
    branch_prefix: str = "crewai/",
    trust_settings: bool = False,
) -> Any:
    """A crew restored from checkpoint snapshot ``spec``, with live objects re-injected, ready to ``kickoff()``.

    Args:
        repo: the repository (or its path) the checkpoints were written to.
        spec: a snapshot id, or an agentsnap branch such as ``crewai/main`` (its newest checkpoint).
        llm: the LLM for every agent whose LLM cannot be rebuilt; ``llms`` maps roles to LLMs instead.
        tools: tools by agent role (required for agents that had tools).
        memory: a live ``Memory`` for the crew (a checkpoint only names it).
        fork: a branch name (or True for a generated one) to continue on a new branch (``Crew.fork``).
        on_events: checkpoint triggers for the resumed run (default: CrewAI's).
        trust_settings: build a checkpoint this store did not write (a clone, a pull) with the model endpoints and
            MCP servers it names. Without it such a checkpoint is refused unless your own LLM replaces every agent
            LLM that names an endpoint (``llm=``/``llms=``) and it names no other (an embedder's, MCP servers):
            CrewAI would send your API key to whatever ``base_url`` it holds and start the commands it names.

    Raises:
        MissingLiveObjects: before anything is restored, naming what is missing.
        UntrustedSettings: before anything is built, naming the settings of a checkpoint from elsewhere.
    """
    from crewai import Crew
    from crewai.state.checkpoint_config import CheckpointConfig

    if isinstance(fork, str):
        check_ref_name(branch_prefix + fork)  # before anything is restored
    repo_obj = repo if isinstance(repo, Repo) else Repo.open(repo)
    runtime = json.loads(checkpoint_data(repo_obj, spec))  # (NoCheckpoint naming failed checkpoints)
    snapshot = resolve_checkpoint(repo_obj, spec)
    needs = needed_live_objects(runtime)
    llms = dict(llms or {})
    tools = dict(tools or {})
    missing = {
        "llm": [r for r in needs["llm"] if r not in llms and llm is None],
        "tools": [r for r in needs["tools"] if r not in tools],
    }
    missing = {k: v for k, v in missing.items() if v}
    if missing:
        raise MissingLiveObjects(missing)
    agent_llms = _agent_llm_paths(runtime)
    replaced = {path for path, role in agent_llms if role in llms or llm is not None}
    kept = sorted({repr(role) for path, role in agent_llms if path not in replaced})
    check_settings(repo_obj, snapshot, runtime, trust=trust_settings, allowed=replaced,
                   remedy=(f"Pass your own LLM for agent(s) {', '.join(kept)} (llm=... or llms={{role: llm}}); "
                           if kept else "") + "what your LLMs do not replace (an embedder, MCP servers) stays refused")
    extra: dict[str, Any] = {"on_events": on_events} if on_events else {}
    cfg = CheckpointConfig(
        location=str(repo_obj.root),
        provider=AgentsnapCheckpointProvider(branch_prefix=branch_prefix),
        restore_from=checkpoint_path(repo_obj, snapshot, trust_settings=True),  # (checked above)
        **extra,
    )
    if fork:
        crew = Crew.fork(cfg, branch=fork if isinstance(fork, str) else None)
    else:
        crew = Crew.from_checkpoint(cfg)
    inject_live_objects(crew, llm=llm, llms=llms, tools=tools, memory=memory)
    crew.checkpoint = cfg.model_copy(update={"restore_from": None})
    return crew


def _agent_llm_paths(runtime: dict[str, Any]) -> list[tuple[str, str]]:
    """``(JSON path, role)`` of every agent's ``llm`` in a checkpoint (what the caller's ``llm``/``llms`` replace)."""
    return [(f"entities[{i}].agents[{j}].llm", str(agent.get("role", "?")))
            for i, entity in enumerate(runtime.get("entities", []))
            for j, agent in enumerate(entity.get("agents", []) or []) if isinstance(agent, dict)]


def inject_live_objects(
    crew: Any, *, llm: Any = None, llms: dict[str, Any] | None = None, tools: dict[str, list[Any]] | None = None, memory: Any = None
) -> Any:
    """Put the caller's LLMs, tools and memory into a restored crew (by agent role)."""
    llms, tools = llms or {}, tools or {}
    for agent in crew.agents:
        chosen = llms.get(agent.role, llm)
        if chosen is not None:
            agent.llm = chosen
        if agent.role in tools:
            agent.tools = list(tools[agent.role])
    if memory is not None:
        crew.memory = memory
        crew._memory = memory
        crew._rebind_memory_views()
    return crew
