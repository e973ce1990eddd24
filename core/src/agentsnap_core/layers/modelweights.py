"""The ``model`` layer: weight deltas (LoRA / adapter tensors, full diffs) as chunked, deduplicated tensors.

Each tensor's raw bytes go through :func:`agentsnap_core.format.content.put_bytes` on their own, so two snapshots of
an adapter that changed in one tensor share every other tensor's chunks. The record is plain data::

    {"format": "agentsnap-weights", "v": 1, "kind": "lora",
     "tensors": {name: {"dtype": "F32", "shape": [4, 64], "content": <content id>, "nbytes": 1024}},
     "refs": [<content id>, ...], "meta": {...}}

Dtypes use safetensors' names; :func:`write_safetensors` / :func:`read_safetensors` convert a record
to and from a ``.safetensors`` file (the format peft, vLLM's LoRA loader and transformers read), without
needing the safetensors package. Framework-free: adapters turn their tensors into bytes.
"""

from __future__ import annotations

import json
import math
import mmap
import os
import struct
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import IO, Any

from agentsnap_core.errors import InvalidInput, UnsupportedFormat
from agentsnap_core.format import content
from agentsnap_core.format.objects import is_oid
from agentsnap_core.stores.base import ObjectStore

FORMAT = "agentsnap-weights"
VERSION = 1
#: safetensors dtype name -> bytes per element
DTYPE_SIZES = {
    "F64": 8, "F32": 4, "F16": 2, "BF16": 2, "F8_E4M3": 1, "F8_E5M2": 1,
    "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U64": 8, "U32": 4, "U16": 2, "U8": 1, "BOOL": 1,
}  # fmt: skip
#: largest safetensors header this reader accepts (the format's own limit is 100 MB)
MAX_HEADER = 100 * 1024 * 1024

Tensor = tuple[str, str, Sequence[int], "bytes | memoryview"]


def _nbytes(dtype: str, shape: Sequence[int]) -> int:
    if dtype not in DTYPE_SIZES:
        raise InvalidInput(f"unknown tensor dtype {dtype!r}; expected one of {sorted(DTYPE_SIZES)}")
    if any(not isinstance(d, int) or d < 0 for d in shape):
        raise InvalidInput(f"bad tensor shape {list(shape)!r}")
    return DTYPE_SIZES[dtype] * math.prod(shape)


def write_tensors(
    store: ObjectStore, tensors: Iterable[Tensor], *, kind: str = "lora", meta: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Store ``(name, dtype, shape, raw bytes)`` tensors one by one; return the model-layer record."""
    out: dict[str, dict[str, Any]] = {}
    for name, dtype, shape, data in tensors:
        if name in out:
            raise InvalidInput(f"tensor {name!r} given twice")
        want = _nbytes(dtype, shape)
        if len(memoryview(data).cast("B")) != want:
            raise InvalidInput(f"tensor {name!r}: {dtype}{list(shape)} needs {want} bytes, got {len(data)}")
        out[name] = {"dtype": dtype, "shape": list(shape), "content": content.put_bytes(store, data), "nbytes": want}
    return {
        "format": FORMAT,
        "v": VERSION,
        "kind": kind,
        "tensors": out,
        "refs": list(dict.fromkeys(t["content"] for t in out.values())),
        "meta": dict(meta or {}),
    }


def check_record(record: Any) -> None:
    """Raise unless ``record`` is a well-formed model-layer record."""
    if not isinstance(record, Mapping) or record.get("format") != FORMAT:
        raise InvalidInput("not an agentsnap model-weights record (format 'agentsnap-weights' expected)")
    if record.get("v") != VERSION:
        raise UnsupportedFormat("model-weights record", record.get("v"), VERSION)
    for name, t in record.get("tensors", {}).items():
        if not is_oid(t.get("content")) or _nbytes(t.get("dtype", "?"), t.get("shape", [])) != t.get("nbytes"):
            raise InvalidInput(f"model-weights record: tensor {name!r} is malformed")


def iter_tensors(store: ObjectStore, record: Mapping[str, Any]) -> Iterator[tuple[str, str, list[int], bytes]]:
    """Yield ``(name, dtype, shape, bytes)`` in name order, each read (and verified) on demand."""
    check_record(record)
    for name in sorted(record["tensors"]):
        t = record["tensors"][name]
        data = content.get_bytes(store, t["content"], limit=t["nbytes"])
        if len(data) != t["nbytes"]:
            raise InvalidInput(f"tensor {name!r} has {len(data)} bytes, the record says {t['nbytes']}")
        yield name, t["dtype"], list(t["shape"]), data


def changed_tensors(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[str]:
    """Names of tensors whose content differs between two records (added and removed included)."""
    ta, tb = a.get("tensors", {}), b.get("tensors", {})
    return sorted(n for n in set(ta) | set(tb) if ta.get(n, {}).get("content") != tb.get(n, {}).get("content"))


def write_safetensors(store: ObjectStore, record: Mapping[str, Any], fh: IO[bytes]) -> int:
    """Write a record as a ``.safetensors`` file, tensor by tensor; return the bytes written."""
    check_record(record)
    names = sorted(record["tensors"])
    header: dict[str, Any] = {}
    offset = 0
    for name in names:
        t = record["tensors"][name]
        header[name] = {"dtype": t["dtype"], "shape": t["shape"], "data_offsets": [offset, offset + t["nbytes"]]}
        offset += t["nbytes"]
    meta = {k: v for k, v in record.get("meta", {}).items() if isinstance(v, str)}
    if meta:
        header["__metadata__"] = meta
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # data starts 8-byte aligned
    fh.write(struct.pack("<Q", len(raw)))
    fh.write(raw)
    written = 8 + len(raw)
    for name in names:
        written += content.write_to(store, record["tensors"][name]["content"], fh)
    return written


def read_safetensors(path: str | os.PathLike[str]) -> Iterator[tuple[str, str, list[int], memoryview]]:
    """Yield ``(name, dtype, shape, bytes)`` from a ``.safetensors`` file (memory-mapped, bounds-checked)."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size < 8:
            raise InvalidInput(f"{path}: too short for a safetensors file")
        (hlen,) = struct.unpack("<Q", f.read(8))
        if hlen > min(MAX_HEADER, size - 8):
            raise InvalidInput(f"{path}: safetensors header of {hlen} bytes does not fit the file")
        try:
            header = json.loads(f.read(hlen))
        except ValueError as exc:
            raise InvalidInput(f"{path}: safetensors header is not JSON ({exc})") from None
        base = 8 + hlen
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
            view = memoryview(m)
            try:
                for name in sorted(k for k in header if k != "__metadata__"):
                    t = header[name]
                    start, end = t["data_offsets"]
                    if not 0 <= start <= end <= size - base or end - start != _nbytes(t["dtype"], t["shape"]):
                        raise InvalidInput(f"{path}: tensor {name!r} has bad offsets")
                    piece = view[base + start : base + end]
                    try:
                        yield name, t["dtype"], list(t["shape"]), piece
                    finally:
                        piece.release()
            finally:
                view.release()
