"""The ``cache`` layer: inference-engine KV pages, framework-free.

A KV cache is stored as *pages* of ``page_size`` token slots. Each page is keyed by a chained
prefix hash (parent page hash + the page's tokens + extra keys such as the model fingerprint, a
LoRA id or a salt), so two forks of one conversation share every prefix page and differ only in
their tail.

Page bytes are stored raw (KV floats do not compress enough to pay for zstd) in *segments*: one uncompressed
``BLOB`` object (:func:`agentsnap_core.format.content.put_raw`) holding the pages of an aligned group of
``segment_pages`` page slots (about :data:`SEGMENT_BYTES`), written and hashed on worker threads while the next
group is gathered (at most a few groups in memory). A page is named by ``(segment, offset)``. Groups are aligned to
page numbers, so two captures of the same prefix make the same segments (stored once); a capture told its
``previous`` record points its unchanged full pages at the old segments and writes only the rest (the tail).
A restore reads segments ahead on worker threads, verifies each against its id (BLAKE3, in place, several
threads) and hands out page views without copying.

The record an adapter returns from ``agentsnap_capture_cache`` is plain data::

    {"format": "agentsnap-kv", "v": 2, "fingerprint": {...}, "page_size": 16,
     "tokens": [...], "extra": [...], "meta": {...}, "segment_pages": 64,
     "pages": [{"hash": ..., "start": 0, "n": 16, "segment": <object id>, "offset": 0, "nbytes": ...}, ...],
     "refs": [<object id>, ...]}

Records of version 1 (one chunked, compressed content id per page: ``"content"`` instead of ``"segment"`` and
``"offset"``) are still read, and their pages reused by a later capture; a page larger than a segment can hold is
stored that way too. ``refs`` lists every object the pages live in, so ``verify`` and ``gc`` see the pages. The byte layout
inside a page is the adapter's business and is named by the fingerprint's ``layout`` field
(CPU and CUDA layouts differ); restore refuses a record whose fingerprint does not match the
engine it is loaded into (:class:`CacheMismatch`).
"""

from __future__ import annotations

import os
import threading
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import blake3

from agentsnap_core.errors import AgentSnapError, InvalidInput, UnsupportedFormat
from agentsnap_core.format import content
from agentsnap_core.format.encoding import pack, pack_plain
from agentsnap_core.format.objects import MAX_OBJECT_BYTES, is_oid
from agentsnap_core.stores.base import ObjectStore

if TYPE_CHECKING:  # concurrent.futures (and its logging) load with the first worker: adapters import this module
    from concurrent.futures import Future, ThreadPoolExecutor  # in every process, most never store a KV cache

FORMAT = "agentsnap-kv"
VERSION = 2
#: record versions this module reads (1: one content id per page)
READABLE_VERSIONS = (1, 2)
#: the fields every fingerprint has; adapters may add more (all are compared)
FINGERPRINT_FIELDS = ("model", "weights", "dtype", "tokenizer", "engine", "layout")

#: ``page_bytes(start, end)``: the page's bytes, as one buffer or a sequence of buffers (joined in order)
PageBytes = Callable[[int, int], "bytes | memoryview | Sequence[bytes | memoryview]"]
#: target size of a segment (one object holding a group of pages); a group is at least one page
SEGMENT_BYTES = 4 * 1024 * 1024
#: a page larger than this is stored on its own as chunked content (version-1 page entry)
MAX_SEGMENT_BYTES = MAX_OBJECT_BYTES
#: segments stored (or read ahead) at once besides the one being gathered (or consumed)
IN_FLIGHT = 3


class CacheMismatch(AgentSnapError):
    """A KV cache record was made by a different model, dtype, tokenizer, engine or layout.

    The caller can act: load the matching model, or drop the cache and re-prefill the tokens.
    """

    def __init__(self, differences: dict[str, tuple[Any, Any]]) -> None:
        self.differences = differences
        shown = "; ".join(f"{k}: snapshot has {a!r}, engine has {b!r}" for k, (a, b) in sorted(differences.items()))
        super().__init__(
            f"KV cache fingerprint does not match this engine ({shown}); load the same model/engine "
            "or restore without the cache layer and re-prefill the tokens"
        )


def fingerprint(
    *, model: str, weights: str, dtype: str, tokenizer: str, engine: str, layout: str, **extra: str
) -> dict[str, str]:
    """A cache fingerprint: what must be equal for KV pages to be valid in another engine."""
    fp = {"model": model, "weights": weights, "dtype": dtype, "tokenizer": tokenizer, "engine": engine, "layout": layout}
    fp.update(extra)
    for k, v in fp.items():
        if not isinstance(v, str):
            raise InvalidInput(f"fingerprint field {k!r} must be a string, not {type(v).__name__}")
    return fp


def fingerprint_key(fp: Mapping[str, str]) -> str:
    """A short stable digest of a fingerprint (used as an extra key of the page hash chain)."""
    return blake3.blake3(pack(dict(fp))).hexdigest()[:32]


def check_fingerprint(record: Mapping[str, Any], expected: Mapping[str, str]) -> None:
    """Raise :class:`CacheMismatch` unless ``record``'s fingerprint equals ``expected``."""
    check_record(record)
    got = record["fingerprint"]
    diffs = {k: (got.get(k), expected.get(k)) for k in sorted(set(got) | set(expected)) if got.get(k) != expected.get(k)}
    if diffs:
        raise CacheMismatch(diffs)


def page_hash(parent: str | None, tokens: Sequence[int], extra: Sequence[str] = ()) -> str:
    """The chained prefix hash of one page: parent hash + the page's tokens + extra keys."""
    value = [parent or "", [int(t) for t in tokens], list(extra)]
    # lists of ints and strings are canonical as they are: the same bytes as pack() gives, without its walk over
    # every token (a record's hashes are checked on each restore)
    plain = all(type(e) is str for e in value[2])
    return blake3.blake3(pack_plain(value) if plain else pack(value)).hexdigest()


def page_hashes(tokens: Sequence[int], page_size: int, extra: Sequence[str] = ()) -> list[str]:
    """Hashes of every page (the last may be partial) of a token sequence."""
    out: list[str] = []
    parent: str | None = None
    for start in range(0, len(tokens), page_size):
        parent = page_hash(parent, tokens[start : start + page_size], extra)
        out.append(parent)
    return out


def _extra_keys(fp: Mapping[str, str], extra: Sequence[str]) -> list[str]:
    return [fingerprint_key(fp), *[str(e) for e in extra]]


_pool: ThreadPoolExecutor | None = None
_pool_pid = 0
_pool_lock = threading.Lock()


def workers() -> int:
    """How many segments are stored or read at once: one per core, at least 2 (a read's preadv and BLAKE3 and a
    write's hash and file write release the GIL), at most 16 (a GPU host's page-cache reads scale to about that)."""
    return max(2, min(16, os.cpu_count() or 1))


def _executor() -> ThreadPoolExecutor:
    """The worker threads that store and read segments (made once per process: starting threads per call costs
    more than a small cache takes to write; a forked child makes its own)."""
    global _pool, _pool_pid
    with _pool_lock:
        if _pool is None or _pool_pid != os.getpid():
            from concurrent.futures import ThreadPoolExecutor

            _pool = ThreadPoolExecutor(workers(), thread_name_prefix="agentsnap-kv")
            _pool_pid = os.getpid()
        return _pool


def _buffers(data: Any) -> list[memoryview]:
    """A page as a list of byte views (``page_bytes`` may return one buffer or a sequence of them)."""
    parts = [data] if isinstance(data, (bytes, bytearray, memoryview)) else list(data)
    return [content.byte_view(p) for p in parts]


def page_ref(page: Mapping[str, Any]) -> tuple[str, int]:
    """Where a page's bytes live: ``(object id, offset)`` (a version-1 page: ``(content id, 0)``).

    Two pages with the same ref are the same stored bytes (dedup is at this granularity)."""
    if "segment" in page:
        return page["segment"], page["offset"]
    return page["content"], 0


def page_refs(pages: Sequence[Mapping[str, Any]]) -> list[str]:
    """The objects a list of pages lives in, each once, in order (a record's ``refs``)."""
    return list(dict.fromkeys(page_ref(p)[0] for p in pages))


def _store_segment(store: ObjectStore, parts: list[memoryview]) -> str:
    """Store one segment, its file fsynced on this worker (the fsyncs of several segments overlap each other and the
    next segment's hashing); the directories are made durable once, by the barrier at the end of the capture."""
    return content.put_raw(store, parts, durable=True)


class _SegmentWriter:
    """Groups the pages to write into aligned segments and stores each on a worker thread (bounded)."""

    def __init__(self, store: ObjectStore, page_size: int) -> None:
        self.store, self.page_size = store, page_size
        self.group_pages: int | None = None  # page slots per segment, from the first page's bytes per token
        self.group: int | None = None
        self.parts: list[memoryview] = []
        self.size = 0
        self.waiting: list[dict[str, Any]] = []  # page entries of the group being gathered
        self.pool = _executor()
        self.flying: deque[tuple[Future[str], list[dict[str, Any]]]] = deque()
        self.wrote = False  # anything stored (a segment, or a page too large for one): finish() runs the barrier

    def add(self, entry: dict[str, Any], index: int, data: Any) -> None:
        parts = _buffers(data)
        nbytes = sum(p.nbytes for p in parts)
        entry["nbytes"] = nbytes
        if nbytes > MAX_SEGMENT_BYTES:  # a page no segment can hold: chunked content, as version 1 stored pages
            entry["content"] = content.put_bytes(self.store, b"".join(parts))
            self.wrote = True
            return
        if self.group_pages is None:
            per_page = max(1, nbytes // max(1, entry["n"])) * self.page_size
            self.group_pages = max(1, SEGMENT_BYTES // per_page)
        group = index // self.group_pages
        if self.parts and (group != self.group or self.size + nbytes > MAX_SEGMENT_BYTES):
            self.flush()
        self.group = group
        entry["offset"] = self.size
        self.parts += parts
        self.size += nbytes
        self.waiting.append(entry)

    def flush(self) -> None:
        """Hand the gathered group to a worker; wait for the oldest one while too many are in flight."""
        if not self.parts:
            return
        self.flying.append((self.pool.submit(_store_segment, self.store, self.parts), self.waiting))
        self.wrote = True
        self.parts, self.size, self.waiting = [], 0, []
        while len(self.flying) > IN_FLIGHT:
            self._settle()

    def _settle(self) -> None:
        future, entries = self.flying.popleft()
        oid = future.result()
        for entry in entries:
            entry["segment"] = oid

    def finish(self) -> None:
        """Store the last group and wait for every segment, then make them durable (one barrier: the files are
        fsynced by their workers, the directories here); the page entries then name their segments."""
        try:
            self.flush()
            while self.flying:
                self._settle()
        except BaseException:
            self.abort()
            raise
        if self.wrote:
            self.store.barrier()

    def abort(self) -> None:
        """On an error: nothing left running that still reads the caller's buffers (what was stored is garbage)."""
        for future, _entries in self.flying:
            future.cancel()
        from concurrent.futures import wait

        wait([f for f, _e in self.flying])
        self.flying.clear()


def write_cache(
    store: ObjectStore,
    fp: Mapping[str, str],
    tokens: Sequence[int],
    page_size: int,
    page_bytes: PageBytes,
    *,
    extra: Sequence[str] = (),
    previous: Mapping[str, Any] | None = None,
    meta: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Stream a cache into the store, a segment of pages at a time, and return its record.

    Args:
        store: the object store (``repo.objects``).
        fp: the engine's fingerprint (see :func:`fingerprint`).
        tokens: the token ids whose KV the cache holds, in order.
        page_size: token slots per page.
        page_bytes: ``page_bytes(start, end)`` returns the KV bytes of token slots ``[start, end)``, as one buffer
            or a sequence of buffers (joined in order, e.g. one per layer); it is called once per page that must
            be written, in token order, and its buffers are held only until their segment is stored.
        extra: extra keys of the hash chain (LoRA id, salt, ...).
        previous: a record whose pages are known to be byte-identical to this cache's pages with
            the same hash (the same live cache captured earlier, or the record it was restored from):
            its full pages present in ``store`` are reused without calling ``page_bytes``.
        meta: adapter data stored with the record (shapes, block table, ...).
    """
    if page_size <= 0:
        raise InvalidInput(f"page_size must be positive, got {page_size}")
    keys = _extra_keys(fp, extra)
    known: dict[str, dict[str, Any]] = {}
    if (previous is not None and previous.get("fingerprint") == dict(fp) and previous.get("page_size") == page_size
            and previous.get("v") in READABLE_VERSIONS):
        known = {p["hash"]: p for p in previous.get("pages", []) if p["n"] == page_size}
        absent = store.missing(page_refs(list(known.values())))  # e.g. restored from another store
        known = {h: p for h, p in known.items() if page_ref(p)[0] not in absent}
    pages: list[dict[str, Any]] = []
    writer = _SegmentWriter(store, page_size)
    try:
        parent: str | None = None
        for index, start in enumerate(range(0, len(tokens), page_size)):
            end = min(start + page_size, len(tokens))
            parent = page_hash(parent, tokens[start:end], keys)
            old = known.get(parent)
            if old is not None and old["start"] == start:
                pages.append(dict(old))
                continue
            entry: dict[str, Any] = {"hash": parent, "start": start, "n": end - start}
            pages.append(entry)
            writer.add(entry, index, page_bytes(start, end))
    except BaseException:
        writer.abort()
        raise
    writer.finish()
    return {
        "format": FORMAT,
        "v": VERSION,
        "fingerprint": dict(fp),
        "page_size": page_size,
        "segment_pages": writer.group_pages,
        "tokens": [int(t) for t in tokens],
        "extra": [str(e) for e in extra],
        "pages": pages,
        "refs": page_refs(pages),
        "meta": dict(meta or {}),
    }


def check_record(record: Any) -> None:
    """Raise unless ``record`` is a well-formed cache record whose hash chain matches its tokens."""
    if not isinstance(record, Mapping) or record.get("format") != FORMAT:
        raise InvalidInput("not an agentsnap KV cache record (format 'agentsnap-kv' expected)")
    if record.get("v") not in READABLE_VERSIONS:
        raise UnsupportedFormat("KV cache record", record.get("v"), VERSION)
    tokens, size, pages = record.get("tokens"), record.get("page_size"), record.get("pages")
    if not isinstance(tokens, list) or not isinstance(size, int) or size <= 0 or not isinstance(pages, list):
        raise InvalidInput("KV cache record has no tokens, page_size or pages")
    expected = page_hashes(tokens, size, _extra_keys(record["fingerprint"], record.get("extra", [])))
    if [p.get("hash") for p in pages] != expected:
        raise InvalidInput("KV cache record's page hashes do not match its tokens (tampered or truncated record)")
    segments = record["v"] >= 2
    for i, p in enumerate(pages):
        nbytes, offset = p.get("nbytes"), p.get("offset")
        stored = (is_oid(p.get("segment")) and type(offset) is int and offset >= 0) if segments and "segment" in p \
            else is_oid(p.get("content"))
        if (p.get("start") != i * size or p.get("n") != min(size, len(tokens) - i * size) or not stored
                or type(nbytes) is not int or nbytes < 0):
            raise InvalidInput(f"KV cache record page {i} is malformed")


class PageReader:
    """Reads pages by their record entries, keeping the last few segments read (verified) in memory.

    For engines that load pages in their own order (a vLLM step loads the pages of several requests)."""

    def __init__(self, store: ObjectStore, keep: int = 2) -> None:
        self.store, self.keep = store, keep
        self._segments: dict[str, memoryview] = {}

    def read(self, page: Mapping[str, Any]) -> memoryview:
        """The page's bytes (a read-only view), verified; :class:`InvalidInput` if the size is not the record's."""
        if "segment" not in page:
            return _sized(page, memoryview(content.get_bytes(self.store, page["content"])))
        seg = page["segment"]
        view = self._segments.pop(seg, None)
        if view is None:
            view = content.get_raw(self.store, seg)
        self._segments[seg] = view  # most recently used last
        while len(self._segments) > self.keep:
            self._segments.pop(next(iter(self._segments)))
        return _slice(page, view)


def read_page(store: ObjectStore, page: Mapping[str, Any]) -> memoryview:
    """One page's bytes by its record entry (reads and verifies the whole segment it lives in)."""
    return PageReader(store, keep=0).read(page)


def _sized(page: Mapping[str, Any], data: memoryview) -> memoryview:
    if len(data) != page["nbytes"]:
        raise InvalidInput(f"KV page at token {page['start']} has {len(data)} bytes, record says {page['nbytes']}")
    return data


def _slice(page: Mapping[str, Any], segment: memoryview) -> memoryview:
    offset, nbytes = page["offset"], page["nbytes"]
    if offset + nbytes > len(segment):
        raise InvalidInput(f"KV page at token {page['start']} has {max(0, len(segment) - offset)} bytes, "
                           f"record says {nbytes}")
    return segment[offset : offset + nbytes]


def iter_pages(
    store: ObjectStore, record: Mapping[str, Any], expected: Mapping[str, str] | None = None
) -> Iterator[tuple[int, int, memoryview]]:
    """Yield ``(start, end, page bytes)`` in token order, after checking record and fingerprint.

    Segments are read and verified a few ahead on worker threads (at most :data:`IN_FLIGHT` + 1 in memory)
    and each page is a read-only view into its segment, valid while the caller holds it.
    """
    if expected is not None:
        check_fingerprint(record, expected)
    else:
        check_record(record)
    pages = record["pages"]
    last_use: dict[str, int] = {}  # segment -> index of the last page in it; keys in the order of first use
    for i, p in enumerate(pages):
        if "segment" in p:
            last_use[p["segment"]] = i
    pool = _executor()
    loading: dict[str, Future[memoryview]] = {}
    ahead = iter(last_use)
    submitted: set[str] = set()

    def load(seg: str) -> None:
        submitted.add(seg)
        loading[seg] = pool.submit(content.get_raw, store, seg)

    try:
        for i, p in enumerate(pages):
            if "segment" not in p:  # a version-1 page (or one too large for a segment)
                data = _sized(p, memoryview(content.get_bytes(store, p["content"])))
            else:
                while len(loading) <= IN_FLIGHT and (seg := next(ahead, None)) is not None:
                    if seg not in submitted:
                        load(seg)
                seg = p["segment"]
                if seg not in loading:  # pages interleaving more segments than are read ahead
                    load(seg)
                data = _slice(p, loading[seg].result())
                if last_use[seg] == i:
                    del loading[seg]
            yield p["start"], p["start"] + p["n"], data
    finally:  # the caller stopped early (or a page failed): drop the reads not started
        for future in loading.values():
            future.cancel()


#: ``page_buffers(start, end)``: writable buffers the bytes of token slots ``[start, end)`` go into, in page order
PageBuffers = Callable[[int, int], "Sequence[bytearray | memoryview]"]


def read_into(
    store: ObjectStore, record: Mapping[str, Any], page_buffers: PageBuffers,
    expected: Mapping[str, str] | None = None,
) -> None:
    """Read every page of a record straight into the engine's own memory, after checking record and fingerprint.

    ``page_buffers(start, end)`` (called once per page, in token order, on this thread) returns the writable
    buffers the page's bytes go into, in the page's byte order (e.g. one per layer and head: views of the cache
    tensors). Each segment is read into them with one scatter read on a worker thread and verified where it
    landed (BLAKE3 over the buffers; :func:`agentsnap_core.format.content.get_raw_into`): unlike
    :func:`iter_pages` no segment is held in memory and copied out again. Raises like :func:`iter_pages`
    (:class:`CacheMismatch`, :class:`InvalidInput`, ``ObjectCorrupt``); the buffers then hold bytes that must
    not be used.
    """
    if expected is not None:
        check_fingerprint(record, expected)
    else:
        check_record(record)
    read_pages_into(store, record["pages"], page_buffers)


def read_pages_into(store: ObjectStore, pages: Sequence[Mapping[str, Any]], page_buffers: PageBuffers) -> None:
    """:func:`read_into` for some of a checked record's pages (e.g. a chunk that fits a staging buffer): the
    caller has checked the record (:func:`check_fingerprint` or :func:`check_record`); each page is verified."""
    start_pages_into(store, pages, page_buffers).wait()


class PendingRead:
    """Segments being read into their pages' buffers on the worker threads (:func:`start_pages_into`)."""

    def __init__(self, futures: list[Future[None]], queue: deque[Any] | None = None) -> None:
        self._futures = futures
        self._queue = queue  # the segments no worker has taken yet

    def wait(self) -> None:
        """Return once every page is in its buffers and verified; raise the first segment's error (the reads not
        started are dropped, the others finish first: the buffers are the caller's again either way)."""
        try:
            for future in self._futures:
                future.result()
        finally:
            self.cancel()

    def cancel(self) -> None:
        """Drop the reads not started and wait for the others (their errors are not raised): for a caller that
        gives the buffers back after an error of its own."""
        from concurrent.futures import wait

        if self._queue is not None:
            self._queue.clear()  # a worker takes no further segment (deque.clear and popleft are atomic)
        for future in self._futures:
            future.cancel()
        wait(self._futures)


def start_pages_into(store: ObjectStore, pages: Sequence[Mapping[str, Any]], page_buffers: PageBuffers) -> PendingRead:
    """:func:`read_pages_into` without waiting: the segments are queued on the worker threads and the caller
    waits for them (:meth:`PendingRead.wait`) before it uses or gives back the buffers, e.g. while it copies an
    earlier chunk to a device. ``page_buffers`` and the sizes are checked here, on the calling thread; pages kept
    outside segments (version 1) are read here too.

    Every buffer is made first and the segments are then handed to at most :func:`workers` tasks that take them
    from one queue in order (not one task per segment): the calling thread then waits, holding no GIL, instead of
    running Python between submits while the workers' reads and hashes hand the GIL back and forth with it (each
    hand-back could wait up to the interpreter's 5 ms switch interval)."""
    targets: dict[str, list[tuple[int, Mapping[str, Any], list[memoryview]]]] = {}
    for p in pages:
        bufs = [content.byte_view(b) for b in page_buffers(p["start"], p["start"] + p["n"])]
        got = sum(b.nbytes for b in bufs)
        if got != p["nbytes"]:
            raise InvalidInput(f"KV page at token {p['start']} has {p['nbytes']} bytes, the cache's layout {got}")
        if "segment" not in p:  # a version-1 page (or one too large for a segment): read whole, copied
            content.scatter(_sized(p, memoryview(content.get_bytes(store, p["content"]))), bufs)
        else:
            targets.setdefault(p["segment"], []).append((p["offset"], p, bufs))
    if not targets:
        return PendingRead([])
    queue: deque[tuple[str, list[tuple[int, Mapping[str, Any], list[memoryview]]]]] = deque(targets.items())
    pool = _executor()
    return PendingRead([pool.submit(_read_segments, store, queue) for _ in range(min(workers(), len(queue)))], queue)


def _read_segments(store: ObjectStore, queue: deque[tuple[str, list[tuple[int, Mapping[str, Any], list[memoryview]]]]]
                   ) -> None:
    """A worker's share of :func:`start_pages_into`: segments taken from ``queue`` until it is empty (or cleared
    by :meth:`PendingRead.cancel`); the first error ends this worker (the others finish the segment they hold)."""
    while True:
        try:
            seg, group = queue.popleft()
        except IndexError:
            return
        try:
            _read_segment(store, seg, group)
        except BaseException:
            queue.clear()  # the reads not started are dropped: the caller gets this error once the others finish
            raise


def _read_segment(store: ObjectStore, seg: str, pages: list[tuple[int, Mapping[str, Any], list[memoryview]]]) -> None:
    """One segment into its pages' buffers (the bytes no page of this record uses into scratch memory: all of the
    segment is verified)."""
    pages.sort(key=lambda x: x[0])
    views: list[memoryview] = []
    at = 0
    for offset, p, bufs in pages:
        if offset < at:  # pages sharing bytes (a record not written by write_cache): read once, copied out
            data = content.get_raw(store, seg)
            for _offset, q, qbufs in pages:
                content.scatter(_slice(q, data), qbufs)
            return
        if offset > at:
            views.append(memoryview(bytearray(offset - at)))
        views += bufs
        at = offset + p["nbytes"]
    try:
        content.get_raw_into(store, seg, views)
    except InvalidInput:  # shorter than the record says: name the page, as iter_pages does
        data = content.get_raw(store, seg)
        for _offset, q, _bufs in pages:
            _slice(q, data)
        raise


def shared_prefix_pages(a: Mapping[str, Any], b: Mapping[str, Any]) -> int:
    """How many leading pages two records share (same chained hash)."""
    n = 0
    for pa, pb in zip(a.get("pages", []), b.get("pages", []), strict=False):
        if pa["hash"] != pb["hash"]:
            break
        n += 1
    return n


def summary(record: Mapping[str, Any]) -> dict[str, Any]:
    """A small description of a record for logs and ``show`` (no page bytes read)."""
    return {
        "tokens": len(record.get("tokens", [])),
        "pages": len(record.get("pages", [])),
        "bytes": sum(p.get("nbytes", 0) for p in record.get("pages", [])),
        "page_size": record.get("page_size"),
        "fingerprint": dict(record.get("fingerprint", {})),
    }
