"""A change journal for working trees: which directories changed since a capture, from the kernel (Linux inotify).

Like git's fsmonitor: a long-lived process (the resident process, :mod:`agentsnap_core.cli.resident`) watches each
working tree it has served, and a capture it runs rescans only the directories the kernel reported a change in since
the capture its stat cache came from, instead of ``lstat``-ing every file. Each directory of the tree is watched for
its entries being created, deleted, renamed, written, closed after writing or changed in their attributes; an event
marks the directory it happened in as changed, with the number of the read (:attr:`Watch.seq`) it came in.

The journal is trusted only where it cannot have missed anything, else the capture walks the whole tree as always:

- a listing's token (:attr:`Watch.id`, the read number before the capture) is good only with the very watch that
  issued it (a new resident process, or a reset watch, has a new id), and only if every directory of that listing
  was watched before the capture began (:meth:`Watch.covers`; the missing ones are asked for, :meth:`Watch.want`,
  and the capture after next uses the journal);
- the kernel's queue overflowing, a directory moved (its watches would name the old path), the root itself deleted
  or moved, or more directories than :data:`MAX_WATCHES` ends the watch (the next capture walks, and watches again);
- a file with more than one hard link is ``lstat``-ed at every capture (a write through its other name is reported
  in the other directory); so is a file recorded as racily clean;
- only local filesystems (:data:`LOCAL_FILESYSTEMS`): a change made on another machine to a network filesystem is
  never reported.

What the kernel does not report, this cannot see: a file changed through a writable ``mmap`` (no write call), or a
filesystem mounted over a directory of the tree after it was watched. ``AGENTSNAP_JOURNAL=0`` turns the journal off.
"""

from __future__ import annotations

import os
import struct
import sys
from collections.abc import Iterable

#: inotify event bits (linux/inotify.h)
IN_MODIFY, IN_ATTRIB, IN_CLOSE_WRITE = 0x2, 0x4, 0x8
IN_MOVED_FROM, IN_MOVED_TO, IN_CREATE, IN_DELETE = 0x40, 0x80, 0x100, 0x200
IN_DELETE_SELF, IN_MOVE_SELF = 0x400, 0x800
IN_UNMOUNT, IN_Q_OVERFLOW, IN_IGNORED = 0x2000, 0x4000, 0x8000
IN_ONLYDIR, IN_DONT_FOLLOW, IN_EXCL_UNLINK, IN_ISDIR = 0x01000000, 0x02000000, 0x04000000, 0x40000000
MASK = (IN_MODIFY | IN_ATTRIB | IN_CLOSE_WRITE | IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE | IN_DELETE
        | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR | IN_DONT_FOLLOW | IN_EXCL_UNLINK)
_EVENT = struct.Struct("iIII")
#: a tree with more directories than this is walked, not watched (the user's inotify watches are shared)
MAX_WATCHES = 65536
#: filesystems whose changes are all made through this kernel (so inotify hears of them)
LOCAL_FILESYSTEMS = frozenset({"ext2", "ext3", "ext4", "xfs", "btrfs", "tmpfs", "overlay", "zfs", "f2fs", "bcachefs",
                               "jfs", "reiserfs", "ramfs", "vfat", "exfat", "ntfs3", "hfsplus", "apfs"})

_libc = None


def _lib():  # type: ignore[no-untyped-def]
    global _libc
    if _libc is None:
        import ctypes
        import ctypes.util

        lib = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        lib.inotify_init1.argtypes = [ctypes.c_int]
        lib.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
        _libc = (lib, ctypes)
    return _libc


def enabled() -> bool:
    return sys.platform.startswith("linux") and os.environ.get("AGENTSNAP_JOURNAL", "1") != "0"


def _mounts() -> list[tuple[str, str | None]]:
    """``(mount point, filesystem type)`` of every mount this process sees (``/proc/self/mountinfo``)."""
    try:
        with open("/proc/self/mountinfo", "rb") as f:
            lines = f.read().decode("utf-8", "surrogateescape").splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        left, sep, right = line.partition(" - ")
        parts = left.split()
        if not sep or len(parts) < 5:
            continue
        point = parts[4].replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n").replace("\\134", "\\")
        out.append((point, right.split()[0] if right.split() else None))
    return out


def filesystem(path: str, mounts: list[tuple[str, str | None]] | None = None) -> str | None:
    """The type of the filesystem ``path`` lives on (``/proc/self/mountinfo``), or None when it cannot be told."""
    real = os.path.realpath(path)
    best, kind = -1, None
    for point, fs in _mounts() if mounts is None else mounts:
        if (real == point or real.startswith(point.rstrip("/") + "/")) and len(point) >= best:
            best, kind = len(point), fs
    return kind


def watchable(root: str) -> bool:
    """Whether inotify hears of every change in the tree at ``root``: it lives on a local filesystem and no other
    filesystem is mounted inside it (a network or FUSE mount there would change without an event; any mount
    below the root is refused, whatever its kind: the capture then walks, as without a journal)."""
    mounts = _mounts()
    if not mounts:
        return False
    real = os.path.realpath(root)
    below = real.rstrip("/") + "/"
    if any(point.startswith(below) for point, _fs in mounts):
        return False
    return filesystem(root, mounts) in LOCAL_FILESYSTEMS


class Watch:
    """The inotify watches on one working tree and the directories they reported changed, by read number.

    Lives in a long-lived process; a child forked from it reads the state as it was at the fork (``since``,
    ``covers``) and never reads the descriptor (the parent's reads would miss what it took).
    """

    def __init__(self, root: str) -> None:
        lib, _ = _lib()
        self.root = root
        self.id = os.urandom(8).hex()
        self.seq = 0
        self.fd = lib.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if self.fd < 0:
            raise OSError(_lib()[1].get_errno(), "inotify_init1")
        self.dirs: dict[str, int] = {}  # relative directory ("" is the root) -> watch descriptor
        self.paths: dict[int, str] = {}
        self.changed: dict[str, int] = {}  # relative directory -> the read that last reported a change in it
        #: relative directory -> the read that last reported an entry leaving it (deleted or moved out): a directory
        #: without one since a listing still holds every entry it had then (so a capture need not look for them)
        self.lost: dict[str, int] = {}
        #: relative directory -> the read that last reported an entry made in it or leaving it (created, deleted, moved
        #: in or out): a directory without one since a listing has the same names it had then
        self.relisted: dict[str, int] = {}
        #: why this watch stopped (it then reports nothing and is replaced), or None
        self.broken: str | None = None

    # -- the parent: adding, reading ----------------------------------------------------------------------------
    def add(self, rels: Iterable[str], recurse: bool = False) -> list[str]:
        """Watch these directories (relative to the root); ``recurse``: and every directory below them. Returns the
        directories it began to watch."""
        lib, ctypes = _lib()
        todo = list(rels)
        added: list[str] = []
        while todo and self.broken is None:
            rel = todo.pop()
            if rel in self.dirs:
                continue
            if len(self.dirs) >= MAX_WATCHES:
                self.stop(f"more than {MAX_WATCHES} directories")
                return added
            full = os.path.join(self.root, rel) if rel else self.root
            wd = lib.inotify_add_watch(self.fd, os.fsencode(full), MASK)
            if wd < 0:
                err = ctypes.get_errno()
                if err in (2, 20, 13, 40):  # ENOENT, ENOTDIR, EACCES, ELOOP: gone or not a directory now
                    continue  # (its parent's event, or the capture's coverage check, tells)
                self.stop(f"inotify_add_watch: {os.strerror(err)}")
                return added
            old = self.paths.get(wd)
            if old is not None and old != rel:  # the same directory under another name: a move we did not see
                self.stop(f"{full!r} is also watched as {old!r}")
                return added
            self.dirs[rel] = wd
            self.paths[wd] = rel
            added.append(rel)
            if recurse:
                try:
                    with os.scandir(full) as it:
                        todo.extend(f"{rel}/{e.name}" if rel else e.name for e in it
                                    if e.name != ".agentsnap" and e.is_dir(follow_symlinks=False))
                except OSError:
                    pass
        return added

    def drain(self) -> int:
        """Read every event queued; returns how many. A change marks its directory with a new read number."""
        if self.broken is not None:
            return 0
        chunks = []
        while True:
            try:
                data = os.read(self.fd, 1 << 16)
            except BlockingIOError:
                break
            except OSError as exc:
                self.stop(f"reading events: {exc}")
                return 0
            if not data:
                break
            chunks.append(data)
        if not chunks:
            return 0
        self.seq += 1
        seq, n = self.seq, 0
        data = b"".join(chunks)
        off, size = 0, _EVENT.size
        new_dirs: list[str] = []
        while off + size <= len(data):
            wd, mask, _cookie, length = _EVENT.unpack_from(data, off)
            name = data[off + size : off + size + length].rstrip(b"\0")
            off += size + length
            n += 1
            if mask & IN_Q_OVERFLOW:
                self.stop("the kernel's event queue overflowed")
                return n
            rel = self.paths.get(wd)
            if rel is None:
                continue  # a watch removed meanwhile
            if mask & IN_IGNORED:  # the directory is gone (or unmounted): its parent reports the deletion
                self.paths.pop(wd, None)
                if self.dirs.get(rel) == wd:
                    del self.dirs[rel]
                if not rel:
                    self.stop("the root was removed")
                    return n
                continue
            if mask & (IN_MOVE_SELF | IN_UNMOUNT) or (mask & (IN_MOVED_FROM | IN_MOVED_TO) and mask & IN_ISDIR):
                self.stop("a directory was moved" if not mask & IN_UNMOUNT else "a filesystem was unmounted")
                return n
            if mask & IN_DELETE_SELF:
                continue
            if not name:  # the directory itself (its mode): recorded in its parent's listing
                self.changed[rel.rpartition("/")[0] if "/" in rel else ""] = seq
                continue
            self.changed[rel] = seq
            if mask & (IN_DELETE | IN_MOVED_FROM):
                self.lost[rel] = seq
            if mask & (IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO):
                self.relisted[rel] = seq
            if mask & IN_CREATE and mask & IN_ISDIR:
                child = os.fsdecode(name)
                new_dirs.append(f"{rel}/{child}" if rel else child)
        if new_dirs:  # watched now; what was made in them before the watch is found by reading each of them: the
            # directories below a new one too (no event names them: made before anything watched them, and one of
            # the same name may be in the last listing, so the capture would not take it for new)
            for d in {*new_dirs, *self.add(new_dirs, recurse=True)}:
                self.changed[d] = seq
        return n

    def stop(self, why: str) -> None:
        self.broken = why
        self.close()

    def close(self) -> None:
        if self.fd >= 0:
            try:
                os.close(self.fd)
            except OSError:
                pass
            self.fd = -1

    # -- the child: asking ----------------------------------------------------------------------------------------
    def since(self, token: object) -> set[str] | None:
        """The directories changed after ``token`` (this watch's ``[id, read]``), or None when it cannot tell."""
        if self.broken is not None or not (isinstance(token, list) and len(token) == 2 and token[0] == self.id):
            return None
        after = token[1]
        if not isinstance(after, int) or after > self.seq:
            return None
        return {d for d, s in self.changed.items() if s > after}

    def lost_since(self, token: object) -> set[str] | None:
        """The directories an entry left (deleted or moved out) after ``token``, or None when it cannot tell."""
        return self._marked_since(self.lost, token)

    def relisted_since(self, token: object) -> set[str] | None:
        """The directories an entry was made in or left (created, deleted, moved in or out) after ``token``, or None
        when it cannot tell (a directory not in it has only had its entries written or their attributes changed)."""
        return self._marked_since(self.relisted, token)

    def _marked_since(self, marks: dict[str, int], token: object) -> set[str] | None:
        if self.since(token) is None:
            return None
        after = token[1]  # type: ignore[index]
        return {d for d, s in marks.items() if s > after}

    def token(self) -> list[object] | None:
        return None if self.broken is not None else [self.id, self.seq]

    def covers(self, dirs: Iterable[str]) -> list[str]:
        """The directories among ``dirs`` this watch does not watch."""
        have = self.dirs
        return [d for d in dirs if d not in have]


# -- the process that keeps watches (the resident process) and its children ---------------------------------------

#: root -> its watch, in the process that keeps them (and, frozen at the fork, in each child)
WATCHES: dict[str, Watch] = {}
#: in a child: the file it writes the directories it wants watched to (read by the parent when the child ends)
REQUESTS: str | None = None
_ACTIVE = False


def serving() -> None:
    """Called by the process that keeps watches: captures in its children may use them."""
    global _ACTIVE
    _ACTIVE = enabled()


class Unwatched:
    """Stands for a watch a process that keeps watches does not have yet: the capture asks for one."""

    def __init__(self, root: str) -> None:
        self.root = root

    def since(self, token: object) -> None:
        return None

    def lost_since(self, token: object) -> None:
        return None

    def relisted_since(self, token: object) -> None:
        return None

    def token(self) -> None:
        return None

    def covers(self, dirs: Iterable[str]) -> list[str]:
        return list(dirs)


def lookup(root: str) -> Watch | Unwatched | None:
    """What a capture of ``root`` may use: only in a child of a process that keeps watches (else None)."""
    if not _ACTIVE:
        return None
    w = WATCHES.get(root)
    return w if w is not None and w.broken is None else Unwatched(root)


def want(root: str, dirs: list[str]) -> None:
    """Ask the parent to watch ``dirs`` of ``root`` (from a child; nothing elsewhere)."""
    if not _ACTIVE or REQUESTS is None or not dirs:
        return
    if not watchable(root):
        return
    try:
        with open(REQUESTS, "ab") as f:
            # root NUL "/"dir NUL "/"dir ... NUL NUL: every field is non-empty (the root directory is "/")
            f.write(b"\0".join([os.fsencode(root), *(b"/" + os.fsencode(d) for d in dirs)]) + b"\0\0")
    except OSError:
        pass


def in_child(requests: str) -> None:
    """In a freshly forked child: keep the state, drop the descriptors, write requests to ``requests``."""
    global REQUESTS
    REQUESTS = requests
    for w in WATCHES.values():
        w.close()


def drain_all() -> None:
    """In the parent, before a fork: read every watch's events; forget the broken ones."""
    for root, w in list(WATCHES.items()):
        w.drain()
        if w.broken is not None:
            _log(f"stopped watching {root}: {w.broken}; the next capture walks it")
            w.close()
            del WATCHES[root]


def take_file(path: str) -> bytes | None:
    """In the parent: the file a child that ended wrote for it, read and removed (None: it wrote none)."""
    try:
        with open(path, "rb") as f:
            data = f.read()
        os.unlink(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        _log(f"{path}: {exc}")
        return None
    return data


def take_requests(path: str) -> None:
    """In the parent, when a child ended: watch what it asked for."""
    data = take_file(path)
    if data is None:
        return
    for block in data.split(b"\0\0"):
        if not block:
            continue
        root, *dirs = (os.fsdecode(p) for p in block.split(b"\0"))
        dirs = [d[1:] for d in dirs]
        w = WATCHES.get(root)
        if w is None:
            try:
                w = WATCHES[root] = Watch(root)
            except OSError as exc:
                _log(f"cannot watch {root}: {exc}")
                continue
        w.add(dirs)
        if w.broken is not None:
            _log(f"stopped watching {root}: {w.broken}; captures walk it")
            w.close()
            del WATCHES[root]


def descriptors() -> list[int]:
    return [w.fd for w in WATCHES.values() if w.fd >= 0]


def _log(message: str) -> None:
    sys.stderr.write(f"agentsnap resident {os.getpid()}: {message}\n")
