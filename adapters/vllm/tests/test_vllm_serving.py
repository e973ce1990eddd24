"""vLLM (CPU build) under real serving conditions: preemption, a corrupt page, chunked prefill.

Every engine runs in its own process (``scenario_child.py``); greedy outputs are compared token for token with an
engine that has no connector at all.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import tinyllama
from agentsnap_core import Repo
from agentsnap_core.testing.kv import corrupted_copy
from agentsnap_core.testing.servers import need_module

HERE = Path(__file__).parent
TOPICS = ["a failing database migration", "the garden behind the old mill", "a compiler's register allocator",
          "the tides of a northern harbour"]
PROMPTS = [f"Agent {i} keeps notes about {t}: every step, every tool call and every answer is written down so that "
           f"a fresh process can pick the session up where it stopped, without prefilling it again. Topic {i}."
           for i, t in enumerate(TOPICS)]
LONG_PROMPT = " ".join(f"Line {i:04d}: the agent checked item {i * 7 % 101} and wrote its result." for i in range(27))


def scenario(tmp_path: Path, spec: dict) -> dict:
    path = tmp_path / f"scenario-{os.urandom(4).hex()}.json"
    path.write_text(json.dumps(spec))
    proc = subprocess.run(
        [sys.executable, str(HERE / "scenario_child.py"), str(path)], capture_output=True, text=True, timeout=900,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), *sys.path]), "TOKENIZERS_PARALLELISM": "false"},
    )
    lines = [x for x in proc.stdout.splitlines() if x.startswith("SCENARIO ")]
    assert proc.returncode == 0 and lines, proc.stderr[-4000:]
    return json.loads(lines[-1][len("SCENARIO "):])


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A snapshot of the KV of PROMPTS' whole turns (prompt + 24 decoded tokens), saved by one engine (default KV
    cache, no preemption)."""
    root, model, repo = tinyllama.model_and_repo(tmp_path_factory, "serving")
    out = scenario(root, {"model": str(model), "connector": {"repo": str(repo.root), "save": True}, "snapshot": True,
                          "batches": [[{"prompt": p, "max_tokens": 24} for p in PROMPTS]]})
    return model, repo, out


def test_preempted_requests_reload_their_pages_and_match_an_engine_without_connector(tmp_path, saved):
    model, repo, out = saved
    snap = out["snapshot"]
    # a KV cache of 20 blocks for 4 requests growing to ~11 blocks each: vLLM must preempt and resume
    engine = {"num_gpu_blocks_override": 20, "max_num_seqs": 4}
    batch = [{"prompt": p, "max_tokens": 160} for p in PROMPTS]
    plain = scenario(tmp_path, {"model": str(model), "engine": engine, "batches": [batch]})
    loaded = scenario(tmp_path, {"model": str(model), "engine": engine,
                                 "connector": {"repo": str(repo.root), "save": False},
                                 "batches": [[{**r, "snapshot": snap} for r in batch]]})
    assert loaded["preemptions"] > 0, "the scenario did not preempt; it proves nothing"
    got, want = loaded["batches"][0], plain["batches"][0]
    assert all(r["num_cached_tokens"] > 0 for r in got)  # pages came from the snapshot
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        assert g["token_ids"] == w["token_ids"], f"request {i} diverged after preemption"
    assert loaded["load_failures"] == []


def truncated(raw: bytes) -> bytes:
    """A page stored truncated: unreadable as KV."""
    return raw[: len(raw) // 2]


def test_corrupt_page_is_recomputed_and_the_engine_keeps_serving(tmp_path, saved):
    model, repo, out = saved
    bad = corrupted_copy(repo, out["snapshot"], page=2, change=truncated)
    reference = out["batches"][0][0]
    result = scenario(tmp_path, {"model": str(model), "connector": {"repo": str(repo.root), "save": False},
                                 "batches": [[{"prompt": PROMPTS[0], "snapshot": bad}],
                                             [{"prompt": PROMPTS[0], "snapshot": out["snapshot"]}]]})
    corrupt, healthy = result["batches"][0][0], result["batches"][1][0]
    assert len(result["load_failures"]) == 1 and "page 2" in result["load_failures"][0]
    assert corrupt["token_ids"] == reference["token_ids"]  # blocks 2.. recomputed: still the right text
    assert healthy["token_ids"] == reference["token_ids"]  # the same engine goes on serving, loading pages
    assert healthy["num_cached_tokens"] == (healthy["prompt_len"] - 1) // 32 * 32 > 0


def test_chunked_prefill_is_saved_and_restored_in_a_fresh_engine(tmp_path):
    need_module("vllm")
    model = tinyllama.build(tmp_path / "tiny", max_positions=2048)
    repo = Repo.init(tmp_path / "repo")
    engine = {"max_model_len": 2048, "max_num_batched_tokens": 512, "enable_chunked_prefill": True}
    save = scenario(tmp_path, {"model": str(model), "engine": engine, "snapshot": True,
                               "connector": {"repo": str(repo.root), "save": True},
                               "batches": [[{"prompt": LONG_PROMPT}]]})
    first = save["batches"][0][0]
    assert first["prompt_len"] > 1500  # a prefill in 3+ chunks of 512
    record = repo.read_layer(save["snapshot"], "cache")["requests"]
    # one record: the prompt saved when its last chunk ran, replaced by the whole turn when the request finished
    assert len(record) == 1 and len(record[0]["tokens"]) == (first["prompt_len"] + len(first["token_ids"]) - 1) // 32 * 32
    load = scenario(tmp_path, {"model": str(model), "engine": engine, "connector": {"repo": str(repo.root)},
                               "batches": [[{"prompt": LONG_PROMPT, "snapshot": save["snapshot"]}]]})
    got = load["batches"][0][0]
    assert got["num_cached_tokens"] == (first["prompt_len"] - 1) // 32 * 32
    assert got["token_ids"] == first["token_ids"]


def test_finished_turn_prompt_and_answer_are_restored_in_a_fresh_engine(tmp_path, saved):
    """A multi-turn agent: turn 2's prompt is turn 1's prompt + its answer + more. The answer's KV (decoded tokens,
    full blocks) is saved when turn 1 finishes, so a fresh engine loads the whole turn-1 context, not only its
    prompt, and its output equals the same request computed without loading."""
    model, repo, out = saved
    first = out["batches"][0][0]
    context = first["prompt_ids"] + first["token_ids"]
    whole = (len(context) - 1) // 32 * 32  # the last sampled token has no KV yet
    assert whole > len(first["prompt_ids"]) // 32 * 32  # the answer fills a block of its own
    records = repo.read_layer(out["snapshot"], "cache")["requests"]
    assert sorted(len(r["tokens"]) for r in records) == [whole] * len(PROMPTS)  # one record per turn, whole context
    assert any(r["tokens"] == context[:whole] for r in records)
    assert out["save_failures"] == [] and out["totals"]["pages_saved"] == len(PROMPTS) * whole // 32  # written once

    turn2 = context + first["prompt_ids"][:20]  # the user's next message
    result = scenario(tmp_path, {"model": str(model), "connector": {"repo": str(repo.root), "save": False},
                                 "batches": [[{"prompt_ids": turn2, "snapshot": out["snapshot"]}],
                                             [{"prompt_ids": turn2}]]})  # the same request, computed
    loaded, computed = result["batches"][0][0], result["batches"][1][0]
    assert loaded["num_cached_tokens"] == whole and computed["num_cached_tokens"] == 0
    assert loaded["token_ids"] == computed["token_ids"]
    assert result["load_failures"] == []


def test_lora_request_does_not_load_base_model_pages(tmp_path, saved):
    """An engine serving a LoRA adapter: the base-model request loads its pages from the snapshot, the LoRA request
    with the same prompt and the same snapshot loads nothing (its pages are keyed by the adapter) and its output is
    the LoRA output computed from scratch - never the base model's KV under the adapter."""
    from test_lora_layer import adapter_dir

    model, repo, out = saved
    adapter, _ = adapter_dir(tmp_path / "adapter", scale=4.0)
    lora = {"name": "tone", "id": 1, "path": str(adapter)}
    snap = out["snapshot"]
    result = scenario(tmp_path, {"model": str(model), "engine": {"enable_lora": True, "max_lora_rank": 8, "max_loras": 1},
                                 "connector": {"repo": str(repo.root), "save": False},
                                 "batches": [[{"prompt": PROMPTS[1], "snapshot": snap}],
                                             [{"prompt": PROMPTS[1], "snapshot": snap, "lora": lora}],
                                             [{"prompt": PROMPTS[1], "lora": lora}]]})
    base, lora_loaded, lora_computed = (b[0] for b in result["batches"])
    assert base["num_cached_tokens"] == (base["prompt_len"] - 1) // 32 * 32 > 0  # the snapshot does match the prompt
    assert base["token_ids"] == out["batches"][0][1]["token_ids"]
    assert lora_loaded["num_cached_tokens"] == 0  # not one base page under the adapter
    assert lora_loaded["token_ids"] == lora_computed["token_ids"]
    assert lora_computed["token_ids"] != base["token_ids"]  # the adapter changes the text: the check can fail
    assert result["load_failures"] == []
