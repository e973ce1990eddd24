"""Pack files: many small objects in one file, like git's packfiles (see docs/FORMAT.md, "Packs").

A pack is one file ``objects/pack/pack-<id>.pack``::

    b"ASPK" | version (u8) | flags (u8; bit 0: every object re-compressed by gc) | 2 zero bytes
    stored object bytes, one after another (each exactly as a loose object file holds it)
    index: one 44-byte entry per object, sorted by id: id (32 raw bytes) | offset (u64 LE) | length (u32 LE)
    trailer: b"ASPX" | version (u32 LE) | index offset (u64 LE) | count (u64 LE) | BLAKE3 of the index (32 bytes)

The index sits in the same file as the data, so a pack is published by one ``rename`` of a complete, fsynced
file: there is never a pack without its index or an index without its data. Readers ``mmap`` the file and
binary-search the index; nothing is loaded up front. Every object read from a pack is re-hashed by
:func:`agentsnap_core.format.objects.decode` as a loose one is.
"""

from __future__ import annotations

import fcntl
import mmap
import os
import struct
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import blake3
import zstandard

from agentsnap_core.errors import AgentSnapError
from agentsnap_core.format import objects

MAGIC = b"ASPK"
VERSION = 1
HEAD = struct.Struct("<4sBB2x")
#: flag: gc wrote this pack and re-compressed its objects (a batch writes its pack fast, at the objects' own level)
TIGHT = 1
ENTRY = struct.Struct("<32sQI")
TRAILER = struct.Struct("<4sIQQ32s")
TRAILER_MAGIC = b"ASPX"
PREFIX, SUFFIX = "pack-", ".pack"
TMP_PREFIX = ".tmp-pack-"
#: gc packs loose objects whose stored size is below this (whole small files, and most chunks of large ones once
#: compressed); larger ones stay one file each
PACK_MAX_STORED = 64 * 1024
#: packing re-compresses an object at this zstd level when that makes it smaller (new objects use level 1: fast
#: snapshots; gc has time). Same id, same raw bytes: only the stored form changes, as in ``git repack -f``.
PACK_ZSTD_LEVEL = 7
#: a pack that a gc renamed aside to retire it (put back when a writer re-used it meanwhile)
TRASH_PREFIX = ".tmp-gc-pack-"


class PackCorrupt(AgentSnapError):
    pass


def is_pack_name(name: str) -> bool:
    return name.startswith(PREFIX) and name.endswith(SUFFIX)


class Pack:
    """A read-only, memory-mapped pack."""

    def __init__(self, path: str) -> None:
        self.path = path
        fd = os.open(path, os.O_RDONLY)
        try:
            size = os.fstat(fd).st_size
            if size < HEAD.size + TRAILER.size:
                raise PackCorrupt(f"pack {path}: truncated ({size} bytes)")
            self.mm = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
        finally:
            os.close(fd)
        magic, version, self.flags = HEAD.unpack_from(self.mm, 0)
        tmagic, tversion, self.index_at, self.count, digest = TRAILER.unpack_from(self.mm, size - TRAILER.size)
        if magic != MAGIC or tmagic != TRAILER_MAGIC:
            raise PackCorrupt(f"pack {path}: not an agentsnap pack")
        if version != VERSION or tversion != VERSION:
            raise PackCorrupt(f"pack {path}: version {version} is not {VERSION}")
        if self.index_at < HEAD.size or self.index_at + self.count * ENTRY.size != size - TRAILER.size:
            raise PackCorrupt(f"pack {path}: index bounds do not match the file size")
        self.digest = digest

    def check_index(self) -> None:
        """Index digest, order and bounds (verify)."""
        index = self.mm[self.index_at : self.index_at + self.count * ENTRY.size]
        if blake3.blake3(index).digest() != self.digest:
            raise PackCorrupt(f"pack {self.path}: the index does not match its checksum")
        prev = b""
        for raw, off, length in ENTRY.iter_unpack(index):
            if raw <= prev:
                raise PackCorrupt(f"pack {self.path}: index out of order")
            if off < HEAD.size or off + length > self.index_at:
                raise PackCorrupt(f"pack {self.path}: entry {raw.hex()[:12]} points outside the data")
            prev = raw

    def _key(self, i: int) -> bytes:
        at = self.index_at + i * ENTRY.size
        return self.mm[at : at + 32]

    def find(self, oid: str) -> tuple[int, int] | None:
        """``(offset, length)`` of an object, or None."""
        try:
            key = bytes.fromhex(oid)
        except ValueError:
            return None
        lo, hi = 0, self.count
        while lo < hi:
            mid = (lo + hi) // 2
            if self._key(mid) < key:
                lo = mid + 1
            else:
                hi = mid
        if lo < self.count and self._key(lo) == key:
            _, off, length = ENTRY.unpack_from(self.mm, self.index_at + lo * ENTRY.size)
            if off < HEAD.size or off + length > self.index_at:
                raise PackCorrupt(f"pack {self.path}: entry {oid[:12]} points outside the data")
            return off, length
        return None

    def read(self, off: int, length: int) -> bytes:
        return self.mm[off : off + length]

    def entries(self) -> Iterator[tuple[str, int, int]]:
        for i in range(self.count):
            raw, off, length = ENTRY.unpack_from(self.mm, self.index_at + i * ENTRY.size)
            yield raw.hex(), off, length

    def close(self) -> None:
        try:
            self.mm.close()
        except (BufferError, ValueError):  # a reader still holds a slice view; the map goes with it
            pass


#: at most this many packs are left beside a new one: past it, gc merges them all (files on disk stay O(1))
MAX_PACKS = 8


def _size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        return 0


def _geometric(packs: list[Pack], new_bytes: int) -> list[Pack]:
    """The packs to merge into a new one holding ``new_bytes``: smallest first, each while it is at most twice
    what is merged so far, like git's geometric repack. A large old pack is not copied again for a small flush;
    all of them are merged when more than :data:`MAX_PACKS` would be left."""
    merged, out = new_bytes, list[Pack]()
    for pk in sorted(packs, key=lambda p: p.mm.size()):
        if pk.mm.size() > 2 * merged and len(packs) - len(out) <= MAX_PACKS:
            break
        out.append(pk)
        merged += pk.mm.size()
    return out


def tighten(oid: str, stored: bytes, squeeze: zstandard.ZstdCompressor) -> bytes:
    """Verify a loose object's stored bytes; return them re-compressed harder when that is smaller.

    Encrypted objects (only the key holder can open them) are checked as far as possible and kept as they are.
    """
    if len(stored) > objects.HEADER.size and stored[:3] == objects.MAGIC and stored[5] == objects.CODEC_ENCRYPTED:
        objects.verify_stored(oid, stored)
        return stored
    kind, raw = objects.decode(oid, stored)  # raises ObjectCorrupt: a damaged object is not packed
    if len(raw) < 64:
        return stored
    payload = squeeze.compress(raw)
    if objects.HEADER.size + len(payload) >= len(stored):
        return stored
    return objects.HEADER.pack(objects.MAGIC, objects.OBJECT_FORMAT, kind, 1, len(raw)) + payload


def write_pack(directory: str, items: Iterable[tuple[str, bytes]], tmp_name: str, sync: bool = True,
               flags: int = 0) -> str | None:
    """Write ``(oid, stored bytes)`` items (ids unique) as one pack, durably; return its final path.

    The file is written under ``tmp_name`` in ``directory``, fsynced, renamed to ``pack-<id>.pack`` and the
    directory fsynced: a crash leaves either nothing visible or a complete pack. None when ``items`` is empty.
    ``sync=False`` leaves both fsyncs to the caller (a batch's barrier fsyncs the file, then the directory).
    """
    tmp = os.path.join(directory, tmp_name)
    index: list[tuple[bytes, int, int]] = []
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o444)
    try:
        with os.fdopen(fd, "wb", buffering=1 << 20, closefd=False) as f:
            f.write(HEAD.pack(MAGIC, VERSION, flags))
            at = HEAD.size
            for oid, stored in items:
                f.write(stored)
                index.append((bytes.fromhex(oid), at, len(stored)))
                at += len(stored)
            index.sort()
            body = b"".join(ENTRY.pack(*e) for e in index)
            digest = blake3.blake3(body).digest()
            f.write(body)
            f.write(TRAILER.pack(TRAILER_MAGIC, VERSION, at, len(index), digest))
        if sync:
            os.fsync(fd)
    except BaseException:
        os.close(fd)
        os.unlink(tmp)
        raise
    os.close(fd)
    if not index:
        os.unlink(tmp)
        return None
    final = os.path.join(directory, f"{PREFIX}{digest.hex()[:40]}{SUFFIX}")
    os.rename(tmp, final)
    if sync:
        fsync_dir(directory)
    return final


#: a batch's barrier merges the packs when more than this many are left (``git gc --auto``): lookups stay cheap
AUTO_PACKS = 16


def write_pack_file(packs: PackSet, items: Iterable[tuple[str, bytes]], durable: bool) -> tuple[str, bool]:
    """Write a batch's new objects as one pack of ``packs``; return ``(path, whether the pack directory was made)``.

    Held under the pack directory's lock shared (gc's repack holds it exclusive: it removes unfinished packs).
    ``durable``: the pack and its directory entry are fsynced before this returns.
    """
    made = False
    if not os.path.isdir(packs.dir):
        os.makedirs(packs.dir, exist_ok=True)
        made = True
        if durable:
            fsync_dir(os.path.dirname(packs.dir))
    lock = os.open(os.path.join(packs.dir, ".lock"), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(lock, fcntl.LOCK_SH)
        with packs._lock:
            packs._tmp += 1
            tmp = f"{TMP_PREFIX}{os.getpid()}-{threading.get_ident()}-{packs._tmp}"
        path = write_pack(packs.dir, items, tmp, sync=durable)
    finally:
        os.close(lock)
    assert path is not None
    packs.add(path)
    return path, made


def fsync_dir(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class PackSet:
    """The packs of one store: a cached list (re-listed when an id is not found) and the packing itself."""

    def __init__(self, directory: str) -> None:
        self.dir = directory
        self._lock = threading.Lock()
        self._packs: dict[str, Pack] = {}
        self._stamp: int | None = None
        self._listed_at = 0.0
        self._tmp = 0

    # ------------------------------------------------------------ reading
    def _refresh(self, force: bool = False) -> bool:
        """Re-list the pack directory when it may have changed; True when the set of packs changed."""
        try:
            st = os.stat(self.dir)
        except FileNotFoundError:
            with self._lock:
                changed, self._packs, self._stamp = bool(self._packs), {}, None
            return changed
        # an unchanged directory mtime proves nothing changed only when it is well before the last listing
        if not force and st.st_mtime_ns == self._stamp and self._listed_at - st.st_mtime > 1.0:
            return False
        now = time.time()
        names = sorted(n for n in os.listdir(self.dir) if is_pack_name(n))
        with self._lock:
            old, new = self._packs, {}
            for n in names:
                if n in old:
                    new[n] = old[n]
                    continue
                try:
                    new[n] = Pack(os.path.join(self.dir, n))
                except FileNotFoundError:
                    continue
                except (PackCorrupt, OSError, ValueError):
                    continue  # verify reports it (verify_packs); reads fall back to the other copies
            changed = list(new) != list(old)
            self._packs, self._stamp, self._listed_at = new, st.st_mtime_ns, now
        return changed

    def rescan(self) -> None:
        self._refresh(force=True)

    def add(self, path: str) -> None:
        """Know a pack this process just wrote without re-listing the directory."""
        name = os.path.basename(path)
        with self._lock:
            if name in self._packs:
                return
        pk = Pack(path)
        with self._lock:
            self._packs.setdefault(name, pk)

    def count(self) -> int:
        return len(self._packs)

    def entry_count(self) -> int:
        """Objects held in packs (an object in two packs counts twice)."""
        self._refresh(force=True)
        return sum(pk.count for pk in list(self._packs.values()))

    def maybe_consolidate(self) -> None:
        """Merge small packs when more than :data:`AUTO_PACKS` are known (the merged pack is written durably
        before the old ones go, so this is safe at any point)."""
        if len(self._packs) > AUTO_PACKS:
            self.repack({}, None, squeeze_packed=False)

    def _find(self, oid: str) -> tuple[Pack, int, int] | None:
        for pk in list(self._packs.values()):
            try:
                hit = pk.find(oid)
            except (ValueError, PackCorrupt):  # closed or damaged
                continue
            if hit is not None:
                return pk, hit[0], hit[1]
        return None

    def locate(self, oid: str) -> tuple[Pack, int, int] | None:
        """``(pack, offset, length)`` of a packed object, or None; the packs are re-listed on a miss."""
        hit = self._find(oid)
        if hit is None and self._refresh():
            hit = self._find(oid)
        return hit

    def all_oids(self) -> set[str]:
        self._refresh(force=True)
        out: set[str] = set()
        for pk in list(self._packs.values()):
            out.update(o for o, _, _ in pk.entries())
        return out

    def temp_files(self) -> list[str]:
        try:
            return [os.path.join(self.dir, n) for n in os.listdir(self.dir) if n.startswith(".tmp-")]
        except FileNotFoundError:
            return []

    def verify(self, loose: Callable[[str], bool]) -> tuple[int, list[dict[str, Any]]]:
        """Check every pack: structure, index, and each entry that a plain read would not reach (an object
        also stored loose, or in an earlier pack) decodes to its id. Returns (entries, problems)."""
        problems: list[dict[str, Any]] = []
        entries = 0
        seen: set[str] = set()
        try:
            names = sorted(n for n in os.listdir(self.dir) if is_pack_name(n))
        except FileNotFoundError:
            return 0, []
        for n in names:
            path = os.path.join(self.dir, n)
            try:
                pk = Pack(path)
                pk.check_index()
            except FileNotFoundError:
                continue
            except (PackCorrupt, OSError, ValueError) as exc:
                problems.append({"kind": "pack", "id": None, "path": path, "error": str(exc)})
                continue
            for oid, off, length in pk.entries():
                entries += 1
                if oid in seen or loose(oid):  # get() reads another copy: check this one here
                    try:
                        objects.verify_stored(oid, pk.read(off, length))
                    except AgentSnapError as exc:
                        problems.append({"kind": "object", "id": oid, "path": path, "error": str(exc)})
                seen.add(oid)
            pk.close()
        return entries, problems

    # ------------------------------------------------------------ writing
    def repack(
        self,
        add: dict[str, str],
        drop: Callable[[str], bool] | None,
        *,
        drop_before: float | None = None,
        seen_ns: int | None = None,
        consolidate: bool = True,
        squeeze_packed: bool = True,
    ) -> dict[str, int]:
        """Write one new pack and retire the old ones; never loses an object, wherever it is killed.

        ``add``: loose objects to pack (id -> loose path; removed once the pack is durable). ``drop``: ids to leave
        out, taken only from packs whose mtime (the newest re-use of anything in them) is at most ``drop_before``
        (filesystem seconds) or exactly ``seen_ns``; such a pack is renamed aside and put back if a writer
        re-used it meanwhile. ``consolidate``: also copy the other packs into the new one (one pack in the end).
        ``squeeze_packed``: re-compress the objects of packs a batch wrote (once: the new pack is marked
        :data:`TIGHT`); every such pack is rewritten (gc), else packs are copied as they are (a batch's merge).
        """
        if not os.path.isdir(self.dir):
            os.makedirs(self.dir, exist_ok=True)
            fsync_dir(os.path.dirname(self.dir))  # the pack directory's own entry is durable before a pack in it
        lock = os.open(os.path.join(self.dir, ".lock"), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)
            return self._repack(add, drop, drop_before, seen_ns, consolidate, squeeze_packed)
        finally:
            os.close(lock)

    def _recover(self) -> None:
        """Under the lock: put back packs a killed gc renamed aside; remove packs it did not finish writing."""
        for n in os.listdir(self.dir):
            path = os.path.join(self.dir, n)
            if n.startswith(TRASH_PREFIX):
                os.rename(path, os.path.join(self.dir, PREFIX + n[len(TRASH_PREFIX) :]))
            elif n.startswith(TMP_PREFIX):
                os.unlink(path)

    def _repack(
        self, add: dict[str, str], drop: Callable[[str], bool] | None, drop_before: float | None,
        seen_ns: int | None, consolidate: bool, squeeze_packed: bool = True,
    ) -> dict[str, int]:
        self._recover()
        self.rescan()
        packs = list(self._packs.values())
        mtimes: dict[str, int] = {}
        dropping: set[str] = set()
        for pk in packs:
            try:
                st = os.stat(pk.path)
            except FileNotFoundError:
                continue
            mtimes[pk.path] = st.st_mtime_ns
            old_enough = (drop_before is not None and st.st_mtime <= drop_before) or (
                drop_before is None and (seen_ns is None or st.st_mtime_ns == seen_ns))
            if drop is not None and old_enough and any(drop(o) for o, _, _ in pk.entries()):
                dropping.add(pk.path)
        rewrite = [pk for pk in packs if pk.path in dropping]
        if consolidate:
            rest = [pk for pk in packs if pk.path in mtimes and pk.path not in dropping]
            loose = [pk for pk in rest if squeeze_packed and not pk.flags & TIGHT]
            rewrite += loose + _geometric([pk for pk in rest if pk not in loose],
                                          sum(_size(p) for p in add.values()) + sum(pk.mm.size() for pk in loose))
        if not add and not dropping and len(rewrite) <= 1 and not any(
                squeeze_packed and not pk.flags & TIGHT for pk in rewrite):
            return {"packed": 0, "dropped": 0, "packs": len(packs), "written": 0}
        written: set[str] = set()
        packed_loose: list[str] = []
        squeeze = zstandard.ZstdCompressor(level=PACK_ZSTD_LEVEL)
        dropped = 0

        def items() -> Iterator[tuple[str, bytes]]:
            nonlocal dropped
            for pk in rewrite:
                for oid, off, length in pk.entries():
                    if oid in written:
                        continue
                    if pk.path in dropping and drop is not None and drop(oid):
                        dropped += 1
                        continue
                    written.add(oid)
                    stored = pk.read(off, length)
                    if squeeze_packed and not pk.flags & TIGHT:
                        try:
                            stored = tighten(oid, stored, squeeze)
                        except AgentSnapError:
                            pass  # damaged: copied as it is (verify reports it)
                    yield oid, stored
            for oid, path in sorted(add.items()):
                if oid in written:
                    packed_loose.append(path)
                    continue
                try:
                    with open(path, "rb") as f:
                        stored = tighten(oid, f.read(), squeeze)
                except (OSError, AgentSnapError):
                    continue  # gone, or damaged (verify reports it): stays as it is
                written.add(oid)
                packed_loose.append(path)
                yield oid, stored

        self._tmp += 1
        tight = squeeze_packed or all(pk.flags & TIGHT for pk in rewrite)
        new = write_pack(self.dir, items(), f"{TMP_PREFIX}{os.getpid()}-{threading.get_ident()}-{self._tmp}",
                         flags=TIGHT if tight else 0)
        for pk in rewrite:
            if pk.path == new:
                continue
            if pk.path in dropping:  # rename aside first: a writer refreshing it now finds it gone and writes again
                trash = os.path.join(self.dir, TRASH_PREFIX + os.path.basename(pk.path)[len(PREFIX) :])
                try:
                    os.rename(pk.path, trash)
                except FileNotFoundError:
                    continue
                if os.stat(trash).st_mtime_ns != mtimes[pk.path]:
                    os.rename(trash, pk.path)  # re-used since we looked: keep it whole
                    continue
                os.unlink(trash)
            else:
                try:
                    os.unlink(pk.path)  # everything in it is in the new pack
                except FileNotFoundError:
                    pass
        fsync_dir(self.dir)
        fanout: set[str] = set()
        for path in packed_loose:
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
            fanout.add(os.path.dirname(path))
        for d in fanout:  # an empty fan-out directory costs a block; a writer that finds it gone makes it again
            try:
                os.rmdir(d)
            except OSError:
                pass
        if new is not None:
            os.utime(new)  # newer than any re-use of the loose copies and old packs it replaces
        self.rescan()
        return {"packed": len(packed_loose), "dropped": dropped, "packs": len(self._packs),
                "written": int(new is not None), "merged": len(rewrite)}
