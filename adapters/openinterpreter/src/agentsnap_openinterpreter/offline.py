"""An offline model for Open Interpreter: scripted replies streamed as OpenAI-style chunks.

Open Interpreter 0.4.3 calls ``interpreter.llm.completions(**params)`` and reads
``chunk["choices"][0]["delta"]["content"]`` (``interpreter/core/llm/run_text_llm.py``); with
``supports_functions = False`` a markdown fence is a code block. Its parser needs the fence and the
language line as separate tokens, which :func:`tokens` takes care of.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from typing import Any

__all__ = ["ScriptedModel", "tokens", "use_offline_model"]

_FENCE = re.compile(r"(```)")


def tokens(reply: str) -> list[str]:
    """Split a reply so that each ``` fence and the language line after an opening fence are tokens."""
    out: list[str] = []
    inside = False
    for part in _FENCE.split(reply):
        if part == "```":
            out.append(part)
            inside = not inside
            continue
        if inside and "\n" in part and out and out[-1] == "```":
            lang, rest = part.split("\n", 1)
            out.append(lang + "\n")
            part = rest
        if part:
            out.append(part)
    return out


class ScriptedModel:
    """A stand-in for ``llm.completions``.

    Args:
        replies: a list of replies used in order, or ``reply(messages) -> str`` computed from the
            conversation (deterministic: the same conversation gets the same reply in any process).
    """

    def __init__(self, replies: Sequence[str] | Callable[[list[dict[str, Any]]], str]) -> None:
        self._replies = replies if callable(replies) else list(replies)
        self.calls = 0

    def __call__(self, **params: Any) -> Iterator[dict[str, Any]]:
        self.calls += 1
        if callable(self._replies):
            reply = self._replies(params.get("messages", []))
        elif self._replies:
            reply = self._replies.pop(0)
        else:
            reply = "The task is done."
        for tok in tokens(reply):
            yield {"choices": [{"delta": {"content": tok}}]}


def use_offline_model(interpreter: Any, replies: Sequence[str] | Callable[[list[dict[str, Any]]], str]) -> ScriptedModel:
    """Make ``interpreter`` answer from ``replies`` with no network and no API key; returns the model."""
    model = ScriptedModel(replies)
    interpreter.llm.completions = model
    interpreter.llm.supports_functions = False
    interpreter.llm.supports_vision = False
    interpreter.llm.context_window = interpreter.llm.context_window or 8000
    interpreter.llm.max_tokens = interpreter.llm.max_tokens or 1000
    interpreter.llm._is_loaded = True
    return model
