"""Schema versions on agent state: migrations registered per class name, applied when a snapshot loads.

``register_migration("MyAgent", "1.0", fn)`` says how to turn a ``MyAgent`` state of version 1.0 into
the next version: the ``to=`` given, else the next version a migration is registered from, else the
class's current ``__snapshot_version__``. Loading applies the chain step by step; a state with no path
to the running class's version is refused, naming the missing step.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from typing import Any

from agentsnap_core.errors import AgentSnapError

__all__ = ["MigrationError", "clear_migrations", "migrate", "register_migration"]

Migration = Callable[[dict[str, Any]], dict[str, Any]]

_lock = threading.Lock()
_registry: dict[str, dict[str, tuple[Migration, str | None]]] = {}


class MigrationError(AgentSnapError):
    """A stored state cannot be brought to the running class's schema version."""

    def __init__(self, name: str, stored: str, current: str, reason: str) -> None:
        self.name, self.stored, self.current = name, stored, current
        super().__init__(f"cannot load {name} state of version {stored} into version {current}: {reason}")


def version_key(version: str) -> tuple[Any, ...]:
    """Order versions numerically part by part ("1.10" after "1.9"); non-numeric parts sort as text."""
    return tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in re.split(r"[.\-+]", str(version)))


def _same_version(a: str, b: str) -> bool:
    """True when ``a`` and ``b`` name one version, trailing zero parts aside ("1" is "1.0" is "1.0.0")."""
    return _canonical(a) == _canonical(b)


def _canonical(version: str) -> tuple[Any, ...]:
    key = list(version_key(version))
    while len(key) > 1 and key[-1] == (0, 0, ""):
        key.pop()
    return tuple(key)


def _check_version(what: str, version: object) -> str:
    # (a float loses digits: 1.10 is 1.1; a class or None would be registered under a name no state ever has)
    if isinstance(version, bool) or not isinstance(version, (str, int)) or not str(version):
        raise AgentSnapError(f"register_migration: {what} must be a version str such as '1.10', not {version!r}"
                             + (" (a float loses digits: 1.10 is 1.1)" if isinstance(version, float) else ""))
    return str(version)


def register_migration(
    name: str | type, from_version: str, fn: Migration | None = None, *, to: str | None = None
) -> Any:
    """Register ``fn(state) -> state`` upgrading ``name``'s state from ``from_version``; usable as a decorator.

    Args:
        name: the class name (or its ``__snapshot_name__``), or the class itself.
        from_version: the version the function reads.
        fn: the migration; it gets and returns the decoded state dict (tuples, datetimes... as Python values).
        to: the version it writes (default: the next registered version, else the class's current one).
    """
    if isinstance(name, type):
        from agentsnap_core.format.snapshottable import snapshot_name

        name = snapshot_name(name)
    if not isinstance(name, str) or not name:
        raise AgentSnapError(f"register_migration needs a class name (a str) or the class, not {name!r}")
    from_version = _check_version("from_version", from_version)
    to = None if to is None else _check_version("to", to)

    def add(func: Migration) -> Migration:
        if not callable(func):
            raise AgentSnapError(f"migration for {name} {from_version} must be callable")
        with _lock:
            _registry.setdefault(name, {})[from_version] = (func, to)
        return func

    return add if fn is None else add(fn)


def clear_migrations(name: str | None = None) -> None:
    """Forget registered migrations (all, or one class's); for tests."""
    with _lock:
        if name is None:
            _registry.clear()
        else:
            _registry.pop(name, None)


def migrate(name: str, stored: str, state: Any, current: str, path: str | None = None) -> Any:
    """``state`` (of version ``stored``) brought to version ``current`` through the registered chain."""
    if _same_version(stored, current):
        return state
    where = f" (at {path})" if path and path != name else ""
    with _lock:
        registered = dict(_registry.get(name, {}))
    steps = {_canonical(v): (v, *step) for v, step in registered.items()}  # ("1" and "1.0" are one version)
    if _canonical(stored) > _canonical(current):
        raise MigrationError(name, stored, current, f"the snapshot is newer than this code{where}; upgrade the agent's code to load it")
    ordered = sorted(registered, key=version_key)
    version, seen = stored, set()
    while not _same_version(version, current):
        if _canonical(version) in seen or _canonical(version) not in steps:
            hint = f"register one with agentsnap_core.register_migration({name!r}, {version!r}, fn)"
            raise MigrationError(name, stored, current, f"no migration from version {version}{where}; {hint}")
        seen.add(_canonical(version))
        version, fn, target = steps[_canonical(version)]
        if target is None:
            later = [v for v in ordered if _canonical(v) > _canonical(version) and _canonical(v) <= _canonical(current)]
            target = later[0] if later else current
        try:
            state = fn(state)
        except Exception as exc:
            raise MigrationError(name, stored, current, f"the {version} -> {target} migration failed ({type(exc).__name__}: {exc})") from exc
        if not isinstance(state, dict):
            raise MigrationError(name, stored, current, f"the {version} -> {target} migration returned {type(state).__name__}, not a dict")
        version = target
        if _canonical(version) > _canonical(current):
            raise MigrationError(name, stored, current, f"the chain overshoots to {version}{where}")
    return state
