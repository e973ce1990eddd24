"""Storing byte strings and files as (possibly chunked) content.

A *content id* names either a single ``BLOB`` object (small content) or a ``CHUNKS`` object
listing content-defined chunks. Forks and edits share every chunk that did not change.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Iterator
from typing import IO, Any

from . import objects
from .encoding import pack, unpack
from .errors import ObjectCorrupt
from .objects import Kind
from .store import ObjectStore

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


def put_file(store: ObjectStore | None, path: str | os.PathLike[str], size: int | None = None) -> str:
    """Store a file's content; reads small files whole and maps large ones."""
    with open(path, "rb") as f:
        if size is None:
            size = os.fstat(f.fileno()).st_size
        if size <= objects.SMALL_FILE:
            return put_bytes(store, f.read())
        try:
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
                view = memoryview(m)
                try:
                    return put_bytes(store, view)
                finally:
                    view.release()
        except ValueError:  # empty or unmappable: fall back to a read
            return put_bytes(store, f.read())


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


def put_value(store: ObjectStore, value: Any) -> str:
    """Store a plain value (msgpack, canonical) as content; return its id."""
    return put_bytes(store, pack(value))


def get_value(store: ObjectStore, oid: str, what: str = "value") -> Any:
    return unpack(get_bytes(store, oid, limit=256 * 1024 * 1024), what)
