"""The Open Interpreter case for agentsnap's conformance kit (importable by the kit's fresh process).

One step is one chat turn: the scripted model answers ``step i`` with a shell cell ``echo step-i``,
then "Noted." The step also changes a setting, so the state layer is checked as well as the trace.
"""

from __future__ import annotations

import os
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from agentsnap_core.testing import AdapterCase  # noqa: E402
from agentsnap_openinterpreter import attach, session_of, use_offline_model  # noqa: E402
from interpreter import OpenInterpreter  # noqa: E402


def _reply(messages: list[dict[str, Any]]) -> str:
    last = messages[-1]
    if last["role"] == "user" and str(last["content"]).startswith("step "):
        return f"Running it.\n```shell\necho {last['content'].replace(' ', '-')}\n```"
    return "Noted."


def make() -> OpenInterpreter:
    interp = OpenInterpreter(disable_telemetry=True, conversation_history=False, auto_run=True, offline=True)
    use_offline_model(interp, _reply)
    return attach(interp)


def step(interp: OpenInterpreter, i: int) -> None:
    interp.custom_instructions = f"after step {i}"
    interp.chat(f"step {i}", display=False)


def observe(interp: OpenInterpreter) -> dict[str, Any]:
    cells = [
        [c["language"], c["code"], c["kind"], "".join(o["content"] for o in c["output"])]
        for c in session_of(interp).cells
    ]
    return {"messages": interp.messages, "custom_instructions": interp.custom_instructions, "cells": cells}


def case() -> AdapterCase:
    return AdapterCase("openinterpreter", make, step, observe, factory="conformance_case:case")
