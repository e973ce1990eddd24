"""Adapters' write-behind journals: checkpoints a process that ended left outside the store.

The convention (docs/PLUGINS.md): an adapter whose checkpoint call returns before the checkpoint is committed appends
it first to a journal of its own process, ``<store>/<adapter>/journal/*.journal``, and holds an exclusive ``flock``
on that file for as long as the process lives. It empties the file (truncates or removes it) once every entry is
committed, and replays the journal of a process that died when the store is next opened through the adapter.

Core never reads an entry. It only says when a journal is not empty and no live process holds it: its checkpoints
are not in the store yet, so ``log``, ``status`` and ``push`` would otherwise leave them out without a word.

A second kind: state an adapter keeps **between snapshots** by design (CrewAI's memory: every write is journalled,
and ``AgentsnapStorage.snapshot()`` puts the whole memory into a snapshot) lives in ``<worktree dir>/<adapter>/
*.journal``. Such a file that is not empty holds writes no snapshot has, whether its process lives or not: ``push``
would send the branch without them (a teammate's clone then lacks them), so ``status``, ``log`` and ``push`` say so.
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


def _journal_files(root: str | os.PathLike[str], sub: str = "journal") -> list[Path]:
    """Every ``<root>/<adapter>/<sub>/*.journal`` (scandir, not ``Path.glob``: its patterns are compiled anew in
    each command, a third of a small ``status``'s own work)."""
    out: list[Path] = []
    try:
        adapters = [e.name for e in os.scandir(root) if e.is_dir()]
    except OSError:
        return out
    for adapter in adapters:
        folder = Path(root) / adapter / sub if sub else Path(root) / adapter
        try:
            out.extend(folder / e.name for e in os.scandir(folder) if e.name.endswith(SUFFIX))
        except OSError:
            continue
    return out


def describe(found: Sequence[tuple[str, str | os.PathLike[str]]]) -> str:
    """The warning line for :func:`unreplayed`'s answer: how many, the first, and what adds them to the store."""
    names, first = _named(found)
    return (
        f"warning: {len(found)} write-behind journal(s) of a process that ended hold checkpoints that are not in the "
        f"store yet ({first}); open the store through {names} to add them (its README: the journal)"
    )


def _named(found: Sequence[tuple[str, str | os.PathLike[str]]]) -> tuple[str, str]:
    """The adapters' distribution names, and the first journal (with "..." when there are more)."""
    names = ", ".join(f"agentsnap-{a.replace('_', '-')}" for a in sorted({adapter for adapter, _ in found}))
    return names, f"{os.fspath(found[0][1])}{' ...' if len(found) > 1 else ''}"


def unsnapshotted(wt_dir: str | os.PathLike[str]) -> list[tuple[str, Path]]:
    """``(adapter, journal file)`` of every non-empty ``<wt_dir>/<adapter>/*.journal``: writes in no snapshot yet."""
    found = []
    for path in sorted(_journal_files(wt_dir, "")):
        try:
            if path.is_file() and path.stat().st_size > 0:
                found.append((path.parent.name, path))
        except OSError:
            continue
    return found


def describe_unsnapshotted(found: Sequence[tuple[str, str | os.PathLike[str]]]) -> str:
    """The warning line for :func:`unsnapshotted`'s answer."""
    names, first = _named(found)
    return (
        f"warning: {len(found)} journal(s) of {names} hold writes that are in no snapshot yet ({first}): push and "
        f"clone do not carry them; snapshot them through {names} first (its README: the journal)"
    )


def notice(store_dir: str | os.PathLike[str], wt_dir: str | os.PathLike[str] | None = None) -> str | None:
    """:func:`describe` of the journals :func:`unreplayed` finds, or None."""
    found = unreplayed(store_dir)
    lines = [describe(found)] if found else []
    pending = unsnapshotted(wt_dir) if wt_dir is not None else []
    if pending:
        lines.append(describe_unsnapshotted(pending))
    return "\n".join(lines) or None
