"""Storing byte strings and files as (possibly chunked) content.

A *content id* names either a single ``BLOB`` object (small content) or a ``CHUNKS`` object
listing content-defined chunks. Forks and edits share every chunk that did not change.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable, Iterator, Sequence
from typing import IO, TYPE_CHECKING, Any

import blake3

from agentsnap_core.errors import InvalidInput, ObjectCorrupt
from agentsnap_core.format import objects
from agentsnap_core.format.crypto import EncryptedObjects
from agentsnap_core.format.encoding import MAX_DECODE_BYTES, pack_value, unpack
from agentsnap_core.format.objects import Kind

if TYPE_CHECKING:
    from agentsnap_core.stores.base import ObjectStore

#: upper bound on the size of content read back into memory in one piece
MAX_CONTENT_BYTES = 4 * 1024 * 1024 * 1024


def put_bytes(store: ObjectStore | None, data: bytes | memoryview) -> str:
    """Store ``data`` (chunked when large); with ``store=None`` only compute its content id."""
    view = memoryview(data)
    if len(view) <= objects.SMALL_FILE:
        if store is None:
            return objects.digest(Kind.BLOB, view)
        return store.put(Kind.BLOB, view)
    chunks = []
    for piece in objects.cut(view):
        oid = objects.digest(Kind.BLOB, piece) if store is None else store.put(Kind.BLOB, piece)
        chunks.append((oid, len(piece)))
    listing = objects.pack_chunk_list(chunks)
    if store is None:
        return objects.digest(Kind.CHUNKS, listing)
    return store.put(Kind.CHUNKS, listing)


#: block size of file reads; a chunk is emitted only once CDC_MAX bytes after its start are in memory
READ_BLOCK = 8 * 1024 * 1024


def _put_chunk(store: ObjectStore | None, piece: bytes | memoryview) -> str:
    return objects.digest(Kind.BLOB, piece) if store is None else store.put(Kind.BLOB, piece)


def put_file(store: ObjectStore | None, path: str | os.PathLike[str]) -> tuple[str, int]:
    """Store a file's content; return ``(content id, size of the bytes stored)``.

    The file is read with ordinary reads, never mapped: a file truncated while it is read yields
    the shorter content (a mapped file would kill the process with SIGBUS), and a file appended to
    yields the bytes actually read. The size returned is always the size of what was stored, so a
    tree built from it restores. Chunk boundaries equal :func:`put_bytes`'s on the same bytes:
    FastCDC decides a boundary from at most ``CDC_MAX`` bytes after the chunk's start, so a chunk
    is cut only once that many bytes (or the end of the file) are in the buffer.
    """
    with open(path, "rb") as f:
        buf = f.read(READ_BLOCK)
        if len(buf) <= objects.SMALL_FILE:
            more = f.read(READ_BLOCK)
            if not more:
                return put_bytes(store, buf), len(buf)
            buf += more
        chunks: list[tuple[str, int]] = []
        total = 0
        eof = False
        while True:
            if not eof and len(buf) < 2 * objects.CDC_MAX:
                more = f.read(READ_BLOCK)
                eof = not more
                buf += more
                continue
            view = memoryview(buf)
            start = 0
            for piece in objects.cut(view):
                end = start + len(piece)
                if not eof and start + objects.CDC_MAX > len(view):
                    break  # this chunk's boundary may depend on bytes not read yet
                chunks.append((_put_chunk(store, piece), len(piece)))
                start = end
            rest = bytes(view[start:])
            view.release()
            total += start
            if eof:
                break
            more = f.read(READ_BLOCK)
            eof = not more
            buf = rest + more
    listing = objects.pack_chunk_list(chunks)
    oid = objects.digest(Kind.CHUNKS, listing) if store is None else store.put(Kind.CHUNKS, listing)
    return oid, total


def iter_chunks(store: ObjectStore, oid: str) -> Iterator[bytes]:
    """Yield the content's bytes piece by piece, each piece verified."""
    kind, raw = store.get(oid)
    if kind == Kind.BLOB:
        yield raw
    elif kind == Kind.CHUNKS:
        for chunk_oid, length in objects.unpack_chunk_list(oid, raw):
            ckind, craw = store.get(chunk_oid)
            if ckind != Kind.BLOB or len(craw) != length:
                raise ObjectCorrupt(chunk_oid, f"blob of {length} bytes", f"kind {ckind}, {len(craw)} bytes")
            yield craw
    else:
        raise ObjectCorrupt(oid, "content", f"object kind {kind}")


def chunk_ids(store: ObjectStore, oid: str) -> list[str]:
    """The object ids a content id depends on (itself included)."""
    kind, raw = store.get(oid)
    if kind == Kind.CHUNKS:
        return [oid] + [c for c, _ in objects.unpack_chunk_list(oid, raw)]
    return [oid]


def get_bytes(store: ObjectStore, oid: str, limit: int = MAX_CONTENT_BYTES) -> bytes:
    kind, raw = store.get(oid)
    if kind == Kind.CHUNKS:  # refuse an oversized chunk list before reading a byte of it
        declared = sum(n for _, n in objects.unpack_chunk_list(oid, raw))
        if declared > limit:
            raise ObjectCorrupt(oid, f"at most {limit} bytes", f"{declared} bytes declared", "content too large")
    out = bytearray()
    for piece in iter_chunks(store, oid):
        out += piece
        if len(out) > limit:
            raise ObjectCorrupt(oid, f"at most {limit} bytes", f"more than {limit}", "content too large")
    return bytes(out)


def write_to(store: ObjectStore, oid: str, fh: IO[bytes]) -> int:
    n = 0
    for piece in iter_chunks(store, oid):
        fh.write(piece)
        n += len(piece)
    return n


def put_value(store: ObjectStore, value: Any, what: str = "value") -> str:
    """Store a plain value (msgpack, its maps in their own order: :func:`~agentsnap_core.format.encoding.pack_value`)
    as content; return its id. A value :func:`get_value` would refuse to decode (over :data:`MAX_DECODE_BYTES`
    encoded) is refused here, before it is stored: never a snapshot that saves and then cannot be restored."""
    data = pack_value(value)
    if len(data) > MAX_DECODE_BYTES:
        raise ValueTooLarge(what, len(data))
    return put_bytes(store, data)


class ValueTooLarge(InvalidInput):
    """A layer value over the size a restore decodes (:data:`MAX_DECODE_BYTES`)."""

    def __init__(self, what: str, size: int) -> None:
        self.size = size
        super().__init__(f"the {what} is {size / 2**20:.1f} MiB encoded, over the {MAX_DECODE_BYTES >> 20} MiB one "
                         "snapshot layer may hold (a restore would refuse to read it), so nothing was saved; keep "
                         "bulky data in files the world layer captures, or in arrays/tensors an adapter stores")


def get_value(store: ObjectStore, oid: str, what: str = "value") -> Any:
    return unpack(get_bytes(store, oid, limit=256 * 1024 * 1024), what)


# --- raw objects: one uncompressed BLOB from several buffers (KV pages; see agentsnap_core.layers.kvcache) ---------

#: inputs at least this large are hashed on several threads (BLAKE3 is a tree hash: same digest, GIL released)
PARALLEL_HASH_BYTES = 16 * 1024 * 1024


def _blob_digest(kind: int, view: memoryview) -> str:
    threads = blake3.blake3.AUTO if len(view) >= PARALLEL_HASH_BYTES else 1
    h = blake3.blake3(bytes((kind,)), max_threads=threads)
    h.update(view)
    return h.hexdigest()


def byte_view(part: bytes | bytearray | memoryview) -> memoryview:
    """``part`` as a flat view of bytes (no copy; a non-contiguous buffer raises); a flat byte view is returned as
    it is (a KV restore passes thousands: no new view object each)."""
    if type(part) is memoryview and part.ndim == 1 and part.format == "B":
        return part
    view = memoryview(part)
    return view if view.format == "B" and view.ndim == 1 else view.cast("B")


def put_raw(store: ObjectStore, parts: Iterable[bytes | bytearray | memoryview], durable: bool = False) -> str:
    """Store the concatenation of ``parts`` as one ``BLOB`` object, uncompressed; return its id.

    For data zstd cannot shrink (KV pages of floats): no content-defined chunking, no compression attempt, the
    parts joined straight into the stored form (one copy) and hashed once (a store that can take bytes hashed by
    the caller, the local one, does not hash them again). The id is the one ``store.put(Kind.BLOB, joined)``
    gives, and the object reads back through every store's ``get``. A store that encrypts what it writes gets the
    bytes through its own ``put`` (never written in the clear). ``durable``: the local store fsyncs the object's
    file on this thread (several callers' fsyncs overlap); its directory is made durable by the next
    ``store.barrier()``, which the caller runs before anything names the object, as after any put. At most
    :data:`~agentsnap_core.format.objects.MAX_OBJECT_BYTES` bytes.
    """
    views = [byte_view(p) for p in parts]
    length = sum(v.nbytes for v in views)
    if length > objects.MAX_OBJECT_BYTES:
        raise ValueError(f"object of {length} bytes is over the {objects.MAX_OBJECT_BYTES} byte limit")
    stored = b"".join([objects.HEADER.pack(objects.MAGIC, objects.OBJECT_FORMAT, Kind.BLOB, 0, length), *views])
    payload = memoryview(stored)[objects.HEADER.size :]
    oid = _blob_digest(Kind.BLOB, payload)
    put_hashed = getattr(type(store), "put_hashed", None)  # on the class: a wrapper's forwarded methods are skipped
    if isinstance(store, EncryptedObjects) and store.encrypt_writes:
        store.put(Kind.BLOB, payload)
    elif put_hashed is not None:
        put_hashed(store, oid, stored, durable=durable)
    else:
        store.put_stored(oid, stored)
    return oid


def get_raw(store: ObjectStore, oid: str) -> memoryview:
    """The bytes of one ``BLOB`` object, verified against ``oid``, without the copy ``store.get`` makes.

    An uncompressed object (:func:`put_raw`'s) is hashed in place on several threads and returned as a view of
    the bytes read; any other (compressed, encrypted) goes through ``store.get``. Raises
    :class:`~agentsnap_core.errors.ObjectCorrupt` when the bytes do not hash to ``oid`` or are not a blob.
    """
    stored = store.get_stored(oid)
    size = objects.HEADER.size
    if len(stored) >= size and stored[:3] == objects.MAGIC:
        _magic, version, kind, codec, length = objects.HEADER.unpack_from(stored)
        if codec == 0 and version == objects.OBJECT_FORMAT:
            payload = memoryview(stored)[size:]
            if length > objects.MAX_OBJECT_BYTES or len(payload) != length:
                raise ObjectCorrupt(oid, oid, "?", f"length {len(payload)} != declared {length}")
            got = _blob_digest(kind, payload)
            if got != oid:
                raise ObjectCorrupt(oid, oid, got)
            if kind != Kind.BLOB:
                raise ObjectCorrupt(oid, "blob", f"object kind {kind}")
            return payload
    kind, raw = store.get(oid)
    if kind != Kind.BLOB:
        raise ObjectCorrupt(oid, "blob", f"object kind {kind}")
    return memoryview(raw)


def get_raw_into(store: ObjectStore, oid: str, buffers: Sequence[bytes | bytearray | memoryview]) -> None:
    """Read the first bytes of one ``BLOB`` object straight into ``buffers`` (writable, filled in order) and verify
    the whole object against ``oid`` where it landed.

    The local store reads an uncompressed loose object (:func:`put_raw`'s) with one scatter read into the buffers
    (and what follows them into memory), and the hash runs over the buffers: no copy besides the read itself. Any
    other object (packed, compressed, encrypted, another store) is read by :func:`get_raw` and copied. Raises
    :class:`~agentsnap_core.errors.ObjectCorrupt` when the bytes do not hash to ``oid`` or are not a blob, and
    :class:`~agentsnap_core.errors.InvalidInput` when the object is shorter than the buffers; the buffers then hold
    bytes that must not be used.
    """
    views = [byte_view(b) for b in buffers]
    want = sum(v.nbytes for v in views)
    read_into = getattr(type(store), "read_into", None)  # on the class: a wrapper's forwarded methods are skipped
    got = read_into(store, oid, objects.HEADER.size, views) if read_into is not None else None
    if got is not None:
        header, rest = got
        magic, version, kind, codec, length = objects.HEADER.unpack(header)
        if magic == objects.MAGIC and codec == 0 and version == objects.OBJECT_FORMAT and length == want + len(rest):
            h = blake3.blake3(bytes((kind,)))
            hash_views(h, views)
            h.update(rest)
            digest = h.hexdigest()
            if digest != oid:
                raise ObjectCorrupt(oid, oid, digest)
            if kind != Kind.BLOB:
                raise ObjectCorrupt(oid, "blob", f"object kind {kind}")
            return
    data = get_raw(store, oid)  # verified
    if len(data) < want:
        raise InvalidInput(f"object {oid[:12]} holds {len(data)} bytes, fewer than the {want} to read")
    scatter(memoryview(data), views)


#: views at least this large are hashed where they are; smaller ones are gathered into runs of :data:`HASH_RUN` bytes
#: first (BLAKE3's Python binding keeps the GIL while it hashes an input of 16 KiB or less: threads verifying small
#: pages, a KV head's rows, each, would otherwise hash one at a time and stall each other's reads)
HASH_IN_PLACE = 64 * 1024
HASH_RUN = 1024 * 1024
_scratch = threading.local()


def hash_views(h: Any, views: Sequence[memoryview]) -> None:
    """``h.update`` with the bytes of ``views`` in order, in updates large enough to run without the GIL."""
    run: memoryview | None = getattr(_scratch, "run", None)
    at = 0
    for v in views:
        n = v.nbytes
        if n >= HASH_IN_PLACE:  # (HASH_IN_PLACE <= HASH_RUN: a run always fits)
            if at:
                h.update(run[:at])  # type: ignore[index]
                at = 0
            h.update(v)
            continue
        if run is None:
            run = _scratch.run = memoryview(bytearray(HASH_RUN))
        if at + n > HASH_RUN:
            h.update(run[:at])
            at = 0
        run[at : at + n] = v.cast("B") if v.format != "B" else v
        at += n
    if at:
        h.update(run[:at])  # type: ignore[index]


def scatter(data: memoryview, views: Sequence[memoryview]) -> None:
    """Copy the first bytes of ``data`` into ``views``, filled in order (``data`` holds at least their total)."""
    at = 0
    for v in views:
        v[:] = data[at : at + v.nbytes]
        at += v.nbytes
