"""The ``cache`` layer: inference-engine KV pages, framework-free.

A KV cache is stored as *pages* of ``page_size`` token slots. Each page is keyed by a chained
prefix hash (parent page hash + the page's tokens + extra keys such as the model fingerprint, a
LoRA id or a salt), so two forks of one conversation share every prefix page and differ only in
their tail; the page *bytes* go through :func:`agentsnap_core.format.content.put_bytes` one page at a time
(content-defined chunks, deduplicated, never the whole cache in memory at once).

The record an adapter returns from ``agentsnap_capture_cache`` is plain data::

    {"format": "agentsnap-kv", "v": 1, "fingerprint": {...}, "page_size": 16,
     "tokens": [...], "extra": [...], "meta": {...},
     "pages": [{"hash": ..., "start": 0, "n": 16, "content": <content id>, "nbytes": ...}, ...],
     "refs": [<content id>, ...]}

``refs`` lists every page's content id, so ``verify`` and ``gc`` see the pages. The byte layout
inside a page is the adapter's business and is named by the fingerprint's ``layout`` field
(CPU and CUDA layouts differ); restore refuses a record whose fingerprint does not match the
engine it is loaded into (:class:`CacheMismatch`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import blake3

from agentsnap_core.errors import AgentSnapError, InvalidInput, UnsupportedFormat
from agentsnap_core.format import content
from agentsnap_core.format.encoding import pack
from agentsnap_core.format.objects import is_oid
from agentsnap_core.stores.base import ObjectStore

FORMAT = "agentsnap-kv"
VERSION = 1
#: the fields every fingerprint has; adapters may add more (all are compared)
FINGERPRINT_FIELDS = ("model", "weights", "dtype", "tokenizer", "engine", "layout")

PageBytes = Callable[[int, int], "bytes | memoryview"]


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
    return blake3.blake3(pack([parent or "", [int(t) for t in tokens], list(extra)])).hexdigest()


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
    """Stream a cache into the store page by page and return its record.

    Args:
        store: the object store (``repo.objects``).
        fp: the engine's fingerprint (see :func:`fingerprint`).
        tokens: the token ids whose KV the cache holds, in order.
        page_size: token slots per page.
        page_bytes: ``page_bytes(start, end)`` returns the KV bytes of token slots ``[start, end)``;
            it is called once per page that must be written, and its result is dropped right after.
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
    if previous is not None and previous.get("fingerprint") == dict(fp) and previous.get("page_size") == page_size:
        known = {p["hash"]: p for p in previous.get("pages", []) if p["n"] == page_size}
        absent = store.missing([p["content"] for p in known.values()])  # e.g. restored from another store
        known = {h: p for h, p in known.items() if p["content"] not in absent}
    pages: list[dict[str, Any]] = []
    parent: str | None = None
    for start in range(0, len(tokens), page_size):
        end = min(start + page_size, len(tokens))
        parent = page_hash(parent, tokens[start:end], keys)
        old = known.get(parent)
        if old is not None and old["start"] == start:
            pages.append(dict(old))
            continue
        data = page_bytes(start, end)
        pages.append(
            {"hash": parent, "start": start, "n": end - start, "content": content.put_bytes(store, data), "nbytes": len(data)}
        )
        del data
    return {
        "format": FORMAT,
        "v": VERSION,
        "fingerprint": dict(fp),
        "page_size": page_size,
        "tokens": [int(t) for t in tokens],
        "extra": [str(e) for e in extra],
        "pages": pages,
        "refs": list(dict.fromkeys(p["content"] for p in pages)),
        "meta": dict(meta or {}),
    }


def check_record(record: Any) -> None:
    """Raise unless ``record`` is a well-formed cache record whose hash chain matches its tokens."""
    if not isinstance(record, Mapping) or record.get("format") != FORMAT:
        raise InvalidInput("not an agentsnap KV cache record (format 'agentsnap-kv' expected)")
    if record.get("v") != VERSION:
        raise UnsupportedFormat("KV cache record", record.get("v"), VERSION)
    tokens, size, pages = record.get("tokens"), record.get("page_size"), record.get("pages")
    if not isinstance(tokens, list) or not isinstance(size, int) or size <= 0 or not isinstance(pages, list):
        raise InvalidInput("KV cache record has no tokens, page_size or pages")
    expected = page_hashes(tokens, size, _extra_keys(record["fingerprint"], record.get("extra", [])))
    if [p.get("hash") for p in pages] != expected:
        raise InvalidInput("KV cache record's page hashes do not match its tokens (tampered or truncated record)")
    for i, p in enumerate(pages):
        if p.get("start") != i * size or p.get("n") != min(size, len(tokens) - i * size) or not is_oid(p.get("content")):
            raise InvalidInput(f"KV cache record page {i} is malformed")


def iter_pages(
    store: ObjectStore, record: Mapping[str, Any], expected: Mapping[str, str] | None = None
) -> Iterator[tuple[int, int, bytes]]:
    """Yield ``(start, end, page bytes)`` page by page, after checking record and fingerprint.

    Every page is read (and digest-verified) only when the caller asks for it, so a restore
    holds one page at a time besides the engine's own buffers.
    """
    if expected is not None:
        check_fingerprint(record, expected)
    else:
        check_record(record)
    for p in record["pages"]:
        data = content.get_bytes(store, p["content"])
        if len(data) != p["nbytes"]:
            raise InvalidInput(f"KV page at token {p['start']} has {len(data)} bytes, record says {p['nbytes']}")
        yield p["start"], p["start"] + p["n"], data


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
