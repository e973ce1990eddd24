"""Hook specifications: what an agentsnap plugin (adapter) can implement.

Capture hooks return a layer's payload (plain msgpack-able data) or ``None`` when the plugin
does not handle the object; restore hooks return ``True`` when they restored it. Call them by
keyword. A plugin wraps ``agentsnap_capture`` / ``agentsnap_restore`` with
``@hookimpl(wrapper=True)`` for cross-cutting work such as pausing an engine.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypedDict

import pluggy

if TYPE_CHECKING:
    from agentsnap_core.repository.repo import Repo, Snapshot

hookspec = pluggy.HookspecMarker("agentsnap")
hookimpl = pluggy.HookimplMarker("agentsnap")


class HookContext(TypedDict, total=False):
    """The ``context`` every hook receives (built by :func:`agentsnap_core.plugins.hook_context`); keys a call
    does not concern are absent. Hooks read it and never keep it past the call."""

    repo: Repo | None  #: the repository (None for an in-memory :func:`agentsnap_core.rollback`)
    pm: pluggy.PluginManager  #: the plugin manager calling the hook
    snapshot: Snapshot  #: restore: the snapshot being restored
    name: str  #: capture_many / restore_many: the object's name in the snapshot
    options: dict[str, Any]  #: restore_into(obj, spec, **options): the adapter's options (e.g. replay="pure")
    trust_pickle: bool  #: restore: pickled values may be loaded (the user said so, or this process made them)
    redact: bool  #: capture_world: redact secret-shaped environment values
    include_secrets: bool  #: capture_world: capture files the secrets policy would leave out
    allow_external_symlinks: bool  #: restore_world: links pointing outside the tree may be written
    paths: list[str] | None  #: restore_world: only these paths (None = the whole tree)
    current: list[Any]  #: restore_world: the working tree's entries before the restore
    trust_git: bool  #: restore_world: git's config and hooks may be written from any tree (restore --trust-git)
    git_held_back: list[str]  #: restore_world (set by the built-in hook): git's config and hooks not written
    entries: list[Any]  #: capture_world (built-in world hook): the captured tree's entries
    statcache: Any  #: capture_world (built-in world hook): the stat cache to save once the snapshot is committed
    base: str | None  #: merge: the common ancestor's id
    ours: str  #: merge: our snapshot's id
    theirs: str  #: merge: their snapshot's id
    strategy: str  #: merge: auto, ours or theirs
    ours_label: str  #: merge: how our side is named in conflicts
    theirs_label: str  #: merge: how their side is named in conflicts
    summarizer: Any  #: merge: the summarize-branch callable chosen by the user, if any
    model: dict[str, Any]  #: merge: options of the model-weights merge
    layer: str  #: merge: the layer being merged


@hookspec(firstresult=True)
def agentsnap_handles(obj: Any) -> str | None:
    """Return the adapter name that handles ``obj``, or None."""


@hookspec(firstresult=True)
def agentsnap_capture(obj: Any, context: HookContext) -> dict[str, Any] | None:
    """Return ``{layer name: payload}`` for ``obj``; wrap it to pause/resume around capture."""


@hookspec(firstresult=True)
def agentsnap_restore(obj: Any, layers: dict[str, Any], context: HookContext) -> bool | None:
    """Restore ``obj`` from ``{layer name: payload}``; return True when done."""


@hookspec(firstresult=True)
def agentsnap_capture_world(root: str, context: HookContext) -> dict[str, Any] | None:
    """Return the world layer record (tree id, env id, counts) for the directory ``root``."""


@hookspec(firstresult=True)
def agentsnap_restore_world(root: str, world: dict[str, Any], context: HookContext) -> dict[str, Any] | None:
    """Materialise a world layer record into ``root``; return what changed."""


@hookspec(firstresult=True)
def agentsnap_capture_trace(obj: Any, context: HookContext) -> list[dict[str, Any]] | None:
    """Return the ordered messages (role, content, tool calls, ids) of ``obj``."""


@hookspec(firstresult=True)
def agentsnap_restore_trace(obj: Any, messages: list[dict[str, Any]], context: HookContext) -> bool | None:
    """Put ``messages`` back into ``obj``; return True when done."""


@hookspec(firstresult=True)
def agentsnap_capture_state(obj: Any, context: HookContext) -> Any:
    """Return the framework execution state of ``obj`` as plain data."""


@hookspec(firstresult=True)
def agentsnap_restore_state(obj: Any, state: Any, context: HookContext) -> bool | None:
    """Load ``state`` into ``obj``; return True when done."""


@hookspec(firstresult=True)
def agentsnap_capture_effects(obj: Any, context: HookContext) -> Any:
    """Return the effects-ledger view of ``obj`` (entries, head), or None."""


@hookspec(firstresult=True)
def agentsnap_restore_effects(obj: Any, effects: Any, context: HookContext) -> bool | None:
    """Re-attach an effects ledger to ``obj``; return True when done."""


@hookspec(firstresult=True)
def agentsnap_capture_cache(obj: Any, context: HookContext) -> Any:
    """Return the inference-engine KV cache record of ``obj`` (pages, block table, fingerprint)."""


@hookspec(firstresult=True)
def agentsnap_restore_cache(obj: Any, cache: Any, context: HookContext) -> bool | None:
    """Load a KV cache record into ``obj``; return True when done."""


@hookspec(firstresult=True)
def agentsnap_capture_model(obj: Any, context: HookContext) -> Any:
    """Return weight deltas of ``obj`` (LoRA / adapter tensors) as a record."""


@hookspec(firstresult=True)
def agentsnap_restore_model(obj: Any, model: Any, context: HookContext) -> bool | None:
    """Apply a weight-delta record to ``obj``; return True when done."""


@hookspec(firstresult=True)
def agentsnap_merge_state(base: Any, ours: Any, theirs: Any, context: HookContext) -> Any:
    """Return ``(merged state, conflicts)`` for a framework's state layer, or None for the default."""


@hookspec(firstresult=True)
def agentsnap_summarize_branch(messages: list[dict[str, Any]], context: HookContext) -> dict[str, Any] | None:
    """Return one note message folding a branch's trace tail, or None for the default."""
