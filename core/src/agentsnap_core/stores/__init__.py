"""Store URLs: open the embedded, PostgreSQL, S3-compatible or combined store behind one API.

=====================================================  ==========================================
URL                                                    store
=====================================================  ==========================================
``file:///path`` or a plain path                       directory + SQLite (:class:`LocalStore`)
``postgresql://user:pw@host:port/db?schema=name``      objects and refs in PostgreSQL
``s3://bucket/prefix?endpoint=http://host:port``       objects and refs in S3 (conditional writes)
``postgresql://...?objects=s3://bucket/prefix``        refs/index in PostgreSQL, objects in S3
=====================================================  ==========================================

The S3 endpoint comes from the ``endpoint`` query parameter, else ``AWS_ENDPOINT_URL``;
credentials from boto3's usual chain (``AWS_ACCESS_KEY_ID``...) or ``key``/``secret`` parameters.
Every store has ``.objects`` (:class:`~agentsnap_core.stores.base.ObjectStore`), ``.refs``
(:class:`~agentsnap_core.stores.base.RefStore`), ``.url`` (password masked) and ``close()``.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import parse_qsl, unquote, urlsplit

from agentsnap_core.errors import AgentSnapError, InvalidInput, StoreNotFound
from agentsnap_core.format import objects as objmod
from agentsnap_core.stores.local import LocalStore

__all__ = [
    "BoundStore",
    "InvalidStoreURL",
    "Store",
    "StoreUnavailable",
    "ledger_of",
    "mask_url",
    "open_repo_store",
    "open_store",
]

#: local store config key naming the store a repository's objects and refs live in
STORE_URL_KEY = "store.url"


class Store(Protocol):
    objects: Any
    refs: Any

    @property
    def url(self) -> str: ...

    def close(self) -> None: ...


class InvalidStoreURL(AgentSnapError):
    """The URL names no store agentsnap can open; the message says what a valid one looks like."""

    def __init__(self, url: str, reason: str) -> None:
        self.url = mask_url(url)
        super().__init__(
            f"invalid store URL {self.url!r}: {reason} "
            "(use file:///path, postgresql://user@host/db, s3://bucket/prefix or postgresql://...?objects=s3://...)"
        )


class StoreUnavailable(AgentSnapError):
    """The store could not be reached or refused us (server down, credentials, missing bucket)."""

    def __init__(self, url: str, reason: str) -> None:
        self.url = mask_url(url)
        self.reason = " ".join(str(reason).split())[:300]
        super().__init__(f"cannot open store {self.url}: {self.reason}")


def mask_url(url: str) -> str:
    """``url`` with every password (userinfo and ``secret=``/``password=`` parameters) shown as ``***``."""
    masked = re.sub(r"(//[^:/@?&#]*):[^@/?#]*@", r"\1:***@", url)
    return re.sub(r"((?:^|[?&])(?:secret|password)=)[^&]*", r"\1***", masked)


def parse_query(url: str) -> tuple[str, dict[str, str]]:
    """Split a URL into the part before ``?`` and its query parameters.

    ``objects=`` swallows the rest of the query (it is itself a URL with parameters).
    """
    base, sep, query = url.partition("?")
    params: dict[str, str] = {}
    if not sep:
        return base, params
    head, found, nested = query.partition("objects=")
    if found and (head == "" or head.endswith("&")):
        params["objects"] = unquote(nested)
        query = head.rstrip("&")
    for k, v in parse_qsl(query, keep_blank_values=True):
        params[k] = v
    return base, params


def open_store(url: str | os.PathLike[str], create: bool = False) -> Store:
    """Open the store ``url`` names; ``create`` lays out an empty store (never a bucket or database).

    Raises:
        InvalidStoreURL: the URL cannot name a store.
        StoreUnavailable: the server is unreachable, refuses the credentials, or the bucket is missing.
    """
    text = os.fspath(url)
    if not text:
        raise InvalidStoreURL(text, "empty URL")
    scheme = text.split(":", 1)[0].lower() if re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", text) else ""
    if scheme in ("", "file"):
        path = _file_path(text) if scheme == "file" else text
        try:
            return LocalStore(path, create=create)
        except OSError as exc:
            raise StoreUnavailable(text, f"{exc.strerror or exc}") from None
        except StoreNotFound:
            inner = os.path.join(path, ".agentsnap")
            if os.path.isfile(os.path.join(inner, "format.json")):  # a project directory: its store is inside
                raise StoreUnavailable(text, f"{path} is a working tree, not a store; its store is {inner} (use "
                                             "that path)") from None
            raise StoreUnavailable(text, "no agentsnap store there (a push creates one; clone and fetch need one)") from None
        except AgentSnapError as exc:
            raise StoreUnavailable(text, str(exc)) from None
    if scheme in ("postgresql", "postgres"):
        from agentsnap_core.stores.postgres import open_postgres

        return open_postgres(text, create=create)
    if scheme == "s3":
        from agentsnap_core.stores.s3 import S3Store

        return S3Store(text, create=create)
    raise InvalidStoreURL(text, f"unknown scheme {scheme!r}")


def _file_path(url: str) -> str:
    parts = urlsplit(url)
    if parts.netloc not in ("", "localhost"):
        raise InvalidStoreURL(url, "file URLs name a local path (file:///abs/path)")
    if not parts.path:
        raise InvalidStoreURL(url, "no path")
    return unquote(parts.path)


def store_url_of(path: str | os.PathLike[str]) -> str:
    """Normalise a path or URL given by a user into a URL (paths become ``file://``)."""
    text = os.fspath(path)
    if not text.strip():  # (a script's unset variable: not this directory's store, silently)
        raise InvalidInput("an empty store path or URL: give the path or URL of the store")
    if re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", text):
        return text
    return Path(text).resolve().as_uri()


# ---------------------------------------------------------------- a repository bound to a remote store


class BoundRefs:
    """Refs, reflog, index and config from the shared store; worktree HEADs from the local one.

    Each checkout keeps its own HEADs (like git), while branches and tags are shared.
    """

    def __init__(self, shared: Any, local: Any) -> None:
        self.shared, self.local = shared, local

    def __getattr__(self, name: str) -> Any:
        return getattr(self.shared, name)

    def get_head(self, worktree: str) -> tuple[str | None, str | None]:
        return self.local.get_head(worktree)  # type: ignore[no-any-return]

    def set_head(self, worktree: str, symref: str | None, oid: str | None) -> None:
        self.local.set_head(worktree, symref, oid)

    def list_heads(self) -> dict[str, tuple[str | None, str | None]]:
        return self.local.list_heads()  # type: ignore[no-any-return]

    def delete_head(self, worktree: str) -> None:
        self.local.delete_head(worktree)

    def close(self) -> None:
        self.local.close()


class BoundStore:
    """A repository's local directory (worktree state, HEADs) joined to a shared store (objects, refs)."""

    def __init__(self, local: LocalStore, shared: Store) -> None:
        self.local, self.shared = local, shared
        self.root = local.root
        self.objects = shared.objects
        self.refs = BoundRefs(shared.refs, local.refs)
        self._ledger: Any = None

    @property
    def url(self) -> str:
        return self.shared.url

    def effects_ledger(self) -> Any:
        """The shared store's effects ledger: every checkout appends to one chain."""
        if self._ledger is None:
            self._ledger = ledger_of(self.shared)
        return self._ledger

    def close(self) -> None:
        self.shared.close()
        self.local.close()


def ledger_of(store: Any) -> Any:
    """The effects-ledger storage of a store (its own, or the SQLite file of a directory store)."""
    own = getattr(store, "effects_ledger", None)
    if callable(own):
        return own()
    from agentsnap_core.stores.ledger import LEDGER_FILE, SqliteLedgerStore

    return SqliteLedgerStore(Path(store.root) / LEDGER_FILE)


def open_repo_store(store_dir: str | os.PathLike[str]) -> LocalStore | BoundStore:
    """The store a repository directory uses: its own, or the one its ``store.url`` names."""
    local = LocalStore(store_dir)
    url = local.refs.get_config(STORE_URL_KEY)
    if not url:
        return local
    try:
        return BoundStore(local, open_store(url))
    except BaseException:
        local.close()
        raise


def bind_store_url(local: LocalStore, url: str) -> None:
    """Record that ``local``'s repository keeps objects and refs in the store ``url`` (created if empty)."""
    url = store_url_of(url)
    open_store(url, create=True).close()
    local.refs.set_config(STORE_URL_KEY, url)


class EncodedObjects:
    """get / put / put_stored shared by stores that keep objects in their encoded form.

    A subclass provides ``get_stored(oid)`` and ``_write(oid, stored)``.
    """

    def get_stored(self, oid: str) -> bytes:  # pragma: no cover - provided by subclasses
        raise NotImplementedError

    def _write(self, oid: str, stored: bytes) -> None:  # pragma: no cover - provided by subclasses
        raise NotImplementedError

    def get(self, oid: str) -> tuple[int, bytes]:
        return objmod.decode(oid, self.get_stored(oid))

    def put(self, kind: int, raw: bytes | memoryview) -> str:
        oid, stored = objmod.encode(kind, raw)
        self._write(oid, stored)
        return oid

    def put_stored(self, oid: str, stored: bytes) -> None:
        objmod.decode(oid, stored)  # verify before accepting
        self._write(oid, stored)
