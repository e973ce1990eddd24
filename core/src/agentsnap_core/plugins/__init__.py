"""Loading plugins: the core's defaults plus the ``agentsnap`` entry-point group.

``AGENTSNAP_PLUGINS`` limits discovery: unset = every installed plugin; a comma-separated
list = only those entry-point names; ``none`` or an empty value = none.
"""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING, Any

from agentsnap_core.errors import AgentSnapError

if TYPE_CHECKING:
    import pluggy

    from agentsnap_core.plugins.hookspecs import HookContext

# pluggy, the hook specs and entry-point discovery load with the first hook call, not with this module: the
# repository imports it, and `agentsnap status` never calls a hook.

ENTRY_POINT_GROUP = "agentsnap"
ENV_ALLOW = "AGENTSNAP_PLUGINS"

_lock = threading.Lock()
_pm: pluggy.PluginManager | None = None
_dists: dict[str, str] = {}


def _allowed() -> set[str] | None:
    value = os.environ.get(ENV_ALLOW)
    if value is None:
        return None
    value = value.strip()
    if value.lower() in ("", "none"):
        return set()
    return {v.strip() for v in value.split(",") if v.strip()}


def get_plugin_manager() -> pluggy.PluginManager:
    """The process-wide plugin manager; loading is idempotent."""
    global _pm
    with _lock:
        if _pm is None:
            import pluggy

            from agentsnap_core.plugins import hookspecs

            pm = pluggy.PluginManager("agentsnap")
            pm.add_hookspecs(hookspecs)
            from agentsnap_core.plugins import defaults

            pm.register(defaults, name="agentsnap_core.plugins.defaults")
            allowed = _allowed()
            import importlib.metadata

            for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
                if allowed is not None and ep.name not in allowed:
                    continue
                if pm.has_plugin(ep.name):
                    continue
                pm.register(ep.load(), name=ep.name)
                dist = getattr(ep, "dist", None)
                if dist is not None:
                    _dists[ep.name] = f"{dist.metadata['Name']} {dist.version}"
            check_hooks(pm)
            _pm = pm
        return _pm


def check_hooks(pm: pluggy.PluginManager) -> None:
    """Refuse a plugin implementing a hook agentsnap does not define (a typo, or a hook a newer core removed):
    pluggy would otherwise never call it, and the plugin would fail silently."""
    from pluggy import PluginValidationError

    try:
        pm.check_pending()
    except PluginValidationError as exc:
        name = str(pm.get_name(exc.plugin) or getattr(exc.plugin, "__name__", repr(exc.plugin)))
        raise AgentSnapError(
            f"plugin {name} ({_dists.get(name, 'registered at run time')}): {exc}; see docs/PLUGINS.md for the hooks "
            f"agentsnap defines, or leave the plugin out with {ENV_ALLOW}"
        ) from None


def hook_context(repo: Any, **extra: Any) -> HookContext:
    """The context of one hook call: the repository, the plugin manager, and what this call concerns."""
    context: HookContext = {"repo": repo, "pm": get_plugin_manager()}
    context.update(extra)  # type: ignore[typeddict-item]
    return context


def capture(obj: Any, repo: Any, **extra: Any) -> dict[str, Any] | None:
    """Every layer of a live object, through the adapter that handles it (None when none does).

    The one entry point for capturing an object: Repo.capture / capture_many, Client.capture and rollback use it.
    """
    context = hook_context(repo, **extra)
    layers = context["pm"].hook.agentsnap_capture(obj=obj, context=context)
    return None if layers is None else dict(layers)


def restore(obj: Any, layers: dict[str, Any], repo: Any, **extra: Any) -> bool:
    """Load layers into a live object through the adapter that handles it; False when no adapter could.

    The one entry point for restoring an object: Repo.restore_into / restore_many, Client and rollback use it.
    """
    context = hook_context(repo, **extra)
    return bool(context["pm"].hook.agentsnap_restore(obj=obj, layers=layers, context=context))


def reset_plugin_manager() -> None:
    """Forget loaded plugins (tests); the next call reloads them."""
    global _pm
    with _lock:
        _pm = None


def list_plugins() -> list[dict[str, str]]:
    pm = get_plugin_manager()
    out = []
    for name, plugin in pm.list_name_plugin():
        if plugin is None:
            continue
        out.append(
            {
                "name": name,
                "module": getattr(plugin, "__name__", type(plugin).__name__),
                "dist": _dists.get(name, "agentsnap-core (built in)" if name.startswith("agentsnap_core.") else "registered at run time"),
                "hooks": ",".join(sorted(h.name for h in pm.get_hookcallers(plugin) or [])),
            }
        )
    return out
