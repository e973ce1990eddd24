"""KVSession: a causal LM, its DynamicCache and the tokens the cache holds (what the adapter snapshots)."""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any

import torch
from agentsnap_core import InvalidInput
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
        if type(page_size) is not int or page_size <= 0:
            raise InvalidInput(f"page_size must be a positive int, not {page_size!r}")
        config = getattr(model, "config", None)
        if not isinstance(model, torch.nn.Module) or config is None:
            raise InvalidInput(f"KVSession needs a transformers causal LM (a torch module with a config), not {model!r:.80}")
        if getattr(config, "is_encoder_decoder", False):
            raise InvalidInput(f"{type(model).__name__} is an encoder-decoder model; KVSession holds the cache of a "
                               "decoder-only causal LM (an EncoderDecoderCache is not supported)")
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
        ids = self._token_ids(ids)
        if not ids:
            raise ValueError("feed() needs at least one token")
        input_ids = torch.tensor([ids], dtype=torch.long, device=self.device)
        # a forward updates the cache layer by layer (each update makes new tensors): one that fails half-way
        # (Ctrl-C, out of memory) leaves the first layers longer than the tokens, so the old tensors are put back
        before = [(layer.keys, layer.values) for layer in self.cache.layers] if self.tokens else None
        try:
            out = self.model(input_ids=input_ids, past_key_values=self.cache, use_cache=True)
        except BaseException:
            if before is None:
                self.cache = DynamicCache(config=self.model.config)
            else:
                for layer, (keys, values) in zip(self.cache.layers, before, strict=True):
                    layer.keys, layer.values = keys, values
            raise
        self.cache = out.past_key_values
        self.tokens.extend(int(t) for t in ids)
        self.forward_lengths.append(len(ids))
        self.last_logits = out.logits[0, -1].detach().to(torch.float32).clone()
        return self.last_logits

    prefill = feed

    def _token_ids(self, ids: Any) -> list[int]:
        """``ids`` (a sequence or a 1-D tensor/array of token ids) as ints in the model's vocabulary, or InvalidInput."""
        if hasattr(ids, "tolist") and not isinstance(ids, (list, tuple)):
            if getattr(ids, "ndim", 1) != 1:
                raise InvalidInput(f"feed() takes the token ids of one sequence (1-D), not shape {tuple(ids.shape)}")
            ids = ids.tolist()
        if isinstance(ids, (str, bytes)):
            raise InvalidInput(f"feed() takes integer token ids, not a {type(ids).__name__}; tokenize the text first")
        out = []
        for i, t in enumerate(ids):
            try:
                if isinstance(t, bool):
                    raise TypeError
                out.append(operator.index(t))
            except TypeError:
                raise InvalidInput(f"token id {i} is {t!r}; token ids must be integers") from None
        embeddings = self.model.get_input_embeddings() if hasattr(self.model, "get_input_embeddings") else None
        vocab = getattr(embeddings, "num_embeddings", None)
        if vocab is not None:
            outside = [t for t in out if not 0 <= t < vocab]
            if outside:
                raise InvalidInput(f"token ids {outside[:5]} are outside the model's vocabulary of {vocab}")
        return out

    def decode(self, n: int) -> list[int]:
        """Greedily generate ``n`` tokens (argmax of the last logits each step); return them."""
        if isinstance(n, bool) or not hasattr(n, "__index__") or operator.index(n) < 0:
            raise InvalidInput(f"decode() takes a number of tokens >= 0, not {n!r}")
        n = operator.index(n)
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
