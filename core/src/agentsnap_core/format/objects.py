"""Objects: the unit of content addressing.

An object is ``(kind, raw bytes)``. Its id is the BLAKE3 digest of ``kind byte + raw``
(64 hex characters), so equal content is stored once and a blob can never pass for a
manifest. On disk (and on the wire) an object is::

    b"ASO" | format version (1 byte) | kind (1 byte) | codec (1 byte) | raw length (u64 LE) | payload

``codec`` is 0 (stored), 1 (zstd) or 2 (encrypted, see :mod:`agentsnap_core.format.crypto`). Decoding is bounded:
the declared raw length may not exceed :data:`MAX_OBJECT_BYTES` and decompression stops there, and every decode re-hashes
the result and compares it with the id it was asked for.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Callable, Iterable
from enum import IntEnum
from typing import Any

import blake3
import zstandard

from agentsnap_core.errors import EncryptedObject, ObjectCorrupt, UnsupportedFormat
from agentsnap_core.format.encoding import pack, unpack

OBJECT_FORMAT = 1
MAGIC = b"ASO"
HEADER = struct.Struct("<3sBBBQ")
MAX_OBJECT_BYTES = 32 * 1024 * 1024
#: content-defined chunking: files above SMALL_FILE bytes are cut into chunks of ~48 KiB (CDC_AVG)
SMALL_FILE = 64 * 1024
CDC_AVG, CDC_MIN, CDC_MAX = 48 * 1024, 16 * 1024, 256 * 1024
ZSTD_LEVEL = 1
#: codec 2: AES-256-GCM envelope written by :mod:`agentsnap_core.format.crypto` (the header stays in the clear)
CODEC_ENCRYPTED = 2
#: set by :mod:`agentsnap_core.format.crypto` when this process holds the encryption key: ``(oid, stored) -> (kind, raw)``
encrypted_opener: Callable[[str, bytes], tuple[int, bytes]] | None = None


class Kind(IntEnum):
    BLOB = 1  #: raw bytes
    CHUNKS = 2  #: msgpack list of [chunk oid, length]: a large blob cut into chunks
    MANIFEST = 3  #: msgpack snapshot manifest


def digest(kind: int, raw: bytes | memoryview) -> str:
    h = blake3.blake3(bytes((kind,)))
    h.update(raw)
    return h.hexdigest()


_compressor = zstandard.ZstdCompressor(level=ZSTD_LEVEL)
_tls_compressors: dict[int, zstandard.ZstdCompressor] = {}


def _compress(raw: bytes | memoryview) -> bytes:
    import threading

    ident = threading.get_ident()
    comp = _tls_compressors.get(ident)
    if comp is None:
        comp = _tls_compressors[ident] = zstandard.ZstdCompressor(level=ZSTD_LEVEL)
    return comp.compress(raw)


def encode(kind: int, raw: bytes | memoryview, compress: bool = True, oid: str | None = None) -> tuple[str, bytes]:
    """Return ``(oid, stored bytes)`` for an object; ``compress=False``: uncompressed (codec 0), for an object
    that goes into a pack's block, which is compressed as a whole. ``oid``: :func:`digest` of these very bytes,
    when the caller has just computed it (not computed again)."""
    if len(raw) > MAX_OBJECT_BYTES:
        raise ValueError(f"object of {len(raw)} bytes is over the {MAX_OBJECT_BYTES} byte limit")
    if oid is None:
        oid = digest(kind, raw)
    codec, payload = _payload(raw) if compress else (0, raw)
    return oid, HEADER.pack(MAGIC, OBJECT_FORMAT, kind, codec, len(raw)) + bytes(payload)


def _payload(raw: bytes | memoryview) -> tuple[int, bytes | memoryview]:
    """``(codec, payload)`` of an object's raw bytes: compressed (codec 1) when that saves 5%, else as they are."""
    if len(raw) >= 64:
        packed = _compress(raw)
        if len(packed) < len(raw) * 0.95:
            return 1, packed
    return 0, raw


def compact(stored: bytes) -> bytes:
    """Stored bytes to send elsewhere: an uncompressed object (as a pack's block hands it out) compressed as
    :func:`encode` would (same id, same raw bytes); anything else as it is. Unverified: the receiver verifies."""
    if len(stored) < HEADER.size + 64 or stored[:3] != MAGIC:
        return stored
    _magic, version, kind, codec, length = HEADER.unpack_from(stored)
    if codec != 0 or version != OBJECT_FORMAT or len(stored) != HEADER.size + length:
        return stored
    codec, payload = _payload(memoryview(stored)[HEADER.size :])
    return stored if codec == 0 else HEADER.pack(MAGIC, OBJECT_FORMAT, kind, codec, length) + bytes(payload)


def decode(oid: str, stored: bytes) -> tuple[int, bytes]:
    """Parse and verify stored bytes; raise :class:`ObjectCorrupt` if they do not hash to ``oid``."""
    if len(stored) < HEADER.size:
        raise ObjectCorrupt(oid, oid, "?", "truncated header")
    magic, version, kind, codec, length = HEADER.unpack_from(stored)
    if magic != MAGIC:
        raise ObjectCorrupt(oid, oid, "?", "not an agentsnap object")
    if version != OBJECT_FORMAT:
        raise UnsupportedFormat(f"object {oid[:12]}", version, OBJECT_FORMAT)
    if length > MAX_OBJECT_BYTES:
        raise ObjectCorrupt(oid, oid, "?", f"declared size {length} is over the limit")
    payload = memoryview(stored)[HEADER.size :]
    if codec == 0:
        raw = bytes(payload)
    elif codec == 1:
        try:
            raw = decompress_bounded(payload, length)
        except zstandard.ZstdError as exc:
            raise ObjectCorrupt(oid, oid, "?", f"bad compressed data ({exc})") from None
    elif codec == CODEC_ENCRYPTED:
        if encrypted_opener is None:
            raise EncryptedObject(oid)
        return encrypted_opener(oid, stored)
    else:
        raise ObjectCorrupt(oid, oid, "?", f"unknown codec {codec}")
    if len(raw) != length:
        raise ObjectCorrupt(oid, oid, "?", f"length {len(raw)} != declared {length}")
    got = digest(kind, raw)
    if got != oid:
        raise ObjectCorrupt(oid, oid, got)
    return kind, raw


def decompress_bounded(payload: bytes | memoryview, length: int) -> bytes:
    """Decompress at most ``length`` bytes (plus one, to see an overrun) whatever the frame header declares
    (an object's payload, or a pack's block).

    ``ZstdDecompressor.decompress`` allocates the frame's declared content size up front (a forged
    frame declaring 1 TiB is a MemoryError); a streaming reader only ever holds what it produced.
    """
    declared = zstandard.frame_content_size(payload)
    if declared > length:  # -1 means "not declared"
        raise zstandard.ZstdError(f"frame declares {declared} bytes, the object header {length}")
    with zstandard.ZstdDecompressor().stream_reader(payload, read_across_frames=True) as reader:
        return reader.read(length + 1)


def is_sealed(stored: bytes | memoryview) -> bool:
    """Whether stored bytes are an encrypted object (:mod:`agentsnap_core.format.crypto`); the header says it."""
    return len(stored) >= HEADER.size and stored[:3] == MAGIC and stored[5] == CODEC_ENCRYPTED


def verify_stored(oid: str, stored: bytes) -> None:
    """Check stored bytes before accepting them from a peer: fully for plain objects; for encrypted
    ones (which only the key holder can open) the header and size bounds (see :mod:`agentsnap_core.format.crypto`)."""
    if is_sealed(stored):
        _, version, _kind, _codec, length = HEADER.unpack_from(stored)
        if version != OBJECT_FORMAT:
            raise UnsupportedFormat(f"object {oid[:12]}", version, OBJECT_FORMAT)
        if length > MAX_OBJECT_BYTES or len(stored) > MAX_OBJECT_BYTES + HEADER.size + 1024 or not is_oid(oid):
            raise ObjectCorrupt(oid, oid, "?", "encrypted object over the size limit")
        return
    decode(oid, stored)


_chunker: Any = None  # pyfastcdc's FastCDC, made on the first large file (a snapshot of small files never loads it)


def _cdc() -> Any:
    global _chunker
    if _chunker is None:
        import pyfastcdc

        _chunker = pyfastcdc.FastCDC(CDC_AVG, min_size=CDC_MIN, max_size=CDC_MAX)
    return _chunker


def cut(data: bytes | memoryview) -> list[memoryview]:
    """Cut ``data`` into content-defined chunks (FastCDC 2020)."""
    view = memoryview(data)
    if len(view) <= SMALL_FILE:
        return [view]
    return [view[c.offset : c.offset + c.length] for c in _cdc().cut_buf(view)]


def pack_chunk_list(chunks: list[tuple[str, int]]) -> bytes:
    return pack({"v": 1, "chunks": [[o, n] for o, n in chunks]})


def unpack_chunk_list(oid: str, raw: bytes) -> list[tuple[str, int]]:
    doc: Any = unpack(raw, f"chunk list {oid[:12]}")
    if not isinstance(doc, dict) or doc.get("v") != 1 or not isinstance(doc.get("chunks"), list):
        raise ObjectCorrupt(oid, oid, "?", "malformed chunk list")
    out = []
    for item in doc["chunks"]:
        if (
            not isinstance(item, list)
            or len(item) != 2
            or not is_oid(item[0])
            or not isinstance(item[1], int)
            or item[1] < 0
        ):
            raise ObjectCorrupt(oid, oid, "?", "malformed chunk list entry")
        out.append((item[0], item[1]))
    return out


_HEX = frozenset("0123456789abcdef")


def is_oid(value: object) -> bool:
    return isinstance(value, str) and len(value) == 64 and set(value) <= _HEX


def own_token(kind: str, parts: Iterable[bytes]) -> str:
    """``kind:<SHA-256 of parts, in order>``: the token a capture made here notes in its store's own list
    (``Repo.remember_own``) for what it must recognise as its own later - a setting's value
    (:mod:`agentsnap_core.layers.reach`, ``reach``), an adapter's captured state (``lgstate``, ``autogen``). One
    convention for all, so no two kinds can collide; never pushed."""
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part)
    return f"{kind}:{digest.hexdigest()}"
