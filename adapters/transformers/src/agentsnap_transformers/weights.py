"""peft adapters <-> the agentsnap model layer (tensors stored one by one, exportable as safetensors)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import torch
from agentsnap_core import InvalidInput
from agentsnap_core.layers import modelweights
from agentsnap_core.stores.base import ObjectStore

from .kv import tensor_bytes

TO_SAFETENSORS = {
    torch.float64: "F64", torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
    torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8", torch.uint8: "U8", torch.bool: "BOOL",
}  # fmt: skip
FROM_SAFETENSORS = {v: k for k, v in TO_SAFETENSORS.items()}
#: adapter settings that must agree for saved tensors to mean the same thing
CONFIG_KEYS = ("peft_type", "r", "lora_alpha", "target_modules", "use_dora", "use_rslora", "bias", "modules_to_save")


def is_peft(model: Any) -> bool:
    return isinstance(getattr(model, "peft_config", None), dict) and hasattr(model, "active_adapter")


def _plain(value: Any) -> Any:
    return json.loads(json.dumps(value, default=lambda o: sorted(o) if isinstance(o, (set, frozenset)) else str(o)))


def _config(model: Any, name: str) -> dict[str, Any]:
    conf = _plain(model.peft_config[name].to_dict())
    return {k: conf.get(k) for k in CONFIG_KEYS}


def capture_adapter(store: ObjectStore, model: Any) -> dict[str, Any]:
    """Store the active peft adapter's tensors; return the model-layer record."""
    import peft
    from peft import get_peft_model_state_dict

    name = model.active_adapter
    state = get_peft_model_state_dict(model, adapter_name=name)
    tensors = []
    for key, t in sorted(state.items()):
        if t.dtype not in TO_SAFETENSORS:
            raise InvalidInput(f"adapter tensor {key!r} has unsupported dtype {t.dtype}")
        tensors.append((key, TO_SAFETENSORS[t.dtype], list(t.shape), tensor_bytes(t)))
    meta = {"adapter_name": name, "config": _config(model, name), "peft": peft.__version__}
    return modelweights.write_tensors(store, tensors, kind="lora", meta=meta)


def adapter_state(store: ObjectStore, record: Mapping[str, Any]) -> dict[str, torch.Tensor]:
    """The record's tensors as a state dict (for ``set_peft_model_state_dict``)."""
    out = {}
    for key, dtype, shape, data in modelweights.iter_tensors(store, record):
        if dtype not in FROM_SAFETENSORS:
            raise InvalidInput(f"adapter tensor {key!r} has unsupported dtype {dtype}")
        out[key] = torch.frombuffer(bytearray(data), dtype=FROM_SAFETENSORS[dtype]).reshape(shape)
    return out


def restore_adapter(store: ObjectStore, model: Any, record: Mapping[str, Any]) -> None:
    """Load a captured adapter into ``model`` (a peft model with the same adapter config)."""
    from peft import get_peft_model_state_dict, set_peft_model_state_dict

    modelweights.check_record(record)
    name = record["meta"].get("adapter_name", "default")
    if not is_peft(model) or name not in model.peft_config:
        raise InvalidInput(f"the model has no peft adapter {name!r}; wrap it with peft.get_peft_model first")
    want, have = record["meta"].get("config", {}), _config(model, name)
    diffs = {k: (want.get(k), have.get(k)) for k in CONFIG_KEYS if want.get(k) != have.get(k)}
    if diffs:
        raise InvalidInput(f"adapter {name!r} is configured differently from the snapshot: {diffs}")
    state = adapter_state(store, record)  # read and check everything before touching the model
    have_state = get_peft_model_state_dict(model, adapter_name=name)
    unexpected = sorted(set(state) - set(have_state))
    if unexpected:
        raise InvalidInput(f"adapter tensors the model does not have: {unexpected[:5]}")
    missing = sorted(set(have_state) - set(state))
    if missing:
        raise InvalidInput(f"the snapshot's adapter {name!r} lacks tensors the model has: {missing[:5]}")
    shapes = {k: (list(t.shape), list(have_state[k].shape)) for k, t in state.items()
              if t.shape != have_state[k].shape}
    if shapes:
        raise InvalidInput(f"adapter tensors shaped differently (snapshot, model): {dict(list(shapes.items())[:5])}")
    result = set_peft_model_state_dict(model, state, adapter_name=name)
    unexpected = getattr(result, "unexpected_keys", [])
    if unexpected:
        raise InvalidInput(f"adapter tensors the model does not have: {unexpected[:5]}")
