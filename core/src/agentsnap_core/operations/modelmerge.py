"""TIES and DARE merging of weight tensors against their common ancestor (task vectors), in numpy.

Needs the ``agentsnap-core[model]`` extra (numpy + safetensors). Definitions:

* task vector of model *t*: ``delta_t = theta_t - theta_base``.
* **TIES** (Yadav et al. 2023, arXiv:2306.01708): *trim* each delta to its ``density`` fraction
  of largest-magnitude entries (``k = max(1, int(density * n))``); *elect* a sign per entry,
  ``sign(sum_t w_t * delta_t)`` (0 counts as +); *disjoint merge*: average, per entry, only the
  deltas whose sign agrees (``sum w_t d_t [agree] / sum w_t [agree]``); ``theta = base + lambda * that``.
* **DARE** (Yu et al. 2023, arXiv:2311.03099): *drop* each delta entry with probability
  ``p = 1 - density`` and *rescale* the survivors by ``1 / (1 - p)`` (``rescale="paper"``, the
  default) - or, like mergekit, to keep the tensor's L1 norm (``rescale="l1"``); then
  ``dare_linear`` sums ``w_t * delta_t`` and ``dare_ties`` applies TIES' sign election to them.
* ``task_arithmetic``: ``base + lambda * sum_t w_t * delta_t``.

``normalize`` (divide by the summed weights) defaults to True for ``ties`` and False otherwise,
as in mergekit 0.1.5, against which ``nox -s merge_reference`` checks these functions.
Computation is in float64; results are cast back to the base tensor's dtype.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from safetensors.numpy import load as st_load
from safetensors.numpy import save as st_save

from agentsnap_core.errors import InvalidInput

METHODS = ("ties", "dare_ties", "dare_linear", "task_arithmetic")
_EPS = 1e-7


def magnitude_trim(delta: np.ndarray, density: float) -> np.ndarray:
    """Keep the ``density`` fraction of entries with the largest magnitude (TIES' trim step)."""
    if density >= 1:
        return delta.copy()
    if density <= 0 or delta.size == 0:
        return np.zeros_like(delta)
    k = max(1, int(density * delta.size))
    flat = delta.reshape(-1)
    keep = np.argsort(-np.abs(flat), kind="stable")[:k]
    out = np.zeros_like(flat)
    out[keep] = flat[keep]
    return out.reshape(delta.shape)


def random_drop(
    delta: np.ndarray,
    density: float,
    *,
    rng: np.random.Generator | None = None,
    mask: np.ndarray | None = None,
    rescale: str | None = "paper",
) -> np.ndarray:
    """DARE's drop-and-rescale: keep each entry with probability ``density`` (or where ``mask`` is set).

    ``rescale``: ``"paper"`` multiplies survivors by ``1/density``; ``"l1"`` rescales to the
    original L1 norm (mergekit); ``None`` does not rescale.
    """
    if density >= 1 and mask is None:
        return delta.copy()
    if mask is None:
        rng = rng or np.random.default_rng()
        mask = rng.random(delta.shape) < density
    mask = np.asarray(mask)
    if mask.shape != delta.shape:
        raise InvalidInput(f"DARE mask shape {mask.shape} differs from the tensor's {delta.shape}")
    kept = delta * mask.astype(delta.dtype)
    if rescale in (None, False, "none"):
        return kept
    if rescale == "paper":
        return kept / density if density > 0 else np.zeros_like(delta)
    if rescale == "l1":
        before, after = np.abs(delta).sum(), np.abs(kept).sum()
        if before < _EPS or after < _EPS:
            return kept
        return kept * (before / after)
    raise InvalidInput(f"unknown DARE rescale {rescale!r}; use 'paper', 'l1' or None")


def elect_sign(deltas: np.ndarray) -> np.ndarray:
    """TIES' sign election over stacked (weighted) deltas: +1 where the sum is >= 0, else -1."""
    return np.where(deltas.sum(axis=0) >= 0, 1.0, -1.0)


def merge_tensors(
    base: np.ndarray,
    models: Sequence[np.ndarray],
    *,
    method: str = "ties",
    density: float | Sequence[float] = 1.0,
    weights: Sequence[float] | None = None,
    lambda_: float = 1.0,
    normalize: bool | None = None,
    rescale: str | None = "paper",
    seed: int | None = None,
    rng: np.random.Generator | None = None,
    masks: Sequence[np.ndarray] | None = None,
) -> np.ndarray:
    """Merge ``models`` (same shape as ``base``) by ``method``; see the module docstring."""
    if method not in METHODS:
        raise InvalidInput(f"unknown model merge method {method!r}; use one of {', '.join(METHODS)}")
    if not models:
        return base.copy()
    for i, m in enumerate(models):
        if m.shape != base.shape:
            raise InvalidInput(f"model {i} has shape {m.shape}, the ancestor {base.shape}: cannot merge")
    n = len(models)
    dens = [float(density)] * n if isinstance(density, (int, float)) else [float(d) for d in density]
    w = [1.0] * n if weights is None else [float(x) for x in weights]
    if len(dens) != n or len(w) != n:
        raise InvalidInput(f"give one density and one weight per model ({n})")
    b64 = base.astype(np.float64)
    deltas = []
    if rng is None and method.startswith("dare") and masks is None:
        rng = np.random.default_rng(seed)
    for i, m in enumerate(models):
        d = m.astype(np.float64) - b64
        if method == "ties":
            d = magnitude_trim(d, dens[i])
        elif method.startswith("dare"):
            d = random_drop(d, dens[i], rng=rng, mask=None if masks is None else masks[i], rescale=rescale)
        deltas.append(d)
    stack = np.stack(deltas)
    wv = np.asarray(w, dtype=np.float64).reshape((n,) + (1,) * base.ndim)
    stack = stack * wv
    if method in ("ties", "dare_ties"):
        agree = (np.sign(stack) == elect_sign(stack)).astype(np.float64)
        mixed = (stack * agree).sum(axis=0)
        divisor = (wv * agree).sum(axis=0)
        divisor[divisor == 0] = 1.0
    else:
        mixed = stack.sum(axis=0)
        divisor = np.full(base.shape, wv.sum())
        divisor[np.abs(divisor) < 1e-8] = 1.0
    if normalize is None:
        normalize = method == "ties"
    if normalize:
        mixed = mixed / divisor
    return (b64 + lambda_ * mixed).astype(base.dtype)


def merge_state_dicts(
    base: dict[str, np.ndarray], models: Sequence[dict[str, np.ndarray]], **options: Any
) -> tuple[dict[str, np.ndarray], list[str]]:
    """Merge named tensors; return ``(merged, notes)``.

    Floating tensors present in the ancestor and every model are merged with
    :func:`merge_tensors`; others follow a three-way rule (a tensor only one model changed is
    taken from it; otherwise the first model's is kept and a note says so).
    """
    seed = options.pop("seed", None)
    rng = options.pop("rng", None) or np.random.default_rng(seed)
    out: dict[str, np.ndarray] = {}
    notes: list[str] = []
    names = sorted(set(base).union(*[set(m) for m in models]))
    for name in names:
        have = [m[name] for m in models if name in m]
        if name in base and len(have) == len(models) and np.issubdtype(base[name].dtype, np.floating):
            out[name] = merge_tensors(base[name], have, rng=rng, **options)
            continue
        changed = [t for t in have if name not in base or not _same(t, base[name])]
        if len(have) < len(models) and name in base:
            notes.append(f"{name}: removed by some model; kept it")
        if not changed:
            if name in base:
                out[name] = base[name]
            continue
        if any(not _same(changed[0], c) for c in changed[1:]):
            notes.append(f"{name}: changed differently and cannot be merged by {options.get('method', 'ties')}; kept ours")
        out[name] = changed[0]
    return out, notes


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and bool(np.array_equal(a, b))


def merge_safetensors(base: bytes, models: Sequence[bytes], **options: Any) -> bytes:
    """Merge safetensors files given as bytes; return the merged file's bytes."""
    try:
        b = st_load(bytes(base))
        ms = [st_load(bytes(m)) for m in models]
    except Exception as exc:  # safetensors raises its own error types, bf16 cannot load into numpy
        raise InvalidInput(f"cannot read the model tensors as safetensors with numpy: {exc}") from None
    merged, _notes = merge_state_dicts(b, ms, **options)
    return st_save(merged)


def merge_model_payloads(base: Any, models: Sequence[Any], **options: Any) -> Any:
    """Merge ``model`` layer payloads: safetensors bytes, or dicts holding them under ``"safetensors"``.

    The result has the first model's shape (other keys of a dict payload come from it).
    """
    def raw(p: Any) -> bytes:
        if isinstance(p, (bytes, bytearray)):
            return bytes(p)
        if isinstance(p, dict) and isinstance(p.get("safetensors"), (bytes, bytearray)):
            return bytes(p["safetensors"])
        raise InvalidInput("a model layer must be safetensors bytes or a dict with a 'safetensors' bytes value")

    data = merge_safetensors(raw(base), [raw(m) for m in models], **options)
    first = models[0]
    return {**first, "safetensors": data} if isinstance(first, dict) else data
