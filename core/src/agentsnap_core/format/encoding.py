"""Canonical msgpack encoding: the same value always gives the same bytes.

Documents the store itself builds (manifests, refs, indexes: :func:`pack`) are written with their map keys sorted.
Values that come from an agent (its state, trace and other layers: :func:`pack_value`) keep their maps in the order
they were built, as a Python dict does: an agent that reads its dict in insertion order (tool results in the order
they came, a JSON document it sends to a model) reads it in the same order after a restore. Only plain data types
are accepted (no pickle, no extension types on load), so decoding an untrusted object can never run code.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import msgpack

from agentsnap_core.errors import AgentSnapError

MAX_DECODE_BYTES = 64 * 1024 * 1024


class DecodeError(AgentSnapError):
    def __init__(self, what: str, reason: str) -> None:
        super().__init__(f"cannot decode {what}: {reason}")


def _canonical(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _canonical(value[k]) for k in sorted(value, key=_sort_key)}
    if isinstance(value, (list, tuple)):
        return [_canonical(v) for v in value]
    return value


#: leaves msgpack packs as they are: nothing below them to check
_LEAVES = frozenset({str, bytes, int, float, bool, type(None)})


def _in_order(value: Any) -> Any:
    """``value`` itself, once its map keys are checked (the same keys as a sorted map accepts): msgpack packs maps in
    their own order and tuples as arrays, so nothing is rebuilt (an agent's state is walked once, not copied)."""
    _check_keys(value)
    return value


def _check_keys(value: Any) -> None:
    if isinstance(value, dict):
        for k, v in value.items():
            if type(k) is not str:
                _sort_key(k)
            if type(v) not in _LEAVES:
                _check_keys(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            if type(v) not in _LEAVES:
                _check_keys(v)


def _sort_key(key: Any) -> tuple[int, Any]:
    if isinstance(key, str):
        return (0, key)
    if isinstance(key, bytes):
        return (1, key)
    if isinstance(key, (int, float)) and not isinstance(key, bool):
        return (2, key)
    raise TypeError(f"map keys must be str, bytes or numbers, not {type(key).__name__}")


def pack(value: Any) -> bytes:
    """Encode ``value`` canonically (sorted map keys, tuples as lists): documents the store builds."""
    return _packb(_canonical, value)


def pack_value(value: Any) -> bytes:
    """Encode an agent's ``value`` with its maps in their own order (tuples as lists): the same value built the same
    way gives the same bytes; a map in sorted order gives :func:`pack`'s bytes."""
    return _packb(_in_order, value)


def _packb(prepare: Any, value: Any) -> bytes:
    try:
        return msgpack.packb(prepare(value), use_bin_type=True, strict_types=False)
    except UnicodeEncodeError:  # (a subclass of ValueError)
        where = _not_utf8(value, "value") or "a value"
        raise AgentSnapError(f"value cannot be stored: {where} is a string with characters UTF-8 cannot hold (lone "
                             "surrogates, as from bytes decoded with errors='surrogateescape'); store it as bytes "
                             "(os.fsencode) or decode it with errors='replace'") from None
    except (TypeError, OverflowError, ValueError) as exc:  # e.g. an int outside msgpack's 64-bit range
        raise AgentSnapError(f"value cannot be stored: {exc}") from None


def utf8_ok(text: str) -> bool:
    """Whether UTF-8 can hold ``text`` (not so for lone surrogates, as ``surrogateescape`` decoding leaves)."""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _not_utf8(value: Any, path: str) -> str:
    """Where in ``value`` the first string UTF-8 cannot encode is (``value['messages'][3]['content']``)."""
    if isinstance(value, str):
        if not utf8_ok(value):
            return path
    elif isinstance(value, dict):
        for k, v in value.items():
            found = _not_utf8(k, f"{path} key {k!r}") or _not_utf8(v, f"{path}[{k!r}]")
            if found:
                return found
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            found = _not_utf8(v, f"{path}[{i}]")
            if found:
                return found
    return ""


def pack_plain(value: Any) -> bytes:
    """Encode ``value`` as is: the caller guarantees it is already canonical (sorted keys, lists)."""
    return msgpack.packb(value, use_bin_type=True)


#: a document this large decodes with the cyclic garbage collector paused (:func:`bulk`)
BULK_BYTES = 256 * 1024


@contextmanager
def bulk() -> Iterator[None]:
    """Pause the cyclic garbage collector while a large structure of new containers is built (a 100k-entry tree,
    stat cache or listing): each collection it triggers walks every container made so far, and it finds no garbage
    in them (a 100k-file capture spent ~30% of its time there). Reference counting still frees as usual; the
    collector runs again on exit, where it was running before."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def unpack(data: bytes, what: str = "object") -> Any:
    """Decode bytes written by :func:`pack`; any malformed input raises :class:`DecodeError`."""
    if len(data) > MAX_DECODE_BYTES:
        raise DecodeError(what, f"{len(data)} bytes is over the {MAX_DECODE_BYTES} byte limit")
    if len(data) >= BULK_BYTES:
        with bulk():
            return _unpack(data, what)
    return _unpack(data, what)


def _unpack(data: bytes, what: str) -> Any:
    try:
        return msgpack.unpackb(
            data,
            raw=False,
            strict_map_key=False,
            use_list=True,
            ext_hook=_refuse_ext,
        )
    except DecodeError:
        raise
    except Exception as exc:  # msgpack raises many types on garbage
        raise DecodeError(what, f"{type(exc).__name__}: {exc}") from None


def _refuse_ext(code: int, data: bytes) -> Any:
    raise DecodeError("object", f"msgpack extension type {code} is not allowed")
