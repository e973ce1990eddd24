"""S3-compatible store (boto3): objects as keys, refs as a log of conditional writes.

Keys under ``s3://bucket/prefix/``::

    format.json                  {"format": "agentsnap-store", "version": 1}
    objects/ab/cdef...           one key per object (stored bytes, as on disk)
    refs/log/00000000000000000042  one ref/HEAD/config change per key, written with If-None-Match: *
    index/<snapshot id>          one snapshot-index row per key

Object keys are content addresses, so writes are idempotent; they are sent with
``If-None-Match: *`` so an existing object is never rewritten. Refs are a log: a writer reads the
log to its end, checks its compare-and-swap against the state that log folds to, and writes the
next slot with ``If-None-Match: *``; when another writer took that slot first the server answers
412, and the writer re-reads and re-checks. So ref updates are linearizable on any server that
enforces conditional writes (AWS S3, SeaweedFS, MinIO, R2). The production set-up keeps refs in
PostgreSQL instead (``postgresql://...?objects=s3://...``); this log suits small teams without one.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from agentsnap_core.errors import ObjectMissing, RefConflict, UnsupportedFormat
from agentsnap_core.format import objects as objmod
from agentsnap_core.stores import EncodedObjects, InvalidStoreURL, StoreUnavailable, mask_url, parse_query
from agentsnap_core.stores.base import ANY, ReflogEntry, RefUpdate, SnapshotRow
from agentsnap_core.stores.local import LOOSE_FORMAT as STORE_FORMAT  # S3 stores hold no packs

_PARALLEL = 16


def _code(exc: BaseException) -> str:
    resp = getattr(exc, "response", None) or {}
    err = resp.get("Error", {}) if isinstance(resp, dict) else {}
    return str(err.get("Code") or resp.get("ResponseMetadata", {}).get("HTTPStatusCode") or "")


def _not_found(exc: BaseException) -> bool:
    return _code(exc) in ("404", "NoSuchKey", "NotFound")


def _precondition_failed(exc: BaseException) -> bool:
    return _code(exc) in ("412", "PreconditionFailed")


class S3Store:
    """Objects (and, unless ``objects_only``, refs) in one bucket under one prefix."""

    def __init__(self, url: str, create: bool = False, objects_only: bool = False) -> None:
        self._url = url
        base, params = parse_query(url)
        rest = base[len("s3://") :]
        bucket, _, prefix = rest.partition("/")
        if not bucket:
            raise InvalidStoreURL(url, "no bucket (s3://bucket/prefix)")
        self.bucket = bucket
        self.prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""
        try:
            import boto3
            import botocore.exceptions
            from botocore.config import Config
        except ImportError:
            raise StoreUnavailable(url, "S3 support is not installed (pip install 'agentsnap-core[s3]')") from None
        self._boto_errors = (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError)
        endpoint = params.get("endpoint") or os.environ.get("AWS_ENDPOINT_URL") or None
        kwargs: dict[str, Any] = {
            "endpoint_url": endpoint,
            "region_name": params.get("region") or os.environ.get("AWS_REGION") or "us-east-1",
            "config": Config(
                s3={"addressing_style": "path" if endpoint else "auto"},
                connect_timeout=float(params.get("connect_timeout", "5")),
                read_timeout=60,
                retries={"max_attempts": int(params.get("retries", "3")), "mode": "standard"},
                max_pool_connections=_PARALLEL * 2,
            ),
        }
        if "key" in params:
            kwargs["aws_access_key_id"] = params["key"]
            kwargs["aws_secret_access_key"] = params.get("secret", "")
        try:
            self.client = boto3.session.Session().client("s3", **kwargs)
            self.client.head_bucket(Bucket=bucket)
        except self._boto_errors as exc:
            code = _code(exc)
            if code in ("404", "NoSuchBucket", "NotFound"):
                raise StoreUnavailable(url, f"bucket {bucket!r} does not exist; create it first") from None
            if code in ("403", "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch"):
                raise StoreUnavailable(url, f"access denied to bucket {bucket!r}; check the credentials") from None
            raise StoreUnavailable(url, f"{type(exc).__name__}: {exc}") from None
        except ValueError as exc:
            raise InvalidStoreURL(url, str(exc)) from None
        self._check_format(create)
        self.objects = S3Objects(self)
        self.refs: Any = None if objects_only else S3Refs(self)
        self.objects_only = objects_only

    def effects_ledger(self) -> S3LedgerStore:
        """The effects ledger as conditional writes (each entry carries the seal written with it)."""
        return S3LedgerStore(self)

    def key(self, name: str) -> str:
        return self.prefix + name

    def _check_format(self, create: bool) -> None:
        key = self.key("format.json")
        try:
            info = json.loads(self.client.get_object(Bucket=self.bucket, Key=key)["Body"].read())
        except self._boto_errors as exc:
            if not _not_found(exc):
                raise StoreUnavailable(self._url, f"{type(exc).__name__}: {exc}") from None
            if not create:
                raise StoreUnavailable(self._url, "no agentsnap store here (a push creates one)") from None
            body = json.dumps({"format": "agentsnap-store", "version": STORE_FORMAT}).encode()
            try:
                self.client.put_object(Bucket=self.bucket, Key=key, Body=body, IfNoneMatch="*")
            except self._boto_errors as exc2:
                if not _precondition_failed(exc2):
                    raise StoreUnavailable(self._url, f"{type(exc2).__name__}: {exc2}") from None
            return
        except ValueError:
            raise StoreUnavailable(self._url, "format.json is not valid JSON; the store is damaged") from None
        if info.get("format") != "agentsnap-store":
            raise StoreUnavailable(self._url, "not an agentsnap store")
        if info.get("version") != STORE_FORMAT:
            raise UnsupportedFormat(f"store {mask_url(self._url)}", info.get("version"), STORE_FORMAT)

    def list_keys(self, prefix: str, start_after: str = "", limit: int | None = None) -> Iterator[str]:
        """Keys under ``prefix`` (full keys), in order."""
        kwargs: dict[str, Any] = {"Bucket": self.bucket, "Prefix": prefix}
        if start_after:
            kwargs["StartAfter"] = start_after
        if limit is not None:
            kwargs["PaginationConfig"] = {"MaxItems": limit}
        for page in self.client.get_paginator("list_objects_v2").paginate(**kwargs):
            for item in page.get("Contents", []):
                yield item["Key"]

    @property
    def url(self) -> str:
        return mask_url(self._url)

    def close(self) -> None:
        self.client.close()


class S3Objects(EncodedObjects):
    """:class:`~agentsnap_core.stores.base.ObjectStore` on S3: ``objects/ab/cdef...``."""

    def __init__(self, store: S3Store) -> None:
        self.s3 = store
        self.client = store.client
        self.bucket = store.bucket
        self.base = store.key("objects/")

    def _key(self, oid: str) -> str:
        return f"{self.base}{oid[:2]}/{oid[2:]}"

    def has(self, oid: str) -> bool:
        try:
            self.client.head_object(Bucket=self.bucket, Key=self._key(oid))
            return True
        except self.s3._boto_errors as exc:
            if _not_found(exc):
                return False
            raise

    def missing(self, oids: Iterable[str]) -> set[str]:
        wanted = sorted(set(oids))
        if len(wanted) <= 2:
            return {o for o in wanted if not self.has(o)}
        with ThreadPoolExecutor(_PARALLEL) as pool:
            flags = list(pool.map(self.has, wanted))
        return {o for o, present in zip(wanted, flags, strict=True) if not present}

    def get_stored(self, oid: str) -> bytes:
        if not objmod.is_oid(oid):
            raise ObjectMissing(str(oid))
        try:
            body = self.client.get_object(Bucket=self.bucket, Key=self._key(oid))["Body"]
            return body.read(objmod.MAX_OBJECT_BYTES + objmod.HEADER.size + 1024)  # type: ignore[no-any-return]
        except self.s3._boto_errors as exc:
            if _not_found(exc):
                raise ObjectMissing(oid) from None
            raise

    def _write(self, oid: str, stored: bytes) -> None:
        for _attempt in range(3):
            try:
                self.client.put_object(Bucket=self.bucket, Key=self._key(oid), Body=stored, IfNoneMatch="*")
                return
            except self.s3._boto_errors as exc:
                if _precondition_failed(exc):
                    return  # already there: content addressing makes it the same bytes
                if _code(exc) not in ("409", "ConditionalRequestConflict"):
                    raise
                time.sleep(0.05)  # a concurrent write of the same key is in flight
        if not self.has(oid):
            raise ObjectMissing(oid)

    def iter_oids(self) -> Iterator[str]:
        n = len(self.base)
        for key in self.s3.list_keys(self.base):
            rest = key[n:]
            if len(rest) == 65 and rest[2] == "/":
                yield rest[:2] + rest[3:]

    def age(self, oid: str) -> float:
        try:
            head = self.client.head_object(Bucket=self.bucket, Key=self._key(oid))
        except self.s3._boto_errors as exc:
            if _not_found(exc):
                raise ObjectMissing(oid) from None
            raise
        return max(0.0, time.time() - head["LastModified"].timestamp())

    def delete(self, oid: str) -> None:
        self.client.delete_object(Bucket=self.bucket, Key=self._key(oid))

    def barrier(self) -> None:
        return None  # a PUT is durable when it returns

    def temp_files(self) -> list[str]:
        return []


class S3Refs:
    """:class:`~agentsnap_core.stores.base.RefStore` as a log of conditional writes (see the module docstring)."""

    def __init__(self, store: S3Store) -> None:
        self.s3 = store
        self.client = store.client
        self.bucket = store.bucket
        self.log_prefix = store.key("refs/log/")
        self.index_prefix = store.key("index/")
        self._lock = threading.Lock()
        self._seq = 0
        self._last_key = ""
        self._refs: dict[str, str] = {}
        self._heads: dict[str, tuple[str | None, str | None]] = {}
        self._config: dict[str, str] = {}
        self._reflog: list[ReflogEntry] = []

    # -------------------------------------------------------- the log
    def _sync(self) -> None:
        for key in self.s3.list_keys(self.log_prefix, start_after=self._last_key):
            seq = int(key[len(self.log_prefix) :])
            if seq != self._seq + 1:
                raise StoreUnavailable(self.s3._url, f"ref log has a gap before {key}; the store is damaged")
            entry = json.loads(self.client.get_object(Bucket=self.bucket, Key=key)["Body"].read())
            self._apply(entry)
            self._seq, self._last_key = seq, key

    def _apply(self, e: dict[str, Any]) -> None:
        op = e["op"]
        if op == "refs":
            for name, old, new in e["updates"]:
                if new is None:
                    self._refs.pop(name, None)
                else:
                    self._refs[name] = new
                self._reflog.append(ReflogEntry(len(self._reflog) + 1, name, old, new, e["time"], e["message"]))
        elif op == "head":
            self._heads[e["worktree"]] = (e["symref"], e["oid"])
        elif op == "delete_head":
            self._heads.pop(e["worktree"], None)
        elif op == "config":
            self._config[e["key"]] = e["value"]

    def _append(self, make: Any) -> None:
        """Append the entry ``make()`` builds from the current state; re-check and retry on a lost race."""
        with self._lock:
            while True:
                self._sync()
                entry = make()
                key = f"{self.log_prefix}{self._seq + 1:020d}"
                try:
                    self.client.put_object(Bucket=self.bucket, Key=key, Body=json.dumps(entry).encode(), IfNoneMatch="*")
                except self.s3._boto_errors as exc:
                    if _precondition_failed(exc) or _code(exc) in ("409", "ConditionalRequestConflict"):
                        continue  # another writer took this slot: read it and check again
                    raise
                self._apply(entry)
                self._seq, self._last_key = self._seq + 1, key
                return

    def _read(self) -> None:
        with self._lock:
            self._sync()

    # -------------------------------------------------------- RefStore
    def get_ref(self, name: str) -> str | None:
        self._read()
        return self._refs.get(name)

    def list_refs(self, prefix: str = "") -> dict[str, str]:
        self._read()
        return {k: v for k, v in sorted(self._refs.items()) if k.startswith(prefix)}

    def update_refs(self, updates: list[RefUpdate], message: str) -> None:
        def make() -> dict[str, Any]:
            state = dict(self._refs)
            rows = []
            for u in updates:
                current = state.get(u.name)
                if u.expected != ANY and u.expected != current:
                    raise RefConflict(u.name, u.expected, current)
                if u.new is None:
                    state.pop(u.name, None)
                else:
                    state[u.name] = u.new
                rows.append([u.name, current, u.new])
            return {"op": "refs", "time": time.time(), "message": message, "updates": rows}

        self._append(make)

    def reflog(self, name: str | None = None, limit: int | None = None) -> list[ReflogEntry]:
        self._read()
        out = [e for e in reversed(self._reflog) if name is None or e.name == name]
        return out if limit is None else out[:limit]

    def get_head(self, worktree: str) -> tuple[str | None, str | None]:
        self._read()
        return self._heads.get(worktree, (None, None))

    def set_head(self, worktree: str, symref: str | None, oid: str | None) -> None:
        self._append(lambda: {"op": "head", "worktree": worktree, "symref": symref, "oid": oid})

    def list_heads(self) -> dict[str, tuple[str | None, str | None]]:
        self._read()
        return dict(self._heads)

    def delete_head(self, worktree: str) -> None:
        self._append(lambda: {"op": "delete_head", "worktree": worktree})

    def index_snapshot(self, row: SnapshotRow) -> None:
        body = json.dumps({"parents": list(row.parents), "time": row.time, "message": row.message, "agent": row.agent})
        self.client.put_object(Bucket=self.bucket, Key=self.index_prefix + row.id, Body=body.encode())

    def index_snapshots(self, rows: Iterable[SnapshotRow]) -> None:
        """Index many snapshots (parallel PUTs; each row is its own key)."""
        rows = list(rows)
        if rows:
            with ThreadPoolExecutor(_PARALLEL) as pool:
                list(pool.map(self.index_snapshot, rows))

    def snapshots_with_prefix(self, prefix: str, limit: int = 2) -> list[str]:
        n = len(self.index_prefix)
        return [k[n:] for k in self.s3.list_keys(self.index_prefix + prefix, limit=limit)][:limit]

    def list_snapshots(self, limit: int | None = None, offset: int = 0) -> list[SnapshotRow]:
        n = len(self.index_prefix)
        keys = list(self.s3.list_keys(self.index_prefix))

        def load(key: str) -> SnapshotRow:
            d = json.loads(self.client.get_object(Bucket=self.bucket, Key=key)["Body"].read())
            return SnapshotRow(key[n:], tuple(d["parents"]), d["time"], d["message"], d["agent"])

        with ThreadPoolExecutor(_PARALLEL) as pool:
            rows = list(pool.map(load, keys))
        rows.sort(key=lambda r: (-r.time, r.id))
        return rows[offset : None if limit is None else offset + limit]

    def get_config(self, key: str) -> str | None:
        self._read()
        return self._config.get(key)

    def set_config(self, key: str, value: str) -> None:
        self._append(lambda: {"op": "config", "key": key, "value": value})

    def close(self) -> None:
        return None


class S3LedgerStore:
    """The effects ledger (:class:`agentsnap_core.stores.ledger.LedgerStore`) as ``ledger/<idx>`` keys.

    Entry ``idx`` is written with ``If-None-Match: *`` and carries the seal written with it, so an
    append and its seal are one atomic write, and two appenders cannot both take one index.
    """

    def __init__(self, store: S3Store) -> None:
        self.s3 = store
        self.prefix = store.key("ledger/")

    def _rows(self, start: int = 0) -> list[dict[str, Any]]:
        keys = list(self.s3.list_keys(self.prefix, start_after=f"{self.prefix}{start - 1:020d}" if start else ""))

        def load(key: str) -> dict[str, Any]:
            return json.loads(self.s3.client.get_object(Bucket=self.s3.bucket, Key=key)["Body"].read())

        with ThreadPoolExecutor(_PARALLEL) as pool:
            return list(pool.map(load, keys))

    def count(self) -> int:
        return sum(1 for _ in self.s3.list_keys(self.prefix))

    def read(self, start: int = 0) -> list[tuple[bytes, bytes]]:
        return [(bytes.fromhex(r["body"]), bytes.fromhex(r["mac"])) for r in self._rows(start)]

    def append(self, index: int, body: bytes, mac: bytes, seal: bytes) -> bool:
        if index > 0 and not any(True for _ in self.s3.list_keys(f"{self.prefix}{index - 1:020d}", limit=1)):
            return False
        doc = {"body": body.hex(), "mac": mac.hex(), "seal": seal.hex()}
        try:
            self.s3.client.put_object(Bucket=self.s3.bucket, Key=f"{self.prefix}{index:020d}",
                                      Body=json.dumps(doc).encode(), IfNoneMatch="*")  # fmt: skip
        except self.s3._boto_errors as exc:
            if _precondition_failed(exc) or _code(exc) in ("409", "ConditionalRequestConflict"):
                return False
            raise
        return True

    def seal(self) -> bytes | None:
        keys = list(self.s3.list_keys(self.prefix))
        if not keys:
            return None
        doc = json.loads(self.s3.client.get_object(Bucket=self.s3.bucket, Key=keys[-1])["Body"].read())
        return bytes.fromhex(doc["seal"])
