"""agentsnap hook implementations for AutoGen teams and agents (entry point ``autogen``).

The hooks are synchronous; they drive AutoGen's coroutines on the adapter's background loop
(:mod:`agentsnap_autogen._bridge`). From async code use :func:`agentsnap_autogen.snapshot` /
:func:`agentsnap_autogen.restore` instead of ``repo.capture`` / ``repo.restore_into``.
"""

from __future__ import annotations

import sys
from typing import Any

from agentsnap_core import hookimpl

from ._format import is_payload as _is_payload

# This module is loaded by every process that uses agentsnap (entry-point discovery, every CLI command): it imports
# no AutoGen module at load. No AutoGen team or agent can exist in a process that has not imported autogen_agentchat,
# so the hooks answer None there without importing it.


def _kind_of(obj: Any) -> str | None:
    if "autogen_agentchat" not in sys.modules:
        return None
    from ._team import kind_of

    return kind_of(obj)


@hookimpl
def agentsnap_handles(obj: Any) -> str | None:
    return "autogen" if _kind_of(obj) else None


@hookimpl
def agentsnap_capture(obj: Any, context: dict[str, Any]) -> dict[str, Any] | None:
    if _kind_of(obj) is None:
        return None
    from ._bridge import run_sync
    from ._team import capture_layers, own_settings

    layers = run_sync(capture_layers(obj))
    own_settings(context.get("repo"), layers["state"])
    return layers


@hookimpl
def agentsnap_restore(obj: Any, layers: dict[str, Any], context: dict[str, Any]) -> bool | None:
    state = layers.get("state")
    if _kind_of(obj) is None or not _is_payload(state):
        return None
    from ._bridge import run_sync
    from ._config import own_token
    from ._team import restore_state

    repo = context.get("repo")
    own = repo is not None and repo.captured_here(own_token(state))
    run_sync(restore_state(obj, state, own=own, trust_code=bool((context.get("options") or {}).get("trust_code"))))
    return True


@hookimpl
def agentsnap_merge_state(base: Any, ours: Any, theirs: Any, context: dict[str, Any]) -> Any:
    if not (_is_payload(ours) and _is_payload(theirs)):
        return None
    from ._merge import merge_payloads

    return merge_payloads(base, ours, theirs, context)
