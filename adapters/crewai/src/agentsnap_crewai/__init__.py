"""agentsnap for CrewAI: snapshot, fork, restore and merge crew memory, flow state and crew checkpoints."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agentsnap_core.plugins import lazy_exports

if TYPE_CHECKING:
    from .checkpoint import (
        AgentsnapCheckpointProvider,
        CheckpointFailed,
        NoCheckpoint,
        UntrustedSettings,
        checkpoint_failures,
        checkpoint_path,
        resolve_checkpoint,
    )
    from .effects import guard_tool, guard_tools
    from .flow import AgentsnapFlowPersistence
    from .merge import MemoryMerge, merge_memory, merge_storages
    from .restore import MissingLiveObjects, inject_live_objects, resume_crew
    from .storage import AgentsnapStorage
    from .writer import CheckpointWriteFailed, flush_all

# This package is imported with its plugin by every process that uses agentsnap (the CLI's too): CrewAI (seconds to
# import) loads when one of these names is first used, not before.
__getattr__ = lazy_exports(__name__, {
    **dict.fromkeys(("AgentsnapCheckpointProvider", "CheckpointFailed", "NoCheckpoint", "checkpoint_failures",
                     "checkpoint_path", "resolve_checkpoint", "UntrustedSettings"), "checkpoint"),
    **dict.fromkeys(("guard_tool", "guard_tools"), "effects"),
    "AgentsnapFlowPersistence": "flow",
    **dict.fromkeys(("MemoryMerge", "merge_memory", "merge_storages"), "merge"),
    **dict.fromkeys(("MissingLiveObjects", "inject_live_objects", "resume_crew"), "restore"),
    "AgentsnapStorage": "storage",
    **dict.fromkeys(("CheckpointWriteFailed", "flush_all"), "writer"),
})

__all__ = [
    "AgentsnapCheckpointProvider",
    "AgentsnapFlowPersistence",
    "AgentsnapStorage",
    "CheckpointFailed",
    "CheckpointWriteFailed",
    "MemoryMerge",
    "MissingLiveObjects",
    "NoCheckpoint",
    "UntrustedSettings",
    "checkpoint_failures",
    "checkpoint_path",
    "flush_all",
    "guard_tool",
    "guard_tools",
    "inject_live_objects",
    "merge_memory",
    "merge_storages",
    "register_memory_storage",
    "resolve_checkpoint",
    "resume_crew",
]

SPEC_PREFIX = "agentsnap:"


def register_memory_storage() -> None:
    """Route ``Memory(storage="agentsnap:<repo path>[#branch]")`` to :class:`AgentsnapStorage`.

    Installs a CrewAI memory storage factory (``set_memory_storage_factory``); other storage
    strings keep CrewAI's built-in behaviour. A string spec also survives CrewAI checkpoints,
    where a storage object cannot.
    """
    from crewai.memory.storage.factory import set_memory_storage_factory

    from .storage import AgentsnapStorage

    def factory(spec: str) -> Any:
        if not spec.startswith(SPEC_PREFIX):
            return None
        # the last '#': a branch name never holds one, a directory's name may (AgentsnapStorage.spec of "/runs/#3")
        rest = spec[len(SPEC_PREFIX) :]
        path, _, branch = rest.rpartition("#") if "#" in rest else (rest, "", "")
        return AgentsnapStorage(path, branch=branch) if branch else AgentsnapStorage(path)

    set_memory_storage_factory(factory)
