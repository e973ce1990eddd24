"""A cached list of the ``agentsnap`` entry points, valid while no ``sys.path`` folder has changed.

Installing or removing a distribution adds or removes its ``*.dist-info`` folder, which changes the mtime of
the folder it lives in, so the key is every ``sys.path`` entry with its mtime (ns) and inode (a folder replaced by
another). Like git's index, a folder whose mtime is within :data:`RACY_NS` of the moment the list is written may
still change within the same clock tick unnoticed: then no cache is written, and the next process looks again.
A cache that is missing, unreadable, of another version or for other folders is ignored (the full scan runs);
one that cannot be written (read-only home) is simply not written. Nothing here raises.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import time
import zlib
from typing import Any

VERSION = 1
ENV = "AGENTSNAP_PLUGIN_CACHE"
#: a folder changed this recently may change again within its mtime's resolution: do not vouch for it yet
RACY_NS = 2_000_000_000


def _enabled() -> bool:
    return os.environ.get(ENV, "").strip().lower() not in ("off", "0", "no", "false")


def _key() -> list[list[Any]]:
    key: list[list[Any]] = [[sys.executable, 0, 0]]
    for entry in sys.path:
        try:
            st = os.stat(entry or ".")
        except OSError:
            key.append([entry, None, None])
        else:
            key.append([entry, st.st_mtime_ns, st.st_ino])
    return key


def _path() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    where = "\0".join([sys.executable, *sys.path]).encode("utf-8", "surrogateescape")
    return os.path.join(base, "agentsnap", "plugins", f"entry-points-{zlib.crc32(where):08x}.json")


def load() -> list[tuple[str, str, str | None]] | None:
    """The cached (name, "module:attr", "Dist version") rows, or None when there is no current cache."""
    if not _enabled():
        return None
    try:
        with open(_path(), encoding="utf-8") as f:
            doc = json.load(f)
        if doc.get("version") != VERSION or doc.get("key") != _key():
            return None
        return [(str(n), str(v), None if d is None else str(d)) for n, v, d in doc["entry_points"]]
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return None


def store(rows: list[tuple[str, str, str | None]]) -> None:
    """Write the rows for the current ``sys.path``, unless a folder changed too recently to vouch for it."""
    if not _enabled():
        return
    key = _key()
    now = time.time_ns()
    if any(mtime is not None and now - mtime < RACY_NS for _, mtime, _ino in key[1:]):
        return
    path = _path()
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump({"version": VERSION, "key": key, "entry_points": [list(r) for r in rows]}, f)
        os.replace(tmp, path)
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass


def load_value(value: str) -> Any:
    """What an entry point's ``module:attr.attr`` (or ``module``) names, as ``EntryPoint.load`` gives it."""
    target = value.split("[", 1)[0].strip()  # a trailing "[extras]" names no object
    module, _, attr = target.partition(":")
    obj: Any = importlib.import_module(module.strip())
    for part in filter(None, attr.strip().split(".")):
        obj = getattr(obj, part)
    return obj
