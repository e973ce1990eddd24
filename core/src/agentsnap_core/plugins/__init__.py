"""Loading plugins: the core's defaults plus the ``agentsnap`` entry-point group.

``AGENTSNAP_PLUGINS`` limits discovery: unset = every installed plugin; a comma-separated
list = only those entry-point names; ``none`` or an empty value = none.
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from agentsnap_core.errors import AgentSnapError

if TYPE_CHECKING:
    import pluggy

    from agentsnap_core.plugins.hookspecs import HookContext

# pluggy, the hook specs and entry-point discovery load with the first hook call, not with this module: the
# repository imports it, and `agentsnap status` never calls a hook.

ENTRY_POINT_GROUP = "agentsnap"
ENV_ALLOW = "AGENTSNAP_PLUGINS"
DEFAULTS_NAME = "agentsnap_core.plugins.defaults"  # the built-in hooks, always registered under this name

_lock = threading.Lock()
_pm: pluggy.PluginManager | None = None
_dists: dict[str, str] = {}


def lazy_exports(package: str, exports: dict[str, str]) -> Callable[[str], Any]:
    """A package's ``__getattr__`` (PEP 562) that imports ``package.<exports[name]>`` when ``name`` is first used.

    An adapter's package is imported with its plugin module by every process that uses agentsnap (entry-point
    discovery, the CLI's included): its public names must not import the framework (CrewAI and AutoGen take
    seconds) until one of them is used. ``from package import Name`` works as before.
    """
    import importlib
    import sys

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{module}"), name)
        setattr(sys.modules[package], name, value)  # (found directly from now on)
        return value

    return __getattr__


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

            pm.register(defaults, name=DEFAULTS_NAME)
            allowed = _allowed()
            found = _entry_points()
            unknown = sorted((allowed or set()) - {name for name, _load, _dist in found} - {DEFAULTS_NAME})
            if unknown:  # a typo would leave the adapter out, and every snapshot without its state, silently
                installed = ", ".join(sorted({name for name, _load, _dist in found})) or "none"
                raise AgentSnapError(
                    f"{ENV_ALLOW} names {', '.join(map(repr, unknown))}, which no installed agentsnap plugin is called "
                    f"(installed: {installed}); fix the name, or set {ENV_ALLOW}=none for none or unset it for all")
            for name, load, dist in found:
                if allowed is not None and name not in allowed:
                    continue
                if pm.has_plugin(name):
                    continue
                pm.register(load(), name=name)
                if dist is not None:
                    _dists[name] = dist
            check_hooks(pm)
            _pm = pm
        return _pm


def _entry_points() -> list[tuple[str, Callable[[], Any], str | None]]:
    """The ``agentsnap`` entry points as (name, loader, "Dist version"), from the cache when it is current.

    Importing ``importlib.metadata`` and scanning every installed distribution costs a CLI command more than
    the rest of its imports; the list only changes when a distribution is installed or removed, which changes
    the mtime of the ``sys.path`` folder it lives in. So the list is kept in ``$XDG_CACHE_HOME/agentsnap/plugins/``
    keyed by every ``sys.path`` entry with its mtime and inode, and used only while all of them match.
    ``AGENTSNAP_PLUGIN_CACHE=off`` turns it off (e.g. after editing an installed ``entry_points.txt`` by hand).
    """
    from agentsnap_core.plugins import epcache

    cached = epcache.load()
    if cached is not None:
        return [(name, functools.partial(epcache.load_value, value), dist) for name, value, dist in cached]
    import importlib.metadata

    found: list[tuple[str, Callable[[], Any], str | None]] = []
    rows: list[tuple[str, str, str | None]] | None = []
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        dist_obj = getattr(ep, "dist", None)
        dist = None if dist_obj is None else f"{dist_obj.metadata['Name']} {dist_obj.version}"
        found.append((ep.name, ep.load, dist))
        value = getattr(ep, "value", None)
        if rows is not None and isinstance(value, str):
            rows.append((ep.name, value, dist))
        else:
            rows = None  # an entry point we could not write down (a test's stand-in): no cache
    if rows is not None:
        epcache.store(rows)
    return found


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
    _check_instance(obj, "snapshot")
    context = hook_context(repo, **extra)
    layers = context["pm"].hook.agentsnap_capture(obj=obj, context=context)
    return None if layers is None else dict(layers)


def restore(obj: Any, layers: dict[str, Any], repo: Any, **extra: Any) -> bool:
    """Load layers into a live object through the adapter that handles it; False when no adapter could.

    The one entry point for restoring an object: Repo.restore_into / restore_many, Client and rollback use it.
    """
    _check_instance(obj, "restore")
    context = hook_context(repo, **extra)
    return bool(context["pm"].hook.agentsnap_restore(obj=obj, layers=layers, context=context))


def _check_instance(obj: Any, verb: str) -> None:
    """A class given for an agent (``client.save(MyAgent, ...)``) is one clear error, not the bare ``TypeError:
    state_dict() missing 1 required positional argument: 'self'`` a Snapshottable class gave."""
    if isinstance(obj, type):
        from agentsnap_core.errors import InvalidInput

        raise InvalidInput(f"cannot {verb} the class {obj.__name__} itself: pass an instance of it (an agent object)")


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
