"""agentsnap hooks for transformers: a :class:`KVSession`'s cache, state and model layers.

This module is loaded in every process that uses agentsnap (entry-point discovery), so it imports
neither torch nor transformers: a KVSession can only exist once ``agentsnap_transformers.session``
has been imported, and the hooks import the heavy modules when they actually run.
"""

from __future__ import annotations

import sys
from typing import Any

from agentsnap_core import hookimpl
from agentsnap_core.layers import kvcache


def _is_session(obj: Any) -> bool:
    mod = sys.modules.get("agentsnap_transformers.session")
    return mod is not None and isinstance(obj, mod.KVSession)


@hookimpl
def agentsnap_handles(obj: Any) -> str | None:
    return "transformers" if _is_session(obj) else None


@hookimpl
def agentsnap_capture_cache(obj: Any, context: dict[str, Any]) -> Any:
    if not _is_session(obj):
        return None
    from . import kv

    record = kv.write_cache(
        context["repo"].objects, obj.cache, obj.tokens, obj.fingerprint(), page_size=obj.page_size, previous=obj.base_record
    )
    obj.base_record = record
    return record


@hookimpl
def agentsnap_restore_cache(obj: Any, cache: Any, context: dict[str, Any]) -> bool | None:
    if not _is_session(obj):
        return None
    from . import kv

    restored = kv.read_cache(context["repo"].objects, cache, obj.fingerprint(), config=obj.model.config, device=obj.device)
    obj.cache = restored
    obj.tokens = list(cache["tokens"])
    obj.base_record = cache
    return True


@hookimpl
def agentsnap_capture_state(obj: Any, context: dict[str, Any]) -> Any:
    if not _is_session(obj):
        return None
    from . import kv

    logits = None if obj.last_logits is None else bytes(kv.tensor_bytes(obj.last_logits))
    return {"last_logits": logits, "page_size": obj.page_size}


@hookimpl
def agentsnap_restore_state(obj: Any, state: Any, context: dict[str, Any]) -> bool | None:
    if not _is_session(obj):
        return None
    import torch

    raw = state.get("last_logits")
    obj.last_logits = None if raw is None else torch.frombuffer(bytearray(raw), dtype=torch.float32).clone()
    obj.page_size = int(state.get("page_size", obj.page_size))
    obj.forward_lengths = []
    return True


@hookimpl(wrapper=True)
def agentsnap_restore(obj: Any, layers: dict[str, Any], context: dict[str, Any]) -> Any:
    """Refuse a mismatched cache before any layer is applied; on any failure leave the session as it was."""
    if not _is_session(obj):
        return (yield)
    from . import kv, weights

    saved = (obj.cache, obj.tokens, obj.last_logits, obj.base_record, obj.page_size, obj.forward_lengths)
    fingerprint = obj._fingerprint
    adapter = None
    try:
        if layers.get("model") is not None and weights.is_peft(obj.model):
            from peft import get_peft_model_state_dict

            adapter = {k: v.clone() for k, v in get_peft_model_state_dict(obj.model).items()}
            # weights first: the cache fingerprint covers them. Applied here, so the per-layer hook skips it.
            # Inside the try: an adapter refused (or failing) half-way is put back like everything else.
            obj._fingerprint = None
            weights.restore_adapter(context["repo"].objects, obj.model, layers.pop("model"))
        if layers.get("cache") is not None:
            kvcache.check_fingerprint(layers["cache"], kv.expected_fingerprint(layers["cache"], obj.fingerprint()))
        return (yield)
    except BaseException:
        obj.cache, obj.tokens, obj.last_logits, obj.base_record, obj.page_size, obj.forward_lengths = saved
        if adapter is not None:
            from peft import set_peft_model_state_dict

            set_peft_model_state_dict(obj.model, adapter)
        obj._fingerprint = fingerprint
        raise


@hookimpl
def agentsnap_capture_model(obj: Any, context: dict[str, Any]) -> Any:
    if not _is_session(obj):
        return None
    from . import weights

    if not weights.is_peft(obj.model):
        return None
    return weights.capture_adapter(context["repo"].objects, obj.model)


@hookimpl
def agentsnap_restore_model(obj: Any, model: Any, context: dict[str, Any]) -> bool | None:
    if not _is_session(obj):
        return None
    from . import weights

    weights.restore_adapter(context["repo"].objects, obj.model, model)
    obj._fingerprint = None
    return True
