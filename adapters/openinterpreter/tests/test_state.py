"""Settings are the state layer; API keys never reach the store."""

from __future__ import annotations

from agentsnap_openinterpreter import attach, restore
from conftest import scripted


def test_settings_round_trip_and_api_keys_are_redacted(work, repo, interpreters):
    interp = attach(interpreters(scripted({})), repo)
    interp.system_message = "You are a careful assistant."
    interp.custom_instructions = "Answer in French."
    interp.auto_run = False
    interp.max_output = 1234
    interp.llm.temperature = 0.3
    interp.llm.api_key = "sk-live-SECRET-1234567890"
    interp.llm.api_base = "https://alice:hunter2@llm.example.com/v1"
    snap = interp.snapshot("configured")

    state = repo.read_layer(snap, "state")
    blob = repr(state) + repr(repo.read_layer(snap, "trace")) + repr(repo.read_layer(snap, "cells"))
    assert "SECRET" not in blob and "hunter2" not in blob
    assert "llm.api_key" in state["redacted"]

    fresh = interpreters(scripted({}))
    fresh.llm.api_key = "sk-mine"
    report = restore(repo, "configured", fresh, world=False)
    assert fresh.system_message == "You are a careful assistant."
    assert fresh.custom_instructions == "Answer in French."
    assert (fresh.auto_run, fresh.max_output, fresh.llm.temperature) == (False, 1234, 0.3)
    assert fresh.llm.api_key == "sk-mine"  # the restored interpreter keeps its own key
    assert fresh.llm.api_base is None  # a URL with a password is not written back: the interpreter keeps its own
    assert "llm.api_base" in report.kept and any("llm.api_key" in k for k in report.kept)


def test_restore_keeps_the_offline_model_loaded(work, repo, interpreters):
    interp = attach(interpreters(scripted({"hi": "Hello."})), repo)
    interp.chat("hi", display=False)
    interp.snapshot("s")
    fresh = interpreters(scripted({"again": "Hello again."}))
    restore(repo, "s", fresh, world=False)
    assert fresh.llm._is_loaded  # same model name: no reload on the next chat
    fresh.chat("again", display=False)
    assert fresh.messages[-1]["content"] == "Hello again."


def test_tokens_in_query_strings_and_token_shaped_values_are_redacted(work, repo, interpreters):
    """Issue 23 item 9: the core's one redaction (key names and value shapes) guards the settings too."""
    interp = attach(interpreters(scripted({})), repo)
    interp.llm.api_base = "https://llm.example.com/v1?api_key=QRYTOKEN-5be0c7d2&region=eu"
    interp.custom_instructions = "Clone with ghp_0123456789abcdefghijABCDEFGHIJ0123 when asked."
    interp.loop_breakers = ["stop", "postgresql://bot:DBPASS-77@db.internal/app"]
    snap = interp.snapshot("configured")

    state = repo.read_layer(snap, "state")
    blob = repr(state)
    for secret in ("QRYTOKEN", "ghp_0123456789", "DBPASS"):
        assert secret not in blob
    assert state["settings"]["llm"]["api_base"] == "https://llm.example.com/v1?api_key=<redacted>&region=eu"
    assert {r.split(" ")[0] for r in state["redacted"]} >= {"llm.api_base", "interpreter.custom_instructions",
                                                            "interpreter.loop_breakers"}

    fresh = interpreters(scripted({}))
    report = restore(repo, "configured", fresh, world=False)
    assert fresh.llm.api_base is None and fresh.loop_breakers != interp.loop_breakers  # redacted values are not written
    assert {"llm.api_base", "interpreter.custom_instructions", "interpreter.loop_breakers"} <= set(report.kept)
