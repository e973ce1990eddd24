"""pytest plugin: LangGraph's own test suite (its sdist's ``tests/``) with its checkpointer fixtures on PFSaver.

Loaded with ``-p pfsaver_own`` (this folder on ``PYTHONPATH``) from the extracted sdist's directory, with
``NO_DOCKER=true``. LangGraph's ``tests/conftest.py`` builds its checkpointer fixtures from the context
managers of ``tests/conftest_checkpointer.py``; when that conftest is registered this plugin swaps them:

* ``sqlite``     -> ``PFSaver`` (default serializer)
* ``sqlite_aes`` -> ``PFSaver`` with LangGraph's ``EncryptedSerializer`` (the suite's AES key)
* ``sqlite_aio`` -> ``PFSaver`` used through its async methods

each on a fresh store per test: an embedded store in a temporary directory, or with
``PFSAVER_STORE=postgres`` a fresh schema on a local PostgreSQL server
(:class:`agentsnap_core.testing.servers.PostgresServer`, one per run). The ``memory`` parametrizations
(LangGraph's in-memory reference) are deselected: every checkpointer-parametrized test runs on PFSaver.
With ``PFSAVER_ONLY=1`` the tests that use no checkpointer fixture are deselected too.
"""

from __future__ import annotations

import os
import secrets
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import pytest

STORE = os.environ.get("PFSAVER_STORE", "embedded")
#: PFSAVER_ONLY=1: only the tests parametrized by a checkpointer (the ones that run PFSaver), ~45 % of the suite
ONLY = os.environ.get("PFSAVER_ONLY") == "1"
_server: Any = None


def _url() -> str:
    global _server
    if _server is None:
        from agentsnap_core.testing.servers import PostgresServer

        _server = PostgresServer().start()
    # not uuid.uuid4(): LangGraph's deterministic_uuids fixture patches it, and a schema name must not consume
    # one of the ids the test expects its messages to get
    return f"{_server.url}?schema=own_{secrets.token_hex(6)}"


def _open(serde: Any = None) -> tuple[Any, str]:
    from agentsnap_langgraph import PFSaver

    where = tempfile.mkdtemp(prefix="pfsaver-own-")
    if STORE == "postgres":
        return PFSaver.from_url(_url(), path=where, serde=serde), where
    if STORE != "embedded":
        raise pytest.UsageError(f"PFSAVER_STORE must be 'embedded' or 'postgres', not {STORE!r}")
    return PFSaver(where, serde=serde), where


@contextmanager
def _pfsaver(serde: Any = None) -> Iterator[Any]:
    saver, where = _open(serde)
    try:
        with saver:
            yield saver
    finally:
        shutil.rmtree(where, ignore_errors=True)


@contextmanager
def _pfsaver_aes() -> Iterator[Any]:
    from langgraph.checkpoint.serde.encrypted import EncryptedSerializer

    with _pfsaver(EncryptedSerializer.from_pycryptodome_aes(key=b"1234567890123456")) as saver:
        yield saver


@asynccontextmanager
async def _pfsaver_aio() -> AsyncIterator[Any]:
    saver, where = _open()
    try:
        async with saver:
            yield saver
    finally:
        shutil.rmtree(where, ignore_errors=True)


SWAPS = {"_checkpointer_sqlite": _pfsaver, "_checkpointer_sqlite_aes": _pfsaver_aes,
         "_checkpointer_sqlite_aio": _pfsaver_aio}


def pytest_plugin_registered(plugin: Any, manager: Any) -> None:
    name = getattr(plugin, "__name__", "")
    if name == "tests.conftest":
        missing = [k for k in SWAPS if not hasattr(plugin, k)]
        if missing:
            raise pytest.UsageError(f"LangGraph's tests/conftest.py has no {missing}: update pfsaver_own.SWAPS")
        for key, fn in SWAPS.items():
            setattr(plugin, key, fn)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    keep, drop = [], []
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        saver = params.get("sync_checkpointer", params.get("async_checkpointer"))
        ours = saver is not None and str(saver).startswith("sqlite")
        (keep if ours or (saver is None and not ONLY) else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def pytest_report_header(config: pytest.Config) -> str:
    only = ", checkpointer tests only" if ONLY else ""
    return f"pfsaver_own: LangGraph's checkpointer fixtures sqlite/sqlite_aes/sqlite_aio -> PFSaver ({STORE} store{only})"


def pytest_unconfigure(config: pytest.Config) -> None:
    if _server is not None:
        _server.stop()
