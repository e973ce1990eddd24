"""TIES and DARE (agentsnap_core.operations.modelmerge) against hand-checked examples, the papers' definitions, and mergekit.

The mergekit comparison runs in its own session, `nox -s merge_reference` (mergekit 0.1.5 beside
torch 2.13 CPU); there AGENTSNAP_MERGEKIT=1 is set and a missing mergekit fails the test.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from agentsnap_core.errors import InvalidInput
from agentsnap_core.operations import modelmerge as mm
from agentsnap_core.testing.servers import need_module


# ------------------------------------------------------------------ worked examples (checked by hand)
def test_ties_worked_example() -> None:
    # trim to 2 of 4 entries: t1 -> [1, -2, 0, 0], t2 -> [3, 1, 0, 0]; elected sign of [4, -1, 0, 0] = [+, -, +, +];
    # disjoint mean: entry 0 (1+3)/2 = 2, entry 1 only t1 agrees: -2, entries 2 and 3: nothing agrees -> 0.
    base = np.array([10.0, 10.0, 10.0, 10.0])
    t1 = base + np.array([1.0, -2.0, 0.5, 0.0])
    t2 = base + np.array([3.0, 1.0, -0.25, 0.0])
    got = mm.merge_tensors(base, [t1, t2], method="ties", density=0.5)
    np.testing.assert_array_equal(got, [12.0, 8.0, 10.0, 10.0])
    # lambda scales the merged task vector
    np.testing.assert_array_equal(mm.merge_tensors(base, [t1, t2], method="ties", density=0.5, lambda_=0.5), [11.0, 9.0, 10.0, 10.0])


def test_dare_worked_example() -> None:
    # masks keep [1,0,1,0] and [0,1,1,0]; survivors rescaled by 1/density = 2:
    # d1 = [2, 0, 6, 0], d2 = [0, 2, -2, 0]; linear: sum = [2, 2, 4, 0];
    # ties: elected sign of [2, 2, 4, 0] is all +, so entry 2 drops d2's -2: [2, 2, 6, 0].
    base = np.full(4, 10.0)
    t1 = base + np.array([1.0, 2.0, 3.0, 4.0])
    t2 = base + np.array([-1.0, 1.0, -1.0, 1.0])
    masks = [np.array([1, 0, 1, 0], bool), np.array([0, 1, 1, 0], bool)]
    np.testing.assert_array_equal(mm.merge_tensors(base, [t1, t2], method="dare_linear", density=0.5, masks=masks), [12, 12, 14, 10])
    np.testing.assert_array_equal(mm.merge_tensors(base, [t1, t2], method="dare_ties", density=0.5, masks=masks), [12, 12, 16, 10])


def test_dare_with_a_seed_is_reproducible_and_keeps_about_density() -> None:
    rng = np.random.default_rng(0)
    base = rng.normal(size=(200, 50))
    models = [base + rng.normal(size=base.shape) for _ in range(2)]
    a = mm.merge_tensors(base, models, method="dare_linear", density=0.3, seed=7)
    b = mm.merge_tensors(base, models, method="dare_linear", density=0.3, seed=7)
    np.testing.assert_array_equal(a, b)
    kept = mm.random_drop(np.ones((200, 50)), 0.3, rng=np.random.default_rng(1), rescale=None).mean()
    assert 0.27 < kept < 0.33


def test_bad_inputs_raise_clear_errors() -> None:
    with pytest.raises(InvalidInput, match="unknown model merge method"):
        mm.merge_tensors(np.zeros(2), [np.ones(2)], method="slerp")
    with pytest.raises(InvalidInput, match="shape"):
        mm.merge_tensors(np.zeros(2), [np.ones(3)])
    with pytest.raises(InvalidInput, match="safetensors"):
        mm.merge_model_payloads(b"not safetensors", [b"x", b"y"])


# ------------------------------------------------------------------ the papers' definitions, element by element
def _paper_ties(base: np.ndarray, models: list[np.ndarray], density: float, lam: float) -> np.ndarray:
    """TIES-Merging (arXiv:2306.01708, Alg. 1) written out with loops over entries."""
    flat = [(m - base).reshape(-1) for m in models]
    n = flat[0].size
    k = max(1, int(density * n))
    trimmed = []
    for d in flat:
        order = sorted(range(n), key=lambda i: -abs(d[i]))[:k]
        t = np.zeros(n)
        for i in order:
            t[i] = d[i]
        trimmed.append(t)
    out = np.zeros(n)
    for i in range(n):
        s = 1.0 if sum(t[i] for t in trimmed) >= 0 else -1.0
        agree = [t[i] for t in trimmed if np.sign(t[i]) == s]
        out[i] = sum(agree) / len(agree) if agree else 0.0
    return base + lam * out.reshape(base.shape)


def _paper_dare(base: np.ndarray, models: list[np.ndarray], masks: list[np.ndarray], density: float) -> np.ndarray:
    """DARE (arXiv:2311.03099, Eq. 2) then task arithmetic, with loops."""
    out = np.zeros(base.size)
    for m, mask in zip(models, masks, strict=True):
        d, keep = (m - base).reshape(-1), mask.reshape(-1)
        for i in range(base.size):
            out[i] += d[i] / density if keep[i] else 0.0
    return base + out.reshape(base.shape)


@pytest.mark.parametrize("seed", range(5))
def test_ties_and_dare_match_the_papers_definitions_on_random_tensors(seed: int) -> None:
    rng = np.random.default_rng(seed)
    base = rng.normal(size=(6, 7))
    models = [base + rng.normal(scale=0.5, size=base.shape) for _ in range(3)]
    density = float(rng.uniform(0.1, 0.9))
    np.testing.assert_allclose(mm.merge_tensors(base, models, method="ties", density=density, lambda_=0.8),
                               _paper_ties(base, models, density, 0.8), atol=1e-6, rtol=0)
    masks = [rng.random(base.shape) < density for _ in models]
    np.testing.assert_allclose(mm.merge_tensors(base, models, method="dare_linear", density=density, masks=masks),
                               _paper_dare(base, models, masks, density), atol=1e-6, rtol=0)


# ------------------------------------------------------------------ mergekit 0.1.5 (nox -s merge_reference)
@pytest.mark.skipif(os.environ.get("AGENTSNAP_MERGEKIT") != "1", reason="runs in `nox -s merge_reference` (needs mergekit + torch)")
@pytest.mark.parametrize("seed", range(4))
def test_ties_and_dare_match_mergekit_on_random_tensors(seed: int) -> None:
    torch = need_module("torch")
    need_module("mergekit")
    from mergekit.merge_methods import registry
    from mergekit.merge_methods.base import TensorGroup

    rng = np.random.default_rng(seed)
    base = rng.normal(size=(32, 16)).astype(np.float32)
    models = [(base + rng.normal(scale=0.1, size=base.shape)).astype(np.float32) for _ in range(3)]
    weights = [float(w) for w in rng.uniform(0.2, 2.0, size=3)]
    density = float(rng.uniform(0.2, 0.9))
    ids = [0, 1, 2]

    def mergekit(method: str, **over: object) -> np.ndarray:
        m = registry.get(method)
        group = TensorGroup.from_tensors([torch.from_numpy(base)] + [torch.from_numpy(x) for x in models],
                                         ids=["base", *ids], base_index=0)
        params = {"int8_mask": False, "normalize": m.default_normalize, "rescale": m.default_rescale, "lambda": 0.9,
                  "weight": dict(zip(ids, weights, strict=True)), "density": dict.fromkeys(ids, density), **over}
        return m.merge_group(group, **params).numpy()

    ours = mm.merge_tensors(base, models, method="ties", density=density, weights=weights, lambda_=0.9)
    np.testing.assert_allclose(ours, mergekit("ties"), atol=1e-6, rtol=0)
    for method in ("dare_ties", "dare_linear"):
        torch.manual_seed(seed)  # mergekit draws one torch.bernoulli mask per model, in order: replay them
        want = mergekit(method)
        torch.manual_seed(seed)
        masks = [torch.bernoulli(torch.full_like(torch.from_numpy(base), density)).numpy() for _ in models]
        got = mm.merge_tensors(base, models, method=method, density=density, weights=weights, lambda_=0.9,
                               masks=masks, rescale="l1")
        np.testing.assert_allclose(got, want, atol=1e-6, rtol=0)
        torch.manual_seed(seed)
        want_plain = mergekit(method, rescale=False, normalize=True)
        got_plain = mm.merge_tensors(base, models, method=method, density=density, weights=weights, lambda_=0.9,
                                     masks=masks, rescale=None, normalize=True)
        np.testing.assert_allclose(got_plain, want_plain, atol=1e-6, rtol=0)
