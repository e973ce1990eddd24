"""Merging the non-world layers: trace, state (and its adapter hook), cache, model, registered layers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from agentsnap_core import Repo, hookimpl
from agentsnap_core.operations import merge as merge_mod
from agentsnap_core.operations import modelmerge
from agentsnap_core.operations.merge import LayerMerge, register_layer_merger, unregister_layer_merger
from agentsnap_core.operations.merge_layers import LLMSummarizer, default_summary
from agentsnap_core.plugins import get_plugin_manager
from safetensors.numpy import load as st_load
from safetensors.numpy import save as st_save

M = [{"id": f"m{i}", "role": "user" if i % 2 == 0 else "assistant", "content": f"message {i}"} for i in range(6)]


def branches(root: Path, base: dict[str, Any], ours: dict[str, Any], theirs: dict[str, Any],
             trace: tuple[list[Any], list[Any], list[Any]] | None = None) -> Repo:
    """Snapshots without a world layer: base on main, ours on main, theirs on branch `b`."""
    repo = Repo.init(root)
    tb, to, tt = trace or ([], [], [])
    b = repo.snapshot("base", layers=base, trace=tb, capture_world=False)
    repo.snapshot("ours", layers=ours, trace=to, capture_world=False)
    repo.snapshot("theirs", layers=theirs, trace=tt, capture_world=False, parents=[b.id], ref="refs/heads/b")
    return repo


# ------------------------------------------------------------------ trace
def test_trace_keeps_prefix_and_appends_their_tail_as_a_marked_block(tmp_path: Path) -> None:
    repo = branches(tmp_path / "w", {}, {}, {}, (M[:2], M[:2] + [M[2], M[3]], M[:2] + [M[4], M[5]]))
    res = merge_mod.merge(repo, "b")
    assert res.status == "merged"
    merged = repo.read_layer(res.snapshot, "trace")
    assert merged[:4] == M[:4]
    begin, *tail, end = merged[4:]
    assert tail == [M[4], M[5]]
    assert begin["agentsnap_merge"]["block"] == "begin" and "from branch b" in begin["content"]
    assert end["agentsnap_merge"]["block"] == "end"
    assert repo.get(res.snapshot).manifest["layers"]["trace"]["count"] == 8


def test_trace_summary_through_the_hook_and_the_deterministic_default(tmp_path: Path) -> None:
    tail = [{"id": "t1", "role": "assistant", "content": "the bug is in parse()",
             "tool_calls": [{"name": "grep"}]}]
    repo = branches(tmp_path / "w", {}, {}, {}, (M[:1], M[:2], M[:1] + tail))
    res = merge_mod.merge(repo, "b", summarizer=True)
    note = repo.read_layer(res.snapshot, "trace")[-1]
    assert note == {**default_summary(tail, {"theirs_label": "b", "theirs": res.theirs}), "id": note["id"]}
    assert "What branch b learned" in note["content"] and "grep" in note["content"] and "parse()" in note["content"]

    class Folding:
        @hookimpl
        def agentsnap_summarize_branch(self, messages: list[dict[str, Any]], context: dict[str, Any]) -> dict[str, Any]:
            return {"role": "system", "content": f"adapter note about {len(messages)} message(s)"}

    pm = get_plugin_manager()
    plugin = Folding()
    pm.register(plugin, name="test-folding")
    try:
        repo2 = branches(tmp_path / "w2", {}, {}, {}, (M[:1], M[:2], M[:1] + tail))
        res2 = merge_mod.merge(repo2, "b", summarizer=True)
        assert repo2.read_layer(res2.snapshot, "trace")[-1]["content"] == "adapter note about 1 message(s)"
    finally:
        pm.unregister(plugin)


def test_llm_summarizer_takes_any_callable(tmp_path: Path) -> None:
    prompts: list[str] = []

    def fake_llm(prompt: str) -> str:  # an offline stand-in for a chat model
        prompts.append(prompt)
        return "  parse() fails on empty input.  "

    repo = branches(tmp_path / "w", {}, {}, {}, (M[:1], M[:2], M[:1] + M[3:6]))
    res = merge_mod.merge(repo, "b", summarizer=LLMSummarizer(fake_llm))
    note = repo.read_layer(res.snapshot, "trace")[-1]
    assert note["content"] == "What branch b learned: parse() fails on empty input."
    assert note["agentsnap_merge"]["summarizer"] == "llm" and note["agentsnap_merge"]["summary_of"] == 3
    assert "[assistant] message 3" in prompts[0] and "message 5" in prompts[0]
    with pytest.raises(Exception, match="returned no text"):
        repo3 = branches(tmp_path / "w3", {}, {}, {}, (M[:1], M[:2], M[:1] + M[3:6]))
        merge_mod.merge(repo3, "b", summarizer=LLMSummarizer(lambda p: ""))


# ------------------------------------------------------------------ state
def test_state_merges_key_wise_and_reports_both_changed_keys(tmp_path: Path) -> None:
    base = {"state": {"step": 1, "plan": "a", "memory": {"x": 1, "y": 1}, "drop": True}}
    ours = {"state": {"step": 2, "plan": "a", "memory": {"x": 2, "y": 1}, "drop": True}}
    theirs = {"state": {"step": 3, "plan": "b", "memory": {"x": 1, "y": 5}, "new": [1]}}
    repo = branches(tmp_path / "w", base, ours, theirs)
    res = merge_mod.merge(repo, "b")
    assert res.status == "conflict"
    assert [(c["layer"], c["path"], c["ours"], c["theirs"]) for c in res.conflicts] == [("state", "step", 2, 3)]
    final = merge_mod.merge_continue(repo)
    assert repo.read_layer(final.snapshot, "state") == {"step": 2, "plan": "b", "memory": {"x": 2, "y": 5}, "new": [1]}
    assert repo.get(final.snapshot).parents == [res.ours, res.theirs]


def test_state_conflict_resolved_by_hand_through_continue(tmp_path: Path) -> None:
    repo = branches(tmp_path / "w", {"state": {"k": 0}}, {"state": {"k": 1}}, {"state": {"k": 2}})
    assert merge_mod.merge(repo, "b").status == "conflict"
    final = merge_mod.merge_continue(repo, layers={"state": {"k": 3}})
    assert repo.read_layer(final.snapshot, "state") == {"k": 3}


def test_state_strategy_theirs(tmp_path: Path) -> None:
    repo = branches(tmp_path / "w", {"state": {"k": 0, "j": 0}}, {"state": {"k": 1, "j": 1}}, {"state": {"k": 2, "j": 0}})
    res = merge_mod.merge(repo, "b", strategy="theirs")
    assert res.status == "merged" and repo.read_layer(res.snapshot, "state") == {"k": 2, "j": 1}
    assert [c["path"] for c in res.resolved] == ["k"]


def test_adapter_hook_overrides_the_state_merge(tmp_path: Path) -> None:
    class Counter:
        @hookimpl
        def agentsnap_merge_state(self, base: Any, ours: Any, theirs: Any, context: dict[str, Any]) -> Any:
            return {"count": ours["count"] + theirs["count"] - base["count"]}, []

    pm = get_plugin_manager()
    plugin = Counter()
    pm.register(plugin, name="test-counter")
    try:
        repo = branches(tmp_path / "w", {"state": {"count": 1}}, {"state": {"count": 3}}, {"state": {"count": 5}})
        res = merge_mod.merge(repo, "b")
        assert res.status == "merged" and repo.read_layer(res.snapshot, "state") == {"count": 7}
    finally:
        pm.unregister(plugin)


# ------------------------------------------------------------------ cache, registry
def test_cache_is_not_merged_and_the_result_says_so(tmp_path: Path) -> None:
    repo = branches(tmp_path / "w", {"cache": {"kv": 0}}, {"cache": {"kv": 1}}, {"cache": {"kv": 2}})
    res = merge_mod.merge(repo, "b")
    assert res.status == "merged" and repo.read_layer(res.snapshot, "cache") == {"kv": 1}
    assert any(n.startswith("cache: not merged - kept the target branch's KV cache") for n in res.notes)


def test_registered_layer_merger_is_used_and_registry_guards(tmp_path: Path) -> None:
    def union(base: Any, ours: Any, theirs: Any, context: dict[str, Any]) -> LayerMerge:
        return LayerMerge(sorted(set(ours) | set(theirs)), [], [f"notes: union ({context['strategy']})"])

    register_layer_merger("notes", union)
    try:
        with pytest.raises(ValueError, match="already registered"):
            register_layer_merger("notes", lambda *a: LayerMerge(None))
        with pytest.raises(ValueError, match="merged by the core"):
            register_layer_merger("world", union)
        repo = branches(tmp_path / "w", {"notes": ["a"]}, {"notes": ["a", "b"]}, {"notes": ["a", "c"]})
        res = merge_mod.merge(repo, "b")
        assert repo.read_layer(res.snapshot, "notes") == ["a", "b", "c"]
        assert "notes: union (auto)" in res.notes
    finally:
        unregister_layer_merger("notes")


def test_unregistered_layer_gets_the_key_wise_default(tmp_path: Path) -> None:
    repo = branches(tmp_path / "w", {"custom": {"a": 1, "b": 1}}, {"custom": {"a": 2, "b": 1}}, {"custom": {"a": 1, "b": 2}})
    res = merge_mod.merge(repo, "b")
    assert repo.read_layer(res.snapshot, "custom") == {"a": 2, "b": 2}


# ------------------------------------------------------------------ model
def _weights(seed: int, base: dict[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    if base is None:
        return {"w": rng.normal(size=(8, 4)).astype(np.float32), "b": rng.normal(size=(4,)).astype(np.float32),
                "ids": np.arange(4, dtype=np.int64)}
    return {k: (v + rng.normal(scale=0.1, size=v.shape).astype(np.float32)) if v.dtype.kind == "f" else v
            for k, v in base.items()}


def test_model_layer_merges_task_vectors_with_ties(tmp_path: Path) -> None:
    base = _weights(0)
    ours, theirs = _weights(1, base), _weights(2, base)
    layers = [{"model": {"safetensors": st_save(t), "name": "lora"}} for t in (base, ours, theirs)]
    repo = branches(tmp_path / "w", *layers)
    res = merge_mod.merge(repo, "b", model={"method": "ties", "density": 0.5})
    assert res.status == "merged"
    rec = repo.read_layer(res.snapshot, "model")
    assert rec["name"] == "lora"
    got = st_load(rec["safetensors"])
    want = modelmerge.merge_tensors(base["w"], [ours["w"], theirs["w"]], method="ties", density=0.5)
    np.testing.assert_allclose(got["w"], want, atol=1e-6)
    np.testing.assert_array_equal(got["ids"], base["ids"])
    assert any("ties" in n for n in res.notes)


def test_model_layer_changed_on_one_side_is_taken_unchanged(tmp_path: Path) -> None:
    base = st_save(_weights(0))
    theirs = st_save(_weights(3, _weights(0)))
    repo = branches(tmp_path / "w", {"model": base}, {"model": base}, {"model": theirs})
    res = merge_mod.merge(repo, "b")
    assert repo.read_layer(res.snapshot, "model") == theirs
