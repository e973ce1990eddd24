"""agentsnap hooks for Open Interpreter (entry point ``openinterpreter`` in the ``agentsnap`` group).

Importing this module does not import Open Interpreter (that takes seconds): an object is ours only
when ``interpreter.core.core`` is already loaded and the object is an ``OpenInterpreter``.
"""

from __future__ import annotations

from typing import Any

from agentsnap_core.operations.merge import register_layer_merger
from agentsnap_core.plugins.hookspecs import hookimpl

from ._api import capture_layers, is_interpreter, restore_layers
from ._merge import merge_cells

NAME = "openinterpreter"
register_layer_merger("cells", merge_cells, replace=True)  # two forks of one session merge


@hookimpl
def agentsnap_handles(obj: Any) -> str | None:
    return NAME if is_interpreter(obj) else None


@hookimpl
def agentsnap_capture(obj: Any, context: dict[str, Any]) -> dict[str, Any] | None:
    return capture_layers(obj) if is_interpreter(obj) else None


@hookimpl
def agentsnap_restore(obj: Any, layers: dict[str, Any], context: dict[str, Any]) -> bool | None:
    if not is_interpreter(obj):
        return None
    restore_layers(obj, layers, context)
    return True
