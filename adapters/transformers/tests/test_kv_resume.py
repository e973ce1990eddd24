"""transformers: prefill + decode -> snapshot -> NEW PROCESS restore -> continued greedy decode, bit for bit."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import tinymodel
import torch
from agentsnap_core import Repo
from agentsnap_core.layers import kvcache
from agentsnap_core.layers.kvcache import CacheMismatch
from agentsnap_core.testing.kv import corrupted_copy

HERE = Path(__file__).parent
DECODED_BEFORE, CONTINUE = 6, 12


def text(tokens: list[int]) -> bytes:
    """The tiny model's 'tokenizer' is byte-level: token id = byte."""
    return bytes(tokens)


def logits_of(hexes: list[str]) -> list[torch.Tensor]:
    return [torch.frombuffer(bytearray.fromhex(h), dtype=torch.float32) for h in hexes]


def run_child(root: Path, *snaps: str) -> tuple[list[dict], dict]:
    proc = subprocess.run(
        [sys.executable, str(HERE / "resume_child.py"), str(root), str(CONTINUE), *snaps],
        capture_output=True, text=True, timeout=600,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), *sys.path])},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    resumed = [json.loads(x[len("RESUMED "):]) for x in proc.stdout.splitlines() if x.startswith("RESUMED ")]
    control = [json.loads(x[len("REPREFILL "):]) for x in proc.stdout.splitlines() if x.startswith("REPREFILL ")][0]
    return resumed, control


def test_new_process_restore_continues_bit_exactly_without_recomputing_the_prompt(tmp_path, capsys):
    repo = Repo.init(tmp_path / "repo")
    s = tinymodel.session()
    s.prefill(tinymodel.PROMPT)
    s.decode(DECODED_BEFORE)
    snap = repo.capture(s, "after prefill + decode")
    at_snapshot = list(s.tokens)

    straight_logits = [s.last_logits.clone()]
    straight = []
    for _ in range(CONTINUE):
        straight += s.decode(1)
        straight_logits.append(s.last_logits.clone())
    assert len(set(straight)) >= 4, f"continuation too uniform to prove anything: {straight}"

    bad = corrupted_copy(repo, snap.id, page=1)
    (resumed, corrupt), control = run_child(repo.root, snap.id, bad)

    # same text and token ids as the uninterrupted run
    assert resumed["continuation"] == straight
    assert text(resumed["tokens"]) == text(at_snapshot + straight)
    # the prompt was NOT recomputed: restoring ran no forward call, decoding ran one token per call
    assert resumed["restored_len"] == len(at_snapshot)
    assert resumed["restore_calls"] == []
    assert resumed["decode_calls"] == [1] * CONTINUE
    # logits bit-equal at every step (same engine config in both processes)
    got = logits_of(resumed["logits"])
    assert all(torch.equal(a, b) for a, b in zip(got, straight_logits, strict=True))
    # control: one perturbed KV page must change the logits computed over it
    bad_logits = logits_of(corrupt["logits"])
    assert torch.equal(bad_logits[0], straight_logits[0])  # the stored next-token logits are not KV-derived
    assert not torch.equal(bad_logits[1], straight_logits[1])
    # re-prefill control, reported: one long forward over the whole prefix instead of none
    assert control["calls"][0] == len(at_snapshot)
    same_bits = all(torch.equal(a, b) for a, b in zip(logits_of(control["logits"]), straight_logits, strict=True))
    with capsys.disabled():
        print(f"\n[transformers] restored {len(at_snapshot)} tokens with 0 forward calls; continuation of {CONTINUE} "
              f"tokens identical, logits bit-equal at all {CONTINUE + 1} steps. Re-prefill control: one forward of "
              f"{control['calls'][0]} tokens, same tokens: {control['continuation'] == straight}, logits bit-equal: "
              f"{same_bits}. Corrupted page 1: logits changed, continuation changed: {corrupt['continuation'] != straight}")


def test_fork_gives_independent_branches_that_share_prefix_pages(tmp_path):
    repo = Repo.init(tmp_path / "repo")
    s = tinymodel.session()
    s.prefill(tinymodel.PROMPT)
    s.decode(3)
    base = repo.capture(s, "base")
    expected = s.fork().decode(8)

    a, b = tinymodel.session(), tinymodel.session()
    repo.restore_into(a, base.id)
    repo.restore_into(b, base.id)
    a.feed([7, 7, 7])  # branch A goes elsewhere
    a_out = a.decode(4)
    assert b.cache.get_seq_length() == len(s.tokens)
    assert b.tokens == repo.read_layer(base.id, "cache")["tokens"]
    assert b.decode(8) == expected  # B is untouched by A
    assert a_out != expected[:4]

    # in-memory fork clones tensors: advancing the fork leaves the original's cache bytes alone
    orig = tinymodel.session()
    orig.prefill(tinymodel.PROMPT)
    before = [layer.keys.clone() for layer in orig.cache.layers]
    child = orig.fork()
    child.decode(5)
    assert orig.cache.get_seq_length() == len(tinymodel.PROMPT)
    assert all(torch.equal(x, layer.keys) for x, layer in zip(before, orig.cache.layers, strict=True))

    snap_a, snap_b = repo.capture(a, "branch a"), repo.capture(b, "branch b")
    rec_a, rec_b, rec_base = (repo.read_layer(x.id, "cache") for x in (snap_a, snap_b, base))
    full = len(tinymodel.PROMPT) // tinymodel.PAGE_SIZE
    assert kvcache.shared_prefix_pages(rec_a, rec_b) >= full
    assert [kvcache.page_ref(p) for p in rec_a["pages"][:full]] == [kvcache.page_ref(p) for p in rec_base["pages"][:full]]


def test_mismatched_fingerprint_is_refused_and_nothing_changes(tmp_path):
    repo = Repo.init(tmp_path / "repo")
    s = tinymodel.session()
    s.prefill(tinymodel.PROMPT)
    snap = repo.capture(s, "p")
    torch.manual_seed(99)
    other_model = type(tinymodel.model())(tinymodel.model().config).eval()
    from agentsnap_transformers import KVSession

    other = KVSession(other_model, page_size=tinymodel.PAGE_SIZE)
    other.prefill([1, 2, 3])
    with pytest.raises(CacheMismatch) as info:
        repo.restore_into(other, snap.id)
    assert list(info.value.differences) == ["weights"]
    assert other.tokens == [1, 2, 3] and other.cache.get_seq_length() == 3


def test_snapshot_after_decode_rewrites_only_the_tail_pages(tmp_path):
    repo = Repo.init(tmp_path / "repo")
    s = tinymodel.session()
    s.prefill(tinymodel.PROMPT)
    first = repo.read_layer(repo.capture(s, "prefill").id, "cache")
    s.decode(2)
    second = repo.read_layer(repo.capture(s, "decode").id, "cache")
    full = len(tinymodel.PROMPT) // tinymodel.PAGE_SIZE
    assert [kvcache.page_ref(p) for p in second["pages"][:full]] == [kvcache.page_ref(p) for p in first["pages"][:full]]
    assert kvcache.page_ref(second["pages"][-1]) != kvcache.page_ref(first["pages"][-1])
    assert repo.verify()["ok"]
