"""A well-behaved agent for the kit: state via ``state_dict`` (core's default plugin)."""

from __future__ import annotations

from typing import Any

from agentsnap_core.testing import AdapterCase


class CounterAgent:
    """A toy agent whose state and messages change deterministically with each step."""

    def __init__(self) -> None:
        self.counter = 0
        self.notes: dict[str, Any] = {}
        self.messages: list[dict[str, Any]] = []

    def step(self, i: int) -> None:
        self.counter += i + 1
        self.notes[f"step{i}"] = {"seen": self.counter, "tags": ["a", i]}
        self.messages.append({"id": f"m{i}", "role": "assistant", "content": f"step {i} -> {self.counter}"})

    def state_dict(self) -> dict[str, Any]:
        return {"counter": self.counter, "notes": self.notes}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.counter = state["counter"]
        self.notes = state["notes"]


def case() -> AdapterCase:
    return AdapterCase(
        name="reference CounterAgent",
        make=CounterAgent,
        step=lambda a, i: a.step(i),
        observe=lambda a: {"state": a.state_dict(), "messages": a.messages},
        factory="agentsnap_core.testing.reference:case",
    )
