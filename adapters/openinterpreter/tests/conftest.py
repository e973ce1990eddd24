"""Shared fixtures: an offline Open Interpreter (scripted model) working in a fresh repository."""

from __future__ import annotations

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("DISABLE_TELEMETRY", "true")

from collections.abc import Callable, Iterator  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import pytest  # noqa: E402
from agentsnap_core.testing.servers import need_module  # noqa: E402

need_module("interpreter")

from agentsnap_core import Repo  # noqa: E402
from agentsnap_openinterpreter import use_offline_model  # noqa: E402
from interpreter import OpenInterpreter  # noqa: E402


def new_interpreter(replies: Any) -> OpenInterpreter:
    """A real OpenInterpreter that answers from ``replies`` (no network, no key, no telemetry)."""
    interp = OpenInterpreter(disable_telemetry=True, conversation_history=False, auto_run=True, offline=True)
    use_offline_model(interp, replies)
    return interp


def scripted(script: dict[str, str]) -> Callable[[list[dict[str, Any]]], str]:
    """A deterministic model: the reply to the last user message, and "Done." after code output."""

    def reply(messages: list[dict[str, Any]]) -> str:
        last = messages[-1]
        if last["role"] == "user" and last["content"] in script:
            return script[last["content"]]
        return "Done."

    return reply


@pytest.fixture
def work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The interpreter's working directory (kernels start in the process's cwd)."""
    d = tmp_path / "work"
    d.mkdir()
    monkeypatch.chdir(d)
    return d


@pytest.fixture
def repo(work: Path) -> Iterator[Repo]:
    r = Repo.init(work)
    yield r
    r.close()


@pytest.fixture
def interpreters() -> Iterator[Callable[[Any], OpenInterpreter]]:
    """Make interpreters; their kernels and shells are shut down after the test."""
    made: list[OpenInterpreter] = []

    def make(replies: Any) -> OpenInterpreter:
        made.append(new_interpreter(replies))
        return made[-1]

    yield make
    for interp in made:
        interp.computer.terminate()
