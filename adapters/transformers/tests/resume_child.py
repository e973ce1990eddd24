"""Run in a NEW process: restore snapshots into fresh sessions and continue greedy decoding.

Usage: python resume_child.py REPO STEPS SNAPSHOT_ID [SNAPSHOT_ID ...]
Prints one JSON line per snapshot with the continuation, its logits and the model's forward-call lengths
(counted by a forward pre-hook on the model itself, so a hidden re-prefill would show).
"""

from __future__ import annotations

import json
import sys

import tinymodel
from agentsnap_core import Repo


def main() -> None:
    root, steps, snaps = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    model = tinymodel.model()
    calls: list[int] = []
    model.register_forward_pre_hook(lambda _m, _a, kw: calls.append(int(kw["input_ids"].shape[-1])), with_kwargs=True)
    repo = Repo.open(root)
    for snap in snaps:
        session = tinymodel.session()
        calls.clear()
        repo.restore_into(session, snap)
        restored_len = session.cache.get_seq_length()
        restore_calls = list(calls)
        logits = [session.last_logits.numpy().tobytes().hex()]
        out = []
        for _ in range(steps):
            out += session.decode(1)
            logits.append(session.last_logits.numpy().tobytes().hex())
        print("RESUMED " + json.dumps({"snapshot": snap, "restored_len": restored_len, "restore_calls": restore_calls,
                                       "decode_calls": calls[len(restore_calls):], "tokens": session.tokens,
                                       "continuation": out, "logits": logits}))
    # re-prefill control: recompute the whole prefix in one forward call, then continue the same way
    base = repo.read_layer(snaps[0], "cache")["tokens"]
    session = tinymodel.session()
    calls.clear()
    session.prefill(base)
    logits = [session.last_logits.numpy().tobytes().hex()]
    out = []
    for _ in range(steps):
        out += session.decode(1)
        logits.append(session.last_logits.numpy().tobytes().hex())
    print("REPREFILL " + json.dumps({"calls": list(calls), "continuation": out, "logits": logits}))


if __name__ == "__main__":
    main()
