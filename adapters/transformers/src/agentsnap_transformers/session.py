"""KVSession: a causal LM, its DynamicCache and the tokens the cache holds (what the adapter snapshots)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from transformers.cache_utils import DynamicCache

from . import kv


class KVSession:
    """Greedy decoding over a transformers causal LM with an explicit, snapshot-able KV cache.

    Attributes:
        model: the causal LM (shared between sessions; never modified by a session).
        cache: the live ``DynamicCache``; it holds the KV of exactly ``tokens``.
        tokens: every token id fed so far (prompt and generated).
        last_logits: next-token logits after the last forward call (float32 copy), or None.
        forward_lengths: the number of tokens of each forward call this session made.
        page_size: token slots per stored KV page.
        weights: a digest or revision naming the model's weights; by default every parameter is hashed once.
    """

    def __init__(
        self, model: Any, *, page_size: int = kv.DEFAULT_PAGE_SIZE, tokenizer: str = "none", weights: str | None = None
    ) -> None:
        self.model = model
        self.weights = weights
        self.page_size = page_size
        self.tokenizer = tokenizer
        self.cache = DynamicCache(config=model.config)
        self.tokens: list[int] = []
        self.last_logits: torch.Tensor | None = None
        self.forward_lengths: list[int] = []
        self._fingerprint: dict[str, str] | None = None
        #: the record whose pages equal this live cache's pages (captured or restored), for page reuse
        self.base_record: dict[str, Any] | None = None

    @property
    def device(self) -> torch.device:
        """The device of the model's parameters (inputs and restored caches are placed there)."""
        return next(self.model.parameters()).device

    def fingerprint(self) -> dict[str, str]:
        """The cache fingerprint of this session's model (weights digest computed once)."""
        if self._fingerprint is None:
            self._fingerprint = kv.fingerprint(self.model, weights=self.weights, tokenizer=self.tokenizer)
        return self._fingerprint

    @torch.no_grad()
    def feed(self, ids: Sequence[int]) -> torch.Tensor:
        """Run ``ids`` through the model on top of the cache (a prefill when many); return the next logits."""
        if not ids:
            raise ValueError("feed() needs at least one token")
        input_ids = torch.tensor([list(ids)], dtype=torch.long, device=self.device)
        out = self.model(input_ids=input_ids, past_key_values=self.cache, use_cache=True)
        self.cache = out.past_key_values
        self.tokens.extend(int(t) for t in ids)
        self.forward_lengths.append(len(ids))
        self.last_logits = out.logits[0, -1].detach().to(torch.float32).clone()
        return self.last_logits

    prefill = feed

    def decode(self, n: int) -> list[int]:
        """Greedily generate ``n`` tokens (argmax of the last logits each step); return them."""
        if self.last_logits is None:
            raise ValueError("decode() needs a prefill first")
        out = []
        for _ in range(n):
            nxt = int(torch.argmax(self.last_logits))
            self.feed([nxt])
            out.append(nxt)
        return out

    def fork(self) -> KVSession:
        """An independent copy: cache tensors are cloned (caches may grow in place)."""
        other = KVSession(self.model, page_size=self.page_size, tokenizer=self.tokenizer, weights=self.weights)
        other._fingerprint = self._fingerprint
        if self.cache.get_seq_length() > 0:
            other.cache = DynamicCache(
                ddp_cache_data=[(layer.keys.clone(), layer.values.clone()) for layer in self.cache.layers],
                config=self.model.config,
            )
        other.tokens = list(self.tokens)
        other.last_logits = None if self.last_logits is None else self.last_logits.clone()
        other.base_record = self.base_record
        return other

    def reset(self) -> None:
        """Drop the cache and tokens (the next feed is a full prefill)."""
        self.cache = DynamicCache(config=self.model.config)
        self.tokens = []
        self.last_logits = None
        self.base_record = None
