"""Run one vLLM engine through a JSON scenario (run by the tests; prints one JSON line ``SCENARIO {...}``).

The scenario: ``{"model": dir, "engine": {LLM kwargs}, "connector": null | {"repo", "save", "load"},
"batches": [[{"prompt": str | "prompt_ids": [int], "snapshot": id | null, "max_tokens": n,
"lora": null | {"name", "id", "path"}}, ...], ...],
"snapshot": bool}``.
Each batch is one ``llm.generate`` call (its requests run together); batches run in order on the same engine.
"""

from __future__ import annotations

import json
import os
import sys

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # engine core in this process (collective_rpc callables)


def _connector_state(worker):
    from vllm.distributed.kv_transfer import get_kv_transfer_group

    conn = get_kv_transfer_group()
    conn.flush()
    return {"load_failures": list(conn.load_failures), "save_failures": list(conn.save_failures),
            "totals": dict(conn.totals.data)}


def main() -> None:
    from agentsnap_core import Repo
    from agentsnap_vllm import kv_transfer_config, snapshot, snapshot_params
    from vllm import LLM, SamplingParams
    from vllm.lora.request import LoRARequest

    spec = json.loads(open(sys.argv[1]).read())
    conn = spec.get("connector")
    kv = kv_transfer_config(conn["repo"], save=conn.get("save", False), load=conn.get("load")) if conn else None
    kwargs = {"dtype": "float32", "block_size": 32, "max_model_len": 512, "enforce_eager": True, "seed": 0,
              "enable_prefix_caching": False, "gpu_memory_utilization": 0.15, "disable_log_stats": False,
              **spec.get("engine", {})}
    llm = LLM(model=spec["model"], kv_transfer_config=kv, **kwargs)
    result: dict = {"batches": []}
    for batch in spec["batches"]:
        params = [SamplingParams(temperature=0, max_tokens=r.get("max_tokens", 24), ignore_eos=True,
                                 extra_args=snapshot_params(r["snapshot"]) if r.get("snapshot") else None)
                  for r in batch]
        prompts = [{"prompt_token_ids": r["prompt_ids"]} if "prompt_ids" in r else r["prompt"] for r in batch]
        loras = [LoRARequest(r["lora"]["name"], r["lora"]["id"], r["lora"]["path"]) if r.get("lora") else None for r in batch]
        outs = llm.generate(prompts, params, use_tqdm=False, lora_request=loras if any(loras) else None)
        result["batches"].append([{"token_ids": list(o.outputs[0].token_ids), "text": o.outputs[0].text,
                                   "num_cached_tokens": o.num_cached_tokens, "prompt_len": len(o.prompt_token_ids),
                                   "prompt_ids": list(o.prompt_token_ids)}
                                  for o in outs])
    result["preemptions"] = sum(getattr(m, "value", 0) for m in llm.get_metrics() if m.name == "vllm:num_preemptions")
    if conn:
        if spec.get("snapshot"):
            result["snapshot"] = snapshot(llm, Repo.open(conn["repo"]), "vllm scenario").id
        states = llm.collective_rpc(_connector_state)
        result["load_failures"] = [f for w in states for f in w["load_failures"]]
        result["save_failures"] = [f for w in states for f in w["save_failures"]]
        result["totals"] = states[0]["totals"]
    print("SCENARIO " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
