"""The same connector on the CUDA build of vLLM (>= 0.32): save in process A, load in a fresh engine in B.

Skipped on machines without a CUDA GPU - a legitimate skip even under CI=true (this project's CI has no GPU);
it runs unchanged where ``torch.cuda.is_available()`` and ``pip install vllm`` (the CUDA build) are present.
"""

from __future__ import annotations

import pytest
import tinyllama
from agentsnap_core import Repo
from test_vllm_connector import PROMPT, engine


def _cuda() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:
        return False


@pytest.mark.gpu
@pytest.mark.skipif(not _cuda(), reason="needs a CUDA GPU and the CUDA build of vLLM (pip install 'vllm>=0.32'); "
                                        "this machine has none - a legitimate skip, also under CI=true")
def test_cuda_engine_loads_saved_pages_and_continues_byte_identically(tmp_path):
    model = tinyllama.build(tmp_path / "tiny")
    repo = Repo.init(tmp_path / "repo")
    a = engine("save", str(repo.root), str(model), PROMPT)
    b = engine("load", str(repo.root), str(model), PROMPT, a["snapshot"], a["snapshot"])
    assert b["good"]["num_cached_tokens"] > 0 and b["recompute"]["num_cached_tokens"] == 0
    assert b["good"]["token_ids"] == a["first"]["token_ids"] and b["good"]["text"] == a["first"]["text"]
    assert b["good"]["logprobs"] == a["again"]["logprobs"]
    fp = repo.read_layer(a["snapshot"], "cache")["requests"][0]["fingerprint"]
    assert fp["layout"].startswith("cuda/")  # CUDA pages never load into a CPU engine and vice versa
