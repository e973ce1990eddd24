"""Writer sessions: what a running snapshot tells gc, so that gc never deletes objects a writer is about to name.

A snapshot writes (or re-touches) its objects first and names them in a ref last. gc deletes unreachable objects
older than its grace period; on its own that is safe only when every snapshot takes less than the grace period
(``gc --prune now`` has none, and a loaded machine can make a snapshot take seconds). So each writer holds a
*session marker* from before its first object write until its ref update is done: a file in
``<store>/writers/`` carrying an exclusive ``flock``, whose mtime (the filesystem's clock, the one object mtimes
use) is the session's start. gc keeps every unreachable object modified after the oldest live marker, as well as
after its own start. A writer that died leaves a marker nobody holds the lock of: gc sees the lock free, ignores
the marker and removes it.

Scope: processes on this machine sharing the store directory (the embedded store; for PostgreSQL and S3 stores,
writers on other machines are protected by the grace period alone).
"""

from __future__ import annotations

import errno
import fcntl
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

DIR = "writers"
#: more than one tick of the kernel's coarse file-time clock (1-10 ms): mtimes within it cannot be ordered
TICK = 0.05


class WriterSessions:
    """Per-process marker, held while at least one writer session (any thread) is open."""

    def __init__(self, store_dir: str | os.PathLike[str]) -> None:
        self.dir = Path(store_dir) / DIR
        self._lock = threading.Lock()
        self._open = 0
        self._fd: int | None = None
        self._path: str | None = None

    @contextmanager
    def session(self) -> Iterator[None]:
        self._enter()
        try:
            yield
        finally:
            self._exit()

    def _enter(self) -> None:
        with self._lock:
            self._open += 1
            if self._open == 1:
                self._fd, self._path = _make_marker(self.dir)

    def _exit(self) -> None:
        with self._lock:
            self._open -= 1
            if self._open == 0 and self._fd is not None:
                fd, path, self._fd, self._path = self._fd, self._path, None, None
                if path is not None:
                    try:
                        os.unlink(path)
                    except OSError:
                        pass
                os.close(fd)  # releases the lock


def _make_marker(directory: Path) -> tuple[int | None, str | None]:
    """A locked marker under its final name; (None, None) when the store cannot be written (a read-only store
    has no gc running from this process to protect against, and no objects to write either)."""
    try:
        directory.mkdir(exist_ok=True)
        name = f"{os.getpid()}-{os.urandom(6).hex()}"
        tmp = directory / f".tmp-{name}"
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
    except OSError as exc:
        if exc.errno in (errno.EACCES, errno.EROFS, errno.EPERM):
            return None, None
        raise
    fcntl.flock(fd, fcntl.LOCK_EX)  # locked before it has a name gc looks at
    os.utime(fd)  # mtime = now on the filesystem's clock
    final = str(directory / name)
    os.rename(tmp, final)
    return fd, final


def oldest_live_session(store_dir: str | os.PathLike[str]) -> float | None:
    """The start (filesystem mtime) of the oldest writer session still running; stale markers are removed."""
    directory = Path(store_dir) / DIR
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return None
    oldest: float | None = None
    for name in names:
        if name.startswith(".tmp-"):
            continue
        path = directory / name
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            continue  # the session ended meanwhile
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:  # held: a live writer
                start = os.fstat(fd).st_mtime
                oldest = start if oldest is None else min(oldest, start)
                continue
            try:  # nobody holds it: its writer died; forget it
                os.unlink(path)
            except OSError:
                pass
        finally:
            os.close(fd)
    return oldest


def fs_now(store_dir: str | os.PathLike[str]) -> float:
    """The current time on the filesystem's clock (object mtimes lag time.time() by up to a kernel tick)."""
    directory = Path(store_dir) / DIR
    directory.mkdir(exist_ok=True)
    probe = directory / f".tmp-clock-{os.getpid()}-{os.urandom(4).hex()}"
    fd = os.open(probe, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        return os.fstat(fd).st_mtime
    finally:
        os.close(fd)
        os.unlink(probe)
