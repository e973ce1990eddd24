"""The journal of written-behind checkpoints: a SIGKILLed process loses none that a call returned.

A written-behind ``checkpoint()`` call appends the checkpoint (CrewAI's JSON and what its commit needs: the checkpoint
id, ref, branch, parent, trigger) to its process's journal of that store, ``<store>/crewai/journal/<pid>-<n>.journal``,
before it returns: one open fd (``O_APPEND``), one ``writev`` per checkpoint, no fsync. The page cache holds it, as it
holds the file CrewAI's JsonProvider writes (also without fsync): a killed process loses nothing a call returned;
power loss is what ``durable=True`` is for. Each entry is framed (magic, length, CRC-32), so a tail torn by a crash or
by power loss is detected and dropped, and nothing after it is read.

Once the background writer has committed (or failed) every entry of a journal file, the file is truncated (the one
being appended to) or removed (one rotated away from at ``ROTATE_BYTES``). The live process holds an exclusive
``flock`` on each of its journal files: a journal whose lock can be taken belongs to a dead process, and whoever
opens the store through the adapter replays it (see :func:`agentsnap_crewai.checkpoint.recover`) and removes it.
Threads of a process share its journal; each process has its own.
"""

from __future__ import annotations

import fcntl
import json
import os
import struct
import uuid
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentsnap_core.repository import journals as core_journals
from agentsnap_core.repository.journals import SUFFIX  # noqa: F401 - this adapter's journal names

_MAGIC = b"ASCJ"
_HEAD = struct.Struct("<4sII")  # magic, payload length, CRC-32 of the payload
#: a journal file still holding uncommitted entries is left for a new one (removed once all are committed) past this
ROTATE_BYTES = 64 << 20


def journal_dir(store_dir: Path) -> Path:
    """This adapter's journals of a store, where core looks for them (``agentsnap_core.repository.journals``)."""
    return core_journals.journal_dir(store_dir, "crewai")


def frame(meta: dict[str, Any], data: str) -> list[bytes]:
    """One journal entry: header, ``meta`` as one JSON line, then ``data`` (UTF-8), for one ``writev``."""
    head = json.dumps(meta, separators=(",", ":")).encode("utf-8") + b"\n"
    body = data.encode("utf-8")
    return [_HEAD.pack(_MAGIC, len(head) + len(body), zlib.crc32(body, zlib.crc32(head))), head, body]


def read_entries(fd: int) -> list[tuple[dict[str, Any], str]]:
    """The whole entries of the journal open at ``fd``, in order; a torn or corrupt entry ends the journal."""
    chunks = []
    os.lseek(fd, 0, os.SEEK_SET)
    while chunk := os.read(fd, 1 << 20):
        chunks.append(chunk)
    raw = b"".join(chunks)
    out, pos = [], 0
    while pos + _HEAD.size <= len(raw):
        magic, size, crc = _HEAD.unpack_from(raw, pos)
        payload = raw[pos + _HEAD.size : pos + _HEAD.size + size]
        if magic != _MAGIC or len(payload) != size or zlib.crc32(payload) != crc:
            break  # cut short by a crash (or garbage left by power loss): this entry and anything after it
        head, _, body = payload.partition(b"\n")
        try:
            out.append((dict(json.loads(head)), body.decode("utf-8")))
        except ValueError:
            break
        pos += _HEAD.size + size
    return out


@dataclass(eq=False)
class Segment:
    """One journal file of this process: its fd (flock'd), and the entries in it not yet committed or failed."""

    fd: int
    path: Path
    entries: int = 0
    size: int = 0


class Journal:
    """This process's journal of one store. Not thread-safe: the store's writer calls it under its condition lock."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.segments: list[Segment] = []
        self.current: Segment | None = None

    def _new(self) -> Segment:
        self.dir.mkdir(parents=True, exist_ok=True)
        name = f"{os.getpid()}-{uuid.uuid4().hex[:12]}"
        tmp = self.dir / f".{name}.tmp"  # locked before it gets the name replay looks for
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # held while this process lives (released by the kernel when it dies)
            path = self.dir / f"{name}{SUFFIX}"
            os.rename(tmp, path)
        except BaseException:
            os.close(fd)
            tmp.unlink(missing_ok=True)
            raise
        seg = Segment(fd, path)
        self.segments.append(seg)
        return seg

    def append(self, parts: list[bytes]) -> Segment:
        """Append one entry (from :func:`frame`) in one write; the segment that holds it. Raises OSError (disk full)."""
        seg = self.current or self._new()
        self.current = seg
        want = sum(len(p) for p in parts)
        try:
            wrote = os.writev(seg.fd, parts)
            if wrote != want:
                raise OSError(28, f"checkpoint journal {seg.path}: wrote {wrote} of {want} bytes")
        except OSError:
            os.ftruncate(seg.fd, seg.size)  # no torn entry in front of the next one
            raise
        seg.entries += 1
        seg.size += want
        return seg

    def batch_taken(self) -> None:
        """The writer took every queued entry: a large file is left to be removed once they are committed."""
        if self.current is not None and self.current.size > ROTATE_BYTES:
            self.current = None

    def tidy(self) -> None:
        """Drop the journal files whose every entry is committed or failed: truncate the current one, remove others."""
        for seg in list(self.segments):
            if seg.entries:
                continue
            if seg is self.current:
                if seg.size:
                    os.ftruncate(seg.fd, 0)
                    seg.size = 0
            else:
                seg.path.unlink(missing_ok=True)
                os.close(seg.fd)
                self.segments.remove(seg)

    def close(self) -> None:
        """At exit, all committed: remove this process's journal files (those still holding entries stay, for replay)."""
        for seg in list(self.segments):
            if not seg.entries:
                seg.path.unlink(missing_ok=True)
            os.close(seg.fd)
        self.segments, self.current = [], None


@contextmanager
def dead_journal(path: Path) -> Iterator[int | None]:
    """An fd of journal ``path``, flock'd, when its process is dead and nobody else is replaying it; else None."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        yield None
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:  # its process lives (this one included), or another is replaying it
            yield None
            return
        try:
            same = os.stat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False  # replayed and removed while we waited to open it
        yield fd if same else None
    finally:
        os.close(fd)


def journals(directory: Path) -> list[Path]:
    """The journal files in ``directory``, oldest first (stale ``.tmp`` files of a crash in creation removed)."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    for name in names:
        if name.endswith(".tmp"):
            with dead_journal(directory / name) as fd:
                if fd is not None:
                    (directory / name).unlink(missing_ok=True)
    stamped = []
    for name in names:
        if name.endswith(SUFFIX):
            try:
                stamped.append((os.stat(directory / name).st_mtime_ns, name))
            except FileNotFoundError:
                continue  # replayed and removed by another process meanwhile
    return [directory / name for _, name in sorted(stamped)]
