"""Snapshot LangChain runnables and chains through langchain-core's own ``dumpd`` / ``load``.

``capture_runnable(repo, chain, "msg")`` stores ``langchain_core.load.dumpd(chain)`` as the snapshot's
``state`` layer (``{"langchain": doc}``). Secrets (``lc_secrets``, e.g. ``api_key``) are written by
``dumpd`` as ``{"lc": 1, "type": "secret", "id": ["ENV_NAME"]}`` markers, never their values, so no
store object holds them. ``restore_runnable(repo, spec, secrets_map={...})`` rebuilds the runnable with
``langchain_core.load.load``, restricted to langchain-core classes (``allowed_objects="core"``) unless
you allow more; nothing is ever unpickled.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from typing import Any

from agentsnap_core.errors import AgentSnapError, InvalidInput

STATE_KEY = "langchain"


def _walk(doc: Any) -> Iterator[dict[str, Any]]:
    if isinstance(doc, dict):
        if doc.get("lc") == 1 and "type" in doc:
            yield doc
        for v in doc.values():
            yield from _walk(v)
    elif isinstance(doc, list):
        for v in doc:
            yield from _walk(v)


def secret_names(doc: Any) -> list[str]:
    """The secret names (``lc_secrets`` values) a ``dumpd`` document needs on load, sorted."""
    return sorted({n["id"][0] for n in _walk(doc) if n["type"] == "secret" and n.get("id")})


def dump_runnable(runnable: Any) -> dict[str, Any]:
    """``dumpd(runnable)``; raises ``InvalidInput`` naming the class when any part is not serializable."""
    from langchain_core.load import dumpd
    from langchain_core.load.serializable import Serializable

    if not isinstance(runnable, Serializable) or not runnable.is_lc_serializable():
        raise InvalidInput(f"{type(runnable).__name__} is not LangChain-serializable (is_lc_serializable() is False)")
    doc = dumpd(runnable)
    bad = [n for n in _walk(doc) if n["type"] == "not_implemented"]
    if bad:
        names = ", ".join(sorted({".".join(map(str, n.get("id") or ["?"])) for n in bad}))
        raise InvalidInput(f"{type(runnable).__name__} contains parts LangChain cannot serialize: {names}")
    return doc


def capture_runnable(repo: Any, runnable: Any, message: str, **kwargs: Any) -> Any:
    """Snapshot ``runnable`` (``state`` layer ``{"langchain": dumpd(runnable)}``); returns the ``Snapshot``.

    Nothing is written when the runnable is not serializable. ``kwargs`` go to ``repo.snapshot``
    (e.g. ``agent=``, ``meta=``, ``ref=``).
    """
    doc = dump_runnable(runnable)
    kwargs.setdefault("agent", "langchain")
    meta = {**kwargs.pop("meta", {}), "langchain_secrets": secret_names(doc)}
    return repo.snapshot(message, layers={"state": {STATE_KEY: doc}}, capture_world=False, meta=meta, **kwargs)


def _class_mappings(classes: Iterable[type]) -> tuple[dict[tuple[str, ...], tuple[str, ...]], list[str]]:
    mappings: dict[tuple[str, ...], tuple[str, ...]] = {}
    namespaces: list[str] = []
    for cls in classes:
        lc_id = tuple(cls.lc_id())
        mappings[lc_id] = (*cls.__module__.split("."), cls.__name__)
        namespaces += [lc_id[0], cls.__module__.split(".")[0]]
    return mappings, namespaces


def load_runnable(
    doc: Any,
    secrets_map: dict[str, str] | None = None,
    valid_namespaces: list[str] | None = None,
    *,
    classes: Iterable[type] = (),
    allowed_objects: Any = "core",
    secrets_from_env: bool = False,
) -> Any:
    """Rebuild a runnable from a ``dumpd`` document with ``langchain_core.load.load``.

    Args:
        doc: the ``dumpd`` document.
        secrets_map: secret name -> value for every secret the document names (see ``secret_names``).
        valid_namespaces: extra top-level modules ``load`` may import from (LangChain's own option).
        classes: your own ``Serializable`` classes to allow besides langchain-core's.
        allowed_objects: LangChain's allowlist (``"core"`` by default, ``"all"`` for partner packages).
        secrets_from_env: let missing secrets come from environment variables (LangChain's option).
    """
    from langchain_core.load import load

    secrets_map = dict(secrets_map or {})

    missing = [s for s in secret_names(doc) if s not in secrets_map and not (secrets_from_env and os.environ.get(s))]
    if missing:
        raise InvalidInput(f"the runnable needs secrets that are not stored: pass secrets_map={{{missing[0]!r}: ...}} "
                           f"(missing: {', '.join(missing)})")
    mappings, namespaces = _class_mappings(classes)
    try:
        return load(
            doc,
            allowed_objects=allowed_objects,
            secrets_map=secrets_map,
            valid_namespaces=[*(valid_namespaces or []), *namespaces] or None,
            secrets_from_env=secrets_from_env,
            additional_import_mappings=mappings or None,
        )
    except (ValueError, NotImplementedError, ImportError) as e:
        raise AgentSnapError(f"LangChain refused to load the runnable: {e}") from e


def restore_runnable(
    repo: Any,
    spec: str,
    secrets_map: dict[str, str] | None = None,
    valid_namespaces: list[str] | None = None,
    **kwargs: Any,
) -> Any:
    """The runnable captured in snapshot ``spec``; ``kwargs`` as for ``load_runnable``."""
    state = repo.read_layer(repo.get(spec), "state")
    if not isinstance(state, dict) or STATE_KEY not in state:
        raise InvalidInput(f"snapshot {spec} holds no LangChain runnable (state layer without {STATE_KEY!r})")
    return load_runnable(state[STATE_KEY], secrets_map, valid_namespaces, **kwargs)
