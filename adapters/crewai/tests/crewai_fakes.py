"""Offline stand-ins for the *model* only: a scripted ``BaseLLM`` subclass and a deterministic embedder.

Everything else in the tests is real CrewAI (Crew, Agent, Task, Memory, Flow, checkpoints).
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from crewai.llms.base_llm import BaseLLM
from pydantic import PrivateAttr

DIM = 16


def embed(texts: list[str]) -> list[list[float]]:
    """A deterministic bag-of-words embedder (hashed tokens, L2-normalised)."""
    out = []
    for text in texts:
        vec = [0.0] * DIM
        for tok in re.findall(r"[a-z0-9]+", text.lower()):
            h = hashlib.sha256(tok.encode()).digest()
            vec[h[0] % DIM] += 1.0 if h[1] % 2 else -1.0
        norm = sum(v * v for v in vec) ** 0.5 or 1.0
        out.append([v / norm for v in vec])
    return out


class ScriptedLLM(BaseLLM):
    """Answers CrewAI's memory prompts with valid JSON and tasks with ``Final Answer: ...``.

    ``answers`` maps a phrase that appears in a task prompt to the answer; every prompt the
    model received is kept in ``received`` (shared with the copies ``Memory`` makes).
    """

    answers: dict[str, str] = {}
    _received: list[dict[str, Any]] = PrivateAttr(default_factory=list)

    def __init__(self, **kw: Any) -> None:
        kw.setdefault("model", "scripted-fake")
        super().__init__(**kw)

    @property
    def received(self) -> list[dict[str, Any]]:
        return self._received

    def task_prompts(self) -> list[str]:
        return [r["text"] for r in self._received if r["kind"] == "task"]

    def supports_function_calling(self) -> bool:
        return False

    def call(self, messages: Any, tools: Any = None, callbacks: Any = None, available_functions: Any = None,
             from_task: Any = None, from_agent: Any = None, response_model: Any = None) -> str:
        msgs = [{"role": "user", "content": messages}] if isinstance(messages, str) else list(messages)
        system = next((str(m.get("content", "")) for m in msgs if m.get("role") == "system"), "")
        text = "\n".join(str(m.get("content", "")) for m in msgs)
        if system.startswith("You extract discrete"):
            kind = "extract"
            result = text.split("Result:", 1)[-1].split("Final Answer:", 1)[-1].strip().splitlines()[0]
            reply = json.dumps({"memories": [f"Learned: {result}"]})
        elif system.startswith("You analyze content to be stored"):
            kind, reply = "save", json.dumps({"suggested_scope": "/facts", "categories": ["facts"], "importance": 0.7})
        elif system.startswith("You analyze a query"):
            kind, reply = "query", json.dumps({"keywords": [], "suggested_scopes": ["/"], "complexity": "simple", "recall_queries": []})
        elif system.startswith("You are comparing new content"):
            kind, reply = "consolidate", json.dumps({"actions": [], "insert_new": True})
        else:
            kind = "task"
            answer = next((a for key, a in self.answers.items() if key in text), "nothing to add")
            reply = f"Thought: I know the answer.\nFinal Answer: {answer}"
        self._received.append({"kind": kind, "text": text})
        return reply
