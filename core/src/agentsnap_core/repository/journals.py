"""Adapters' write-behind journals: checkpoints a process that ended left outside the store.

The convention (docs/PLUGINS.md): an adapter whose checkpoint call returns before the checkpoint is committed appends
it first to a journal of its own process, ``<store>/<adapter>/journal/*.journal``, and holds an exclusive ``flock``
on that file for as long as the process lives. It empties the file (truncates or removes it) once every entry is
committed, and replays the journal of a process that died when the store is next opened through the adapter.

Core never reads an entry. It only says when a journal is not empty and no live process holds it: its checkpoints
are not in the store yet, so ``log``, ``status`` and ``push`` would otherwise leave them out without a word.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Sequence
from pathlib import Path

#: a journal file's name ends so; it lies in :func:`journal_dir`
SUFFIX = ".journal"


def journal_dir(store_dir: str | os.PathLike[str], adapter: str) -> Path:
    """Where ``adapter`` keeps its processes' journals of the store in ``store_dir`` (the convention above)."""
    return Path(store_dir) / adapter / "journal"


def unreplayed(store_dir: str | os.PathLike[str]) -> list[tuple[str, Path]]:
    """``(adapter, journal file)`` of every non-empty journal whose process has ended, in path order."""
    found = []
    for path in sorted(_journal_files(store_dir)):  # every adapter's
        try:
            if path.stat().st_size == 0:
                continue
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)  # released by the close below
        except BlockingIOError:
            continue  # its process lives (or an adapter is replaying it right now)
        except OSError:
            pass  # a filesystem without flock: say it, an unneeded warning is better than a silent gap
        finally:
            os.close(fd)
        found.append((path.parent.parent.name, path))
    return found


def _journal_files(store_dir: str | os.PathLike[str]) -> list[Path]:
    """Every ``<store>/<adapter>/journal/*.journal`` (scandir, not ``Path.glob``: its patterns are compiled anew in
    each command, a third of a small ``status``'s own work)."""
    out: list[Path] = []
    try:
        adapters = [e.name for e in os.scandir(store_dir) if e.is_dir()]
    except OSError:
        return out
    for adapter in adapters:
        folder = journal_dir(store_dir, adapter)
        try:
            out.extend(folder / e.name for e in os.scandir(folder) if e.name.endswith(SUFFIX))
        except OSError:
            continue
    return out


def describe(found: Sequence[tuple[str, str | os.PathLike[str]]]) -> str:
    """The warning line for :func:`unreplayed`'s answer: how many, the first, and what adds them to the store."""
    adapters = sorted({adapter for adapter, _ in found})
    names = ", ".join(f"agentsnap-{a.replace('_', '-')}" for a in adapters)
    return (
        f"warning: {len(found)} write-behind journal(s) of a process that ended hold checkpoints that are not in the "
        f"store yet ({os.fspath(found[0][1])}{' ...' if len(found) > 1 else ''}); open the store through {names} to "
        f"add them (its README: the journal)"
    )


def notice(store_dir: str | os.PathLike[str]) -> str | None:
    """:func:`describe` of the journals :func:`unreplayed` finds, or None."""
    found = unreplayed(store_dir)
    return describe(found) if found else None
