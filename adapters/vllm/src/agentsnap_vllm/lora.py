"""vLLM LoRA adapters <-> the agentsnap model layer.

A ``LoRARequest`` points at a peft-format directory (``adapter_config.json`` + ``adapter_model.safetensors``).
Capture stores each tensor on its own (unchanged tensors are shared between snapshots) with the config;
restore writes the directory back and returns a ``LoRARequest`` for it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from agentsnap_core import InvalidInput, modelweights
from agentsnap_core.store import ObjectStore

CONFIG = "adapter_config.json"
WEIGHTS = "adapter_model.safetensors"


def _path(lora: Any) -> Path:
    path = Path(getattr(lora, "lora_path", None) or lora)
    if not (path / CONFIG).is_file() or not (path / WEIGHTS).is_file():
        raise InvalidInput(f"{path} is not a peft LoRA directory ({CONFIG} + {WEIGHTS} expected)")
    return path


def capture_lora(store: ObjectStore, lora: Any) -> dict[str, Any]:
    """Store a LoRA adapter (a ``LoRARequest`` or its directory); return the model-layer record."""
    path = _path(lora)
    config = json.loads((path / CONFIG).read_text())
    meta = {"adapter_config": config, "lora_name": getattr(lora, "lora_name", path.name)}
    return modelweights.write_tensors(store, modelweights.read_safetensors(path / WEIGHTS), kind="lora", meta=meta)


def restore_lora(store: ObjectStore, record: dict[str, Any], target: str | os.PathLike[str], lora_int_id: int = 1) -> Any:
    """Write the adapter into the empty or new directory ``target``; return a ``LoRARequest`` for it."""
    from vllm.lora.request import LoRARequest

    modelweights.check_record(record)
    config = record.get("meta", {}).get("adapter_config")
    if not isinstance(config, dict):
        raise InvalidInput("the model layer has no adapter_config; it was not captured from a LoRA directory")
    out = Path(target)
    if out.exists() and any(out.iterdir()):
        raise InvalidInput(f"{out} is not empty; restore a LoRA adapter into a new directory")
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / (WEIGHTS + ".partial")
    with open(tmp, "wb") as f:
        modelweights.write_safetensors(store, record, f)
    tmp.replace(out / WEIGHTS)
    (out / CONFIG).write_text(json.dumps(config, indent=2, sort_keys=True))
    return LoRARequest(str(record["meta"].get("lora_name") or out.name), lora_int_id, str(out))
