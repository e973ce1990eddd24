"""agentsnap hooks for vLLM: ``repo.capture(llm)`` snapshots the KV pages the connector saved."""

from __future__ import annotations

from typing import Any

from agentsnap_core import InvalidInput, hookimpl


def _is_llm(obj: Any) -> bool:
    cls = type(obj)
    return cls.__module__.startswith("vllm.") and cls.__name__ == "LLM"


@hookimpl
def agentsnap_handles(obj: Any) -> str | None:
    if _is_llm(obj):
        from . import connector_repo

        return "vllm" if connector_repo(obj) is not None else None
    return None


@hookimpl
def agentsnap_capture_cache(obj: Any, context: dict[str, Any]) -> Any:
    if not _is_llm(obj):
        return None
    from . import connector_repo, saved_layer

    where = connector_repo(obj)
    if where is None:
        return None
    if where != context["repo"].root:
        raise InvalidInput(f"the engine's connector writes to {where}, not to {context['repo'].root}")
    return saved_layer(obj)
