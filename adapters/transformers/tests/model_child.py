"""NEW process: a base model with a fresh (no-op) LoRA adapter restores snapshot SNAP and continues decoding.

Usage: python model_child.py REPO SNAP STEPS; prints one JSON line.
"""

from __future__ import annotations

import json
import sys

import tinymodel
from agentsnap_core import Repo


def main() -> None:
    root, snap, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
    session = tinymodel.lora_session(random_lora=False)
    calls: list[int] = []
    session.model.register_forward_pre_hook(
        lambda _m, _a, kw: calls.append(int(kw["input_ids"].shape[-1])), with_kwargs=True
    )
    Repo.open(root).restore_into(session, snap)
    out = session.decode(steps)
    print("MODEL " + json.dumps({"continuation": out, "calls": calls}))


if __name__ == "__main__":
    main()
