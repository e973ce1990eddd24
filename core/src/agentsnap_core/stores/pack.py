"""Pack files: many small objects in one file, like git's packfiles (see docs/FORMAT.md, "Packs").

A pack is one file ``objects/pack/pack-<id>.pack``::

    b"ASPK" | version (u8) | flags (u8; bit 0: every object re-compressed by gc) | 2 zero bytes
    data: frames, one after another
    index: one entry per object, sorted by id
    trailer: b"ASPX" | version (u32 LE) | index offset (u64 LE) | count (u64 LE) | BLAKE3 of the index (32 bytes)

Version 1 (still read): each frame is one object's stored bytes (exactly as a loose object file holds them) and
an entry is id (32 raw bytes) | offset (u64 LE) | length (u32 LE). Version 2 (written since): an object whose raw
size is at most :data:`SOLID_MAX` is stored *solid*: objects are laid one after another in their uncompressed
stored form (codec 0) and compressed together, as one zstd frame per block of about :data:`BLOCK_BYTES`; an entry
is id | frame offset (u64) | frame length (u32) | offset in the block (u32) | length in the block (u32), or
``PLAIN`` as the offset in the block for a frame that is one object's stored bytes (large and encrypted objects).
Compressing small objects together is what makes them small: a checkpoint's state document, a manifest, a message
list one message longer than the version before, a source file beside its siblings share most of their bytes,
which one object compressed alone cannot use (git gets the same from deltas inside its packs).

The index sits in the same file as the data, so a pack is published by one ``rename`` of a complete, fsynced
file: there is never a pack without its index or an index without its data. Readers ``mmap`` the file and
binary-search the index; nothing is loaded up front; a block is decompressed (bounded) when an object in it is
read, and the last few are kept. Every object read from a pack is re-hashed by
:func:`agentsnap_core.format.objects.decode` as a loose one is.
"""

from __future__ import annotations

import fcntl
import mmap
import os
import struct
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

import blake3
import zstandard

from agentsnap_core.errors import AgentSnapError
from agentsnap_core.format import objects

if TYPE_CHECKING:  # concurrent.futures (and its logging) costs every command's start ~8 ms: imported when used
    from concurrent.futures import Future, ThreadPoolExecutor

MAGIC = b"ASPK"
#: the version written; version 1 packs (one frame per object) are still read
VERSION = 2
VERSIONS = (1, 2)
HEAD = struct.Struct("<4sBB2x")
#: flag: gc wrote this pack and re-compressed its objects (a batch writes its pack fast, at zstd level 1)
TIGHT = 1
ENTRY_V1 = struct.Struct("<32sQI")
ENTRY = struct.Struct("<32sQIII")
#: "offset in the block" of an entry whose frame is one object's stored bytes
PLAIN = 0xFFFFFFFF
#: objects of at most this many raw bytes are compressed together with their neighbours in the pack
SOLID_MAX = 64 * 1024
#: a block is closed once it holds this many bytes; it never decompresses to more than ``BLOCK_MAX``
BLOCK_BYTES = 256 * 1024
BLOCK_MAX = BLOCK_BYTES + SOLID_MAX + objects.HEADER.size
#: zstd level of the blocks a batch writes (gc writes at ``PACK_ZSTD_LEVEL``)
BATCH_ZSTD_LEVEL = 1
#: decompressed blocks each open pack keeps (reads of neighbouring objects mostly hit the same block)
BLOCK_CACHE = 4
#: where an object lies in a pack: (frame offset, frame length, offset in the block or PLAIN, length in the block)
Loc = tuple[int, int, int, int]
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
        if version not in VERSIONS or tversion != version:
            raise PackCorrupt(f"pack {path}: version {version} is not one of {VERSIONS}")
        self.version = version
        self.entry = ENTRY_V1 if version == 1 else ENTRY
        if self.index_at < HEAD.size or self.index_at + self.count * self.entry.size != size - TRAILER.size:
            raise PackCorrupt(f"pack {path}: index bounds do not match the file size")
        self.digest = digest
        self._blocks: dict[int, bytes] = {}
        self._blocks_lock = threading.Lock()
        self._totals: dict[int, int] | None = None

    def _loc(self, i: int) -> Loc:
        """Entry ``i``'s location, bounds-checked against the data."""
        at = self.index_at + i * self.entry.size
        if self.version == 1:
            _, off, length = ENTRY_V1.unpack_from(self.mm, at)
            inner, size = PLAIN, 0
        else:
            _, off, length, inner, size = ENTRY.unpack_from(self.mm, at)
        if off < HEAD.size or off + length > self.index_at or (inner != PLAIN and inner + size > BLOCK_MAX):
            raise PackCorrupt(f"pack {self.path}: entry {self._key(i).hex()[:12]} points outside the data")
        return off, length, inner, size

    def check_index(self) -> None:
        """Index digest, order and bounds (verify)."""
        index = self.mm[self.index_at : self.index_at + self.count * self.entry.size]
        if blake3.blake3(index).digest() != self.digest:
            raise PackCorrupt(f"pack {self.path}: the index does not match its checksum")
        prev = b""
        for i in range(self.count):
            raw = self._key(i)
            if raw <= prev:
                raise PackCorrupt(f"pack {self.path}: index out of order")
            self._loc(i)
            prev = raw

    def _key(self, i: int) -> bytes:
        at = self.index_at + i * self.entry.size
        return self.mm[at : at + 32]

    def find(self, oid: str) -> Loc | None:
        """Where an object lies, or None."""
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
            return self._loc(lo)
        return None

    def read(self, loc: Loc) -> bytes:
        """An object's stored bytes (a solid object's in their uncompressed form, codec 0); unverified."""
        off, length, inner, size = loc
        if inner == PLAIN:
            return self.mm[off : off + length]
        block = self._block(off, length)
        if inner + size > len(block):
            raise PackCorrupt(f"pack {self.path}: an entry points past the end of its block at {off}")
        return block[inner : inner + size]

    def _block(self, off: int, length: int) -> bytes:
        with self._blocks_lock:
            block = self._blocks.get(off)
        if block is not None:
            return block
        try:
            block = objects.decompress_bounded(self.mm[off : off + length], BLOCK_MAX)
        except zstandard.ZstdError as exc:
            raise PackCorrupt(f"pack {self.path}: the block at {off} is damaged ({exc})") from None
        if len(block) > BLOCK_MAX:
            raise PackCorrupt(f"pack {self.path}: the block at {off} holds more than {BLOCK_MAX} bytes")
        with self._blocks_lock:
            while len(self._blocks) >= BLOCK_CACHE:
                self._blocks.pop(next(iter(self._blocks)))
            self._blocks[off] = block
        return block

    def share(self, loc: Loc) -> int:
        """The bytes of the pack an object accounts for: its frame, or its part of its block's frame (in
        proportion to its uncompressed size; the block's total is read off the index once)."""
        off, length, inner, size = loc
        if inner == PLAIN:
            return length
        totals = self._totals
        if totals is None:
            totals = {}
            for i in range(self.count):
                b_off, _b_len, b_inner, b_size = self._loc(i)
                if b_inner != PLAIN:
                    totals[b_off] = totals.get(b_off, 0) + b_size
            self._totals = totals
        return max(1, length * size // max(1, totals.get(off, size)))

    def entries(self) -> Iterator[tuple[str, Loc]]:
        """Every object's id and location, in data order (a block's objects together)."""
        out = [(self._key(i).hex(), self._loc(i)) for i in range(self.count)]
        out.sort(key=lambda e: (e[1][0], e[1][2]))
        return iter(out)

    def close(self) -> None:
        try:
            self.mm.close()
        except (BufferError, ValueError):  # a reader still holds a slice view; the map goes with it
            pass
        self._blocks = {}


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
    """Verify an object's stored bytes for gc's pack; return the form to pack: a small object uncompressed (its
    block is compressed at gc's level), a larger one re-compressed harder when that is smaller.

    Encrypted objects (only the key holder can open them) are checked as far as possible and kept as they are.
    """
    if objects.is_sealed(stored):
        objects.verify_stored(oid, stored)
        return stored
    kind, raw = objects.decode(oid, stored)  # raises ObjectCorrupt: a damaged object is not packed
    if len(raw) <= SOLID_MAX:
        return objects.HEADER.pack(objects.MAGIC, objects.OBJECT_FORMAT, kind, 0, len(raw)) + raw
    payload = squeeze.compress(raw)
    if objects.HEADER.size + len(payload) >= len(stored):
        return stored
    return objects.HEADER.pack(objects.MAGIC, objects.OBJECT_FORMAT, kind, 1, len(raw)) + payload


def _solid_form(stored: bytes) -> bytes | None:
    """The uncompressed stored form of an object small enough to go into a block, else None (it gets a frame of
    its own: large, encrypted, or not readable here, which reading it reports as for a loose object)."""
    if len(stored) < objects.HEADER.size or stored[:3] != objects.MAGIC:
        return None
    _magic, version, kind, codec, length = objects.HEADER.unpack_from(stored)
    if version != objects.OBJECT_FORMAT or length > SOLID_MAX:
        return None
    if codec == 0:
        return stored if len(stored) == objects.HEADER.size + length else None
    if codec != 1:
        return None
    try:
        raw = objects.decompress_bounded(memoryview(stored)[objects.HEADER.size :], length)
    except zstandard.ZstdError:
        return None
    if len(raw) != length:
        return None
    return objects.HEADER.pack(objects.MAGIC, objects.OBJECT_FORMAT, kind, 0, length) + raw


class Frame:
    """A block of another pack copied as it is (every object in it goes into the new pack): ``(oid, offset in
    the block, length)`` of each, as that pack's index has them."""

    __slots__ = ("data", "members")

    def __init__(self, data: bytes, members: list[tuple[str, int, int]]) -> None:
        self.data, self.members = data, members


def write_pack(directory: str, items: Iterable[tuple[str, bytes] | Frame], tmp_name: str, sync: bool = True,
               flags: int = 0, level: int = BATCH_ZSTD_LEVEL) -> str | None:
    """Write ``(oid, stored bytes)`` items (ids unique) as one pack, durably; return its final path.

    Small objects are compressed together, in item order, in blocks (zstd ``level``); the others are written
    as they are, and a :class:`Frame` (a whole block of another pack) is copied without recompressing it. The
    file is written under ``tmp_name`` in ``directory``, fsynced, renamed to ``pack-<id>.pack`` and the directory
    fsynced: a crash leaves either nothing visible or a complete pack. None when ``items`` is empty.
    ``sync=False`` leaves both fsyncs to the caller (a batch's barrier fsyncs the file, then the directory).
    """
    tmp = os.path.join(directory, tmp_name)
    index: list[tuple[bytes, int, int, int, int]] = []
    block: list[bytes] = []
    members: list[tuple[bytes, int, int]] = []
    # blocks are compressed on worker threads (zstd releases the GIL) and written in order; a pack of one block
    # (a PFSaver flush) never starts one
    local = threading.local()
    workers = max(1, min(4, os.cpu_count() or 1))
    pool: ThreadPoolExecutor | None = None
    queued: deque[tuple[Future[bytes], list[tuple[bytes, int, int]]]] = deque()

    def compress(data: bytes) -> bytes:
        comp = getattr(local, "comp", None)
        if comp is None:
            comp = local.comp = zstandard.ZstdCompressor(level=level)
        return comp.compress(data)

    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o444)
    try:
        with os.fdopen(fd, "wb", buffering=1 << 20, closefd=False) as f:
            f.write(HEAD.pack(MAGIC, VERSION, flags))
            at = HEAD.size
            filled = 0

            def write_frame(frame: bytes, of: list[tuple[bytes, int, int]]) -> None:
                nonlocal at
                f.write(frame)
                index.extend((key, at, len(frame), inner, size) for key, inner, size in of)
                at += len(frame)

            def close_block(last: bool = False) -> None:
                nonlocal filled, pool
                data, of = b"".join(block), list(members)
                block.clear()
                members.clear()
                filled = 0
                if pool is None and last:
                    if of:
                        write_frame(compress(data), of)
                    return
                if pool is None:
                    from concurrent.futures import ThreadPoolExecutor

                    pool = ThreadPoolExecutor(workers, thread_name_prefix="agentsnap-pack")
                if of:
                    queued.append((pool.submit(compress, data), of))
                while queued and (len(queued) > 2 * workers or last or queued[0][0].done()):
                    done, done_of = queued.popleft()
                    write_frame(done.result(), done_of)

            for item in items:
                if isinstance(item, Frame):
                    write_frame(item.data, [(bytes.fromhex(o), inner, size) for o, inner, size in item.members])
                    continue
                oid, stored = item
                key = bytes.fromhex(oid)
                solid = _solid_form(stored)
                if solid is None:
                    f.write(stored)
                    index.append((key, at, len(stored), PLAIN, 0))
                    at += len(stored)
                    continue
                block.append(solid)
                members.append((key, filled, len(solid)))
                filled += len(solid)
                if filled >= BLOCK_BYTES:
                    close_block()
            if block or queued:
                close_block(last=True)
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
    finally:
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
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
    packs._before_write()
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
        #: called once before the first pack this process writes here (the store marks its format version)
        self.before_write: Callable[[], None] | None = None

    def _before_write(self) -> None:
        if self.before_write is not None:
            self.before_write()
            self.before_write = None

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

    def _find(self, oid: str) -> tuple[Pack, Loc] | None:
        for pk in list(self._packs.values()):
            try:
                hit = pk.find(oid)
            except (ValueError, PackCorrupt):  # closed or damaged
                continue
            if hit is not None:
                return pk, hit
        return None

    def locate(self, oid: str) -> tuple[Pack, Loc] | None:
        """``(pack, location)`` of a packed object, or None; the packs are re-listed on a miss."""
        hit = self._find(oid)
        if hit is None and self._refresh():
            hit = self._find(oid)
        return hit

    def oids_in_order(self) -> Iterator[str]:
        """The packed ids pack by pack, each pack's in data order (a block's objects together; an id in two packs
        comes twice): reading objects in this order decompresses each block once."""
        self._refresh(force=True)
        for pk in list(self._packs.values()):
            try:
                listed = list(pk.entries())
            except (ValueError, PackCorrupt):  # closed by a concurrent gc, or damaged (verify reports it)
                continue
            for oid, _loc in listed:
                yield oid

    def all_oids(self) -> set[str]:
        self._refresh(force=True)
        out: set[str] = set()
        for pk in list(self._packs.values()):
            out.update(o for o, _ in pk.entries())
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
            for oid, loc in pk.entries():
                entries += 1
                if oid in seen or loose(oid):  # get() reads another copy: check this one here
                    try:
                        objects.verify_stored(oid, pk.read(loc))
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
            if drop is not None and old_enough and any(drop(o) for o, _ in pk.entries()):
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
        self._before_write()
        written: set[str] = set()
        packed_loose: list[str] = []
        squeeze = zstandard.ZstdCompressor(level=PACK_ZSTD_LEVEL)
        dropped = 0

        def items() -> Iterator[tuple[str, bytes] | Frame]:
            nonlocal dropped
            for pk in rewrite:
                copy_blocks = not (squeeze_packed and not pk.flags & TIGHT)
                listed = list(pk.entries())
                at = 0
                while at < len(listed):
                    oid, loc = listed[at]
                    # a block copied whole when every object in it goes along: tried at its first object only (from
                    # a later one, a tail of live objects would copy the whole frame, dropped objects' bytes too)
                    if copy_blocks and loc[2] != PLAIN and (at == 0 or listed[at - 1][1][0] != loc[0]):
                        end = at
                        while end < len(listed) and listed[end][1][0] == loc[0]:
                            end += 1
                        group = listed[at:end]
                        if not any(o in written or (pk.path in dropping and drop is not None and drop(o))
                                   for o, _ in group):
                            written.update(o for o, _ in group)
                            yield Frame(pk.mm[loc[0] : loc[0] + loc[1]], [(o, lc[2], lc[3]) for o, lc in group])
                            at = end
                            continue
                    at += 1
                    if oid in written:
                        continue
                    if pk.path in dropping and drop is not None and drop(oid):
                        dropped += 1
                        continue
                    try:
                        stored = pk.read(loc)
                    except PackCorrupt as exc:  # the old pack must stay: nothing of it can be copied, nor dropped
                        raise PackCorrupt(f"{exc}; nothing was repacked: run 'agentsnap verify'") from None
                    written.add(oid)
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
                         flags=TIGHT if tight else 0, level=PACK_ZSTD_LEVEL if tight else BATCH_ZSTD_LEVEL)
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
