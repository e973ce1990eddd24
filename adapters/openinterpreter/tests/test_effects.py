"""agentsnap's effects kit: restore in the middle of a tool loop -> exactly one email.

The email tool is a custom Open Interpreter language (``BaseLanguage`` subclass, the framework's own
extension point): the model writes an ``email`` code block, the computer runs it, and the adapter's
``computer.run`` guard turns it into one effect in the ledger.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from agentsnap_core.layers.effects import Effects
from agentsnap_core.testing.effects import EffectsCase, assert_effects
from agentsnap_openinterpreter import attach, session_of
from conftest import new_interpreter
from interpreter import BaseLanguage, OpenInterpreter


def email_language(send: Callable[..., Any]) -> type[BaseLanguage]:
    class Email(BaseLanguage):
        name = "email"

        def __init__(self, computer: Any = None) -> None:  # Terminal passes the computer (co_argcount > 1)
            self.computer = computer

        def run(self, code: str):  # type: ignore[override]
            to, body = code.strip().split("|", 1)
            yield {"type": "console", "format": "output", "content": json.dumps(send(to, body), sort_keys=True)}

        def stop(self) -> None:
            pass

        def terminate(self) -> None:
            pass

    return Email


def make(send: Callable[..., Any], fx: Effects) -> OpenInterpreter:
    def reply(messages: list[dict[str, Any]]) -> str:
        last = messages[-1]
        if last["role"] == "user" and str(last["content"]).startswith("send the report"):
            variant = str(last["content"])[len("send the report") :]
            return f"Sending.\n```email\nbob@example.com|Hi Bob{variant or ','} the report is ready\n```"
        return "Noted."

    interp = new_interpreter(reply)
    interp.computer.terminal.languages.append(email_language(send))
    return attach(interp, effects=fx)


def step(interp: OpenInterpreter, i: int, variant: str) -> None:
    session = session_of(interp)
    errors = len(session.effect_errors)
    interp.chat(f"send the report{variant}" if i == 1 else f"step {i}", display=False)
    if len(session.effect_errors) > errors:  # Open Interpreter shows it to the model; the kit wants it raised
        raise session.effect_errors[-1]


def test_effects_kit_passes_for_an_open_interpreter_email_language(tmp_path):
    assert_effects(EffectsCase("openinterpreter", make, step, send_step=1), tmp_path)


def test_forks_defer_an_irreversible_shell_command_until_one_is_applied(work, repo, interpreters, tmp_path):
    from agentsnap_core.layers.effects import apply_deferred
    from agentsnap_openinterpreter import restore
    from conftest import scripted

    counter = tmp_path / "deploys.log"
    script = {"deploy": f"```shell\necho deployed >> {counter}\n```"}
    interp = attach(interpreters(scripted(script)), repo)
    snap = interp.snapshot("before-deploy")
    forks = repo.fork(snap.id, 2)  # effects policy "defer" by default
    for f in forks:
        attempt = attach(interpreters(scripted(script)), repo, effects=Effects(repo, f["branch"]))
        restore(repo, snap.id, attempt, world=False)
        attempt.chat("deploy", display=False)
        assert session_of(attempt).cells[-1]["status"] == "deferred"
        assert "it was not run" in attempt.messages[-2]["content"]  # the model was told
    assert not counter.exists()  # no fork deployed anything

    applied = apply_deferred(repo, forks[0]["branch"])
    assert len(applied["applied"]) == 1
    assert counter.read_text().splitlines() == ["deployed"]  # run once, for real, on promotion
    again = apply_deferred(repo, forks[1]["branch"])
    assert counter.read_text().splitlines() == ["deployed"] and again["conflicts"]  # the second fork's is flagged
