"""vLLM (CPU build): save prompt KV in process A, load it in a fresh engine in process B, refuse a mismatch."""

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
PROMPT = ("An agent snapshot keeps the whole live state of a model session: its prompt, the pages of its "
          "key/value cache and the tokens it has produced so far, ready to resume.")


def engine(*args: str) -> dict:
    proc = subprocess.run(
        [sys.executable, str(HERE / "engine_child.py"), *args], capture_output=True, text=True, timeout=900,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), *sys.path]), "TOKENIZERS_PARALLELISM": "false"},
    )
    lines = [x for x in proc.stdout.splitlines() if x.startswith("ENGINE ")]
    assert proc.returncode == 0 and lines, proc.stderr[-4000:]
    return json.loads(lines[-1][len("ENGINE "):])


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    need_module("vllm")
    root = tmp_path_factory.mktemp("models")
    return tinyllama.build(root / "tiny"), tinyllama.build(root / "tiny-other", seed=99)


def test_fresh_engine_loads_saved_pages_and_continues_byte_identically(tmp_path, models, capsys):
    model, other = models
    repo = Repo.init(tmp_path / "repo")
    a = engine("save", str(repo.root), str(model), PROMPT)
    first, again = a["first"], a["again"]
    assert len(set(first["token_ids"])) >= 6, f"continuation too uniform to prove anything: {first['token_ids']}"
    block_tokens = (first["prompt_len"] - 1) // 32 * 32
    assert block_tokens >= 64
    assert again["num_cached_tokens"] == block_tokens  # vLLM's own prefix cache in process A (reference shape)
    assert repo.verify()["ok"]

    bad = corrupted_copy(repo, a["snapshot"], page=1)
    b = engine("load", str(repo.root), str(model), PROMPT, a["snapshot"], bad)
    good, corrupt, recompute = b["good"], b["corrupt"], b["recompute"]

    # the pages were loaded, not recomputed: the scheduler counted them as cached (prefix caching is OFF in B)
    assert good["num_cached_tokens"] == block_tokens > 0
    assert recompute["num_cached_tokens"] == 0
    # byte-identical greedy text and token ids vs the uninterrupted run in process A
    assert good["text"].encode() == first["text"].encode()
    assert good["token_ids"] == first["token_ids"]
    # logprobs bit-equal to A's run with the same computation shape (cached prefix + computed tail)
    assert good["logprobs"] == again["logprobs"]
    # control: one perturbed page must change the logits
    assert corrupt["num_cached_tokens"] == block_tokens
    assert corrupt["logprobs"][0] != good["logprobs"][0]
    with capsys.disabled():
        print(f"\n[vllm] process B loaded {good['num_cached_tokens']} of {good['prompt_len']} prompt tokens from the "
              f"snapshot; {len(good['token_ids'])} greedy tokens byte-identical to process A; top-5 logprobs bit-equal "
              f"to A's prefix-cache run: True, to A's full-prefill run: {good['logprobs'] == first['logprobs']}; "
              f"re-prefill control (0 cached) same text: {recompute['text'] == first['text']}, bit-equal logprobs: "
              f"{recompute['logprobs'] == first['logprobs']}; corrupted page changed logprobs: True, changed text: "
              f"{corrupt['text'] != first['text']}; workers' layers via collective_rpc: {a['diagnostics']}")

    refused = engine("refuse", str(repo.root), str(other), a["snapshot"])
    assert refused["error"] and "CacheMismatch" in refused["error"] and "weights" in refused["error"]
