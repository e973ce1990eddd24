"""One vLLM engine per process role (run by the tests; prints one JSON line).

save REPO MODEL PROMPT       : generate twice (second run hits vLLM's own prefix cache), snapshot the saved pages
load REPO MODEL PROMPT S1 S2 : fresh engine, prefix caching off: a request per snapshot (S1, S2) + one without
refuse REPO MODEL SNAPSHOT   : start an engine configured to load SNAPSHOT; print the error it raises
"""

from __future__ import annotations

import json
import os
import sys

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # engine core in this process (collective_rpc callables)

MAX_TOKENS = 24


def engine(model: str, kv_config, prefix_caching: bool):
    from vllm import LLM

    return LLM(model=model, dtype="float32", block_size=32, max_model_len=512, enforce_eager=True, seed=0,
               enable_prefix_caching=prefix_caching, kv_transfer_config=kv_config, gpu_memory_utilization=0.15)  # CPU: share of host RAM for KV


def run(llm, prompt: str, extra_args: dict | None = None) -> dict:
    from vllm import SamplingParams

    params = SamplingParams(temperature=0, max_tokens=MAX_TOKENS, ignore_eos=True, logprobs=5, extra_args=extra_args)
    out = llm.generate([prompt], params, use_tqdm=False)[0]
    comp = out.outputs[0]
    logprobs = [{str(k): v.logprob for k, v in sorted(step.items())} for step in comp.logprobs]
    return {"text": comp.text, "token_ids": list(comp.token_ids), "num_cached_tokens": out.num_cached_tokens,
            "prompt_len": len(out.prompt_token_ids), "logprobs": logprobs}


def main() -> None:
    from agentsnap_core import Repo
    from agentsnap_vllm import kv_transfer_config, snapshot, snapshot_params

    role, repo_path, model = sys.argv[1], sys.argv[2], sys.argv[3]
    result: dict = {"role": role}
    if role == "save":
        prompt = sys.argv[4]
        llm = engine(model, kv_transfer_config(repo_path, save=True), prefix_caching=True)
        result["first"] = run(llm, prompt)
        result["again"] = run(llm, prompt)  # vLLM's own prefix cache: the same computation shape as a load
        snap = snapshot(llm, Repo.open(repo_path), "vllm prompt KV")
        result["snapshot"] = snap.id
        result["diagnostics"] = llm.collective_rpc(lambda worker: sorted(
            __import__("vllm.distributed.kv_transfer", fromlist=["x"]).get_kv_transfer_group()._layers()))
    elif role == "load":
        prompt, good, bad = sys.argv[4], sys.argv[5], sys.argv[6]
        llm = engine(model, kv_transfer_config(repo_path, save=False), prefix_caching=False)
        result["good"] = run(llm, prompt, snapshot_params(good))
        result["corrupt"] = run(llm, prompt, snapshot_params(bad))
        result["recompute"] = run(llm, prompt)
    elif role == "refuse":
        try:
            engine(model, kv_transfer_config(repo_path, save=False, load=sys.argv[4]), prefix_caching=False)
            result["error"] = None
        except Exception as exc:  # the engine start must fail with the connector's CacheMismatch
            chain, e = [], exc
            while e is not None:
                chain.append(f"{type(e).__name__}: {e}")
                e = e.__cause__ or e.__context__
            result["error"] = " | ".join(chain)
    print("ENGINE " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
