"""Run in a NEW process: restore a snapshot into fresh SGLang cache objects, then continue decoding from them.

Usage: python restore_child.py REPO STEPS SNAPSHOT_ID [SNAPSHOT_ID ...]; prints one JSON line per snapshot.
"""

from __future__ import annotations

import json
import sys

import sglang_cpu
from agentsnap_core import Repo


def continue_from(cache, tokens, steps, calls):
    """What a server does with a prefix hit: reuse the cached KV, compute only the last prompt token."""
    import torch

    n, dyn = sglang_cpu.dynamic_cache_from(cache, tokens)
    dyn.crop(-1)  # keep the KV of every prompt token but the last
    with torch.no_grad():
        first = sglang_cpu.model()(input_ids=torch.tensor([tokens[-1:]]), past_key_values=dyn, use_cache=True)
    out, logits = sglang_cpu.decode(first.past_key_values, first.logits[0, -1].clone(), steps)
    return n, out, [x.numpy().tobytes().hex() for x in logits]


def main() -> None:
    root, steps, snaps = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    model = sglang_cpu.model()
    calls: list[int] = []
    model.register_forward_pre_hook(lambda _m, _a, kw: calls.append(int(kw["input_ids"].shape[-1])), with_kwargs=True)
    repo = Repo.open(root)
    for snap in snaps:
        cache = sglang_cpu.make_cache()
        repo.restore_into(cache, snap)
        seqs = cache.sequences()
        digests = sglang_cpu.digests(cache)
        calls.clear()
        n, out, logits = continue_from(cache, seqs[0], steps, calls)
        print("RESTORED " + json.dumps({"snapshot": snap, "sequences": seqs, "digests": digests, "matched": n,
                                        "calls": list(calls), "continuation": out, "logits": logits}))


if __name__ == "__main__":
    main()
