"""How the checkpoint index keeps serialized values: zstd-compressed when that pays.

The index rows carry a checkpoint's serialized form, its metadata and the tasks' pending writes as
``(type, bytes)`` pairs from LangGraph's serializer. SQLite stores them as they are (and PostgreSQL's
TOAST compresses only rows over 2 KB, with pglz), so a large, repetitive value written by a task (a
document, a catalogue) took its whole size in ``lg_writes`` once per step that wrote it. A pair whose
bytes compress to less than :data:`KEEP_RATIO` of their size is kept as ``("zstd+" + type, zstd frame)``;
reading undoes it. A type the serializer itself starts with ``zstd+`` is always wrapped, so reading is never
ambiguous. Index schema 4 introduced this: an older agentsnap-langgraph refuses such an index instead of
handing compressed bytes to the serializer.
"""

from __future__ import annotations

import threading

import zstandard

PREFIX = "zstd+"
#: pairs smaller than this are kept as they are (the frame's own bytes would eat the gain)
MIN_BYTES = 256
#: a compressed form is kept when it is at most this share of the original
KEEP_RATIO = 0.9
LEVEL = 3

_local = threading.local()


def _compressor(level: int = LEVEL) -> zstandard.ZstdCompressor:
    """This thread's compressor at ``level`` (zstandard's (de)compressor objects are not thread-safe)."""
    made = getattr(_local, "compressors", None)
    if made is None:
        made = _local.compressors = {}
    c = made.get(level)
    if c is None:
        c = made[level] = zstandard.ZstdCompressor(level=level)
    return c


def _decompressor() -> zstandard.ZstdDecompressor:
    d = getattr(_local, "decompressor", None)
    if d is None:
        d = _local.decompressor = zstandard.ZstdDecompressor()
    return d


def shrink(typ: str, data: bytes) -> tuple[str, bytes]:
    """The ``(type, bytes)`` to store for a serialized pair."""
    forced = typ.startswith(PREFIX)
    if len(data) < MIN_BYTES and not forced:
        return typ, data
    packed = _compressor().compress(data)
    if forced or len(packed) <= KEEP_RATIO * len(data):
        return PREFIX + typ, packed
    return typ, data


def expand(typ: str, data: bytes) -> tuple[str, bytes]:
    """The serialized pair a stored ``(type, bytes)`` holds."""
    if not typ.startswith(PREFIX):
        return typ, bytes(data)
    return typ[len(PREFIX) :], _decompressor().decompress(bytes(data))


def squeeze(data: bytes) -> bytes:
    """A channel value as it waits in the index for the flush: compressed (fast) when that is smaller.

    Which form a row holds needs no marker: the value's object id is the hash of its plain bytes, so a row
    whose bytes hash to its id is plain (a row written before schema 4 always is) and any other is a frame.
    """
    if len(data) < MIN_BYTES:
        return data
    packed = _compressor(1).compress(data)  # (fast: the flush takes it soon)
    return packed if len(packed) < len(data) else data


def unsqueeze(oid: str, data: bytes) -> bytes:
    """The plain value a ``lg_pending_blobs`` row holds for ``oid``; :class:`ObjectCorrupt` if neither form is it."""
    from agentsnap_core.errors import ObjectCorrupt
    from agentsnap_core.format import content

    data = bytes(data)
    if content.put_bytes(None, data) == oid:
        return data
    try:
        plain = _decompressor().decompress(data)
    except zstandard.ZstdError as exc:
        raise ObjectCorrupt(oid, oid, "?", f"a value waiting in the LangGraph index is damaged: {exc}") from None
    if content.put_bytes(None, plain) != oid:
        raise ObjectCorrupt(oid, oid, content.put_bytes(None, plain), "a value waiting in the LangGraph index")
    return plain
