"""The effects part of the conformance kit: "restore in the middle of a tool loop -> exactly one email".

An adapter describes an agent whose tool loop sends one email through its framework's tool object as an
:class:`EffectsCase`; :func:`check_effects` runs it against a real store and a real outbox (an append-only
file, fsync'd per email) and proves:

``send_once``              the uninterrupted run sends exactly one email;
``restore_mid_loop``       restoring a snapshot taken before the send and re-running the step sends nothing more;
``restore_twice``          doing it again (new session, new agent) still leaves exactly one email;
``divergent_args``         a re-run whose model regenerates slightly different arguments is reported, not sent;
``fork_inherits``         forks made after the send see it as done (replayed, no email);
``fork_defers``            ``fork -n 3`` before the send: no email until one fork is applied, then exactly one;
                           applying a second fork sends nothing and is flagged ("ran on both branches");
``ledger_verifies``        the store, ledger included, verifies.

:func:`reference_case` is the kit run on a plain ``state_dict`` agent (core's own tests use it).
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentsnap_core.layers.effects import EffectDivergence, Effects, apply_deferred, effect, wrap_tool
from agentsnap_core.repository.repo import Repo
from agentsnap_core.testing import CheckResult, Report, _check

__all__ = ["EffectsCase", "Outbox", "MailAgent", "check_effects", "assert_effects", "reference_case"]


class Outbox:
    """An append-only file of sent emails: the real side effect the checks count."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def send(self, to: str, body: str) -> dict[str, Any]:
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps({"to": to, "body": body}) + "\n")
            f.flush()
            os.fsync(f.fileno())
        return {"status": "sent", "n": len(self.emails())}

    def emails(self) -> list[dict[str, Any]]:
        try:
            return [json.loads(line) for line in self.path.read_text(encoding="utf-8").splitlines() if line]
        except FileNotFoundError:
            return []


@dataclass
class EffectsCase:
    """An agent whose tool loop sends one email.

    Attributes:
        name: shown in reports.
        make: ``make(send, fx)`` returns a fresh agent whose email tool calls ``send(to, body)``; the adapter
            wraps its framework tool object with :func:`agentsnap_core.layers.effects.wrap_tool` (``session=fx``).
        step: ``step(agent, i, variant)`` runs step ``i`` of the loop (the kit sets the position with
            ``fx.step(i)``); at ``send_step`` the agent must call the tool with a body that contains
            ``variant`` (``""`` normally, ``"!"`` when the kit asks for a regenerated argument).
        send_step: the step that sends the email (the kit snapshots just before it).
    """

    name: str
    make: Callable[[Callable[..., Any], Effects], Any]
    step: Callable[[Any, int, str], Any]
    send_step: int = 1


def check_effects(case: EffectsCase, workdir: str | os.PathLike[str] | None = None) -> Report:
    """Run the effects checks; failures are recorded in the report, never raised."""
    report = Report(f"{case.name} (effects)")
    tmp = tempfile.TemporaryDirectory(prefix="agentsnap-effects-") if workdir is None else None
    base = Path(tmp.name if tmp else workdir)  # type: ignore[arg-type]
    repo = Repo.init(base / "repo")
    outbox = Outbox(base / "outbox.jsonl")
    try:
        _run(case, repo, outbox, report)
    finally:
        repo.close()
        if tmp is not None:
            tmp.cleanup()
    return report


def _run(case: EffectsCase, repo: Repo, outbox: Outbox, report: Report) -> None:
    def run_to(agent: Any, fx: Effects, upto: int, variant: str = "", start: int = 0) -> None:
        for i in range(start, upto):
            with fx.step(i):
                case.step(agent, i, variant)

    state: dict[str, Any] = {}

    @_check(report, "send_once")
    def _() -> str | None:
        fx = Effects(repo)
        agent = case.make(outbox.send, fx)
        run_to(agent, fx, case.send_step)
        state["snap"] = repo.capture(agent, "before the send")
        run_to(agent, fx, case.send_step + 1, start=case.send_step)
        n = len(outbox.emails())
        return None if n == 1 else f"the uninterrupted run sent {n} emails, expected 1"

    if "snap" not in state:
        return

    def rerun(variant: str = "", policy: str = "raise") -> tuple[Effects, Any]:
        fx = Effects(repo, on_divergence=policy)
        agent = case.make(outbox.send, fx)
        repo.restore_into(agent, state["snap"].id)
        run_to(agent, fx, case.send_step + 1, variant, start=case.send_step)
        return fx, agent

    @_check(report, "restore_mid_loop")
    def _() -> str | None:
        fx, _agent = rerun()
        n = len(outbox.emails())
        if n != 1:
            return f"after restore and re-run the outbox has {n} emails, expected 1"
        return None if any(s == "replayed" for s, _ in fx.events) else f"the re-run did not replay the recorded call: {fx.events}"

    @_check(report, "restore_twice")
    def _() -> str | None:
        rerun()
        n = len(outbox.emails())
        return None if n == 1 else f"after two restores the outbox has {n} emails, expected 1"

    @_check(report, "divergent_args")
    def _() -> str | None:
        try:
            rerun("!")
            return "a re-run with different arguments was not reported (expected EffectDivergence)"
        except EffectDivergence:
            pass
        fx, _ = rerun("!", policy="replay")
        n = len(outbox.emails())
        if n != 1:
            return f"a divergent re-run changed the outbox to {n} emails"
        return None if fx.divergences else "the replayed divergence is not in Effects.divergences"

    @_check(report, "fork_inherits")
    def _() -> str | None:
        for f in repo.fork(state["snap"].id, 2):
            fx = Effects(repo, f["branch"])
            agent = case.make(outbox.send, fx)
            repo.restore_into(agent, state["snap"].id)
            run_to(agent, fx, case.send_step + 1, start=case.send_step)
            if not any(s == "replayed" for s, _ in fx.events):
                return f"fork {f['branch']} did not see main's email as done: {fx.events}"
        n = len(outbox.emails())
        return None if n == 1 else f"forks made after the send changed the outbox to {n} emails"

    @_check(report, "fork_defers")
    def _() -> str | None:
        other = Repo.init(Path(repo.root).parent / "repo-forks")
        box = Outbox(Path(repo.root).parent / "outbox-forks.jsonl")
        try:
            fx = Effects(other)
            agent = case.make(box.send, fx)
            run_to(agent, fx, case.send_step)
            snap = other.capture(agent, "before the send")
            forks = other.fork(snap.id, 3)
            for f in forks:
                fx = Effects(other, f["branch"])
                agent = case.make(box.send, fx)
                other.restore_into(agent, snap.id)
                run_to(agent, fx, case.send_step + 1, start=case.send_step)
            if box.emails():
                return f"forks sent {len(box.emails())} emails before any merge (policy defer)"
            first = apply_deferred(other, forks[0]["branch"])
            if len(box.emails()) != 1:
                return f"applying one fork made {len(box.emails())} emails, expected 1 ({first})"
            second = apply_deferred(other, forks[1]["branch"])
            if len(box.emails()) != 1:
                return f"applying a second fork made {len(box.emails())} emails, expected 1"
            return None if second["conflicts"] else f"the second branch's email was not flagged: {second}"
        finally:
            other.close()

    @_check(report, "ledger_verifies")
    def _() -> str | None:
        rep = repo.verify()
        if not rep["ok"]:
            return f"verify found {rep['problems'][:3]}"
        return None if rep["effects"]["status"] == "ok" else f"ledger status {rep['effects']['status']}"


def assert_effects(case: EffectsCase, workdir: str | os.PathLike[str] | None = None) -> Report:
    """Run :func:`check_effects` and raise ``AssertionError`` with the report when a check fails."""
    report = check_effects(case, workdir)
    assert report.passed, str(report)
    return report


# ---------------------------------------------------------------------------------------------- reference
class MailAgent:
    """A tiny tool-loop agent (state_dict/load_state_dict): step ``send_step`` emails Bob."""

    def __init__(self, tools: dict[str, Callable[..., Any]], send_step: int = 1) -> None:
        self.tools = tools
        self.send_step = send_step
        self.step = 0
        self.messages: list[dict[str, Any]] = []

    def run_step(self, i: int, variant: str = "") -> None:
        if i == self.send_step:
            result = self.tools["send_email"](to="bob@example.com", body=f"Hi Bob{variant or ','} the report is ready")
            self.messages.append({"role": "tool", "content": json.dumps(result, sort_keys=True, default=str)})
        else:
            self.messages.append({"role": "assistant", "content": f"thinking {i}"})
        self.step = i + 1

    def state_dict(self) -> dict[str, Any]:
        return {"step": self.step, "messages": list(self.messages)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.step = int(state["step"])
        self.messages = list(state["messages"])


def _make_reference(send: Callable[..., Any], fx: Effects) -> MailAgent:
    def send_email(to: str, body: str) -> dict[str, Any]:
        return send(to, body)

    return MailAgent({"send_email": wrap_tool(send_email, fx, simulate=lambda to, body: {"status": "deferred"})})


def reference_case() -> EffectsCase:
    """The kit's reference agent (a plain ``state_dict`` object, no framework)."""
    return EffectsCase("reference", _make_reference, lambda agent, i, variant: agent.run_step(i, variant))


def outbox_tool(path: str | os.PathLike[str]) -> Callable[..., Any]:
    """An ``@effect``-guarded ``send_email(to, body)`` writing to the outbox at ``path`` (for scripts)."""
    box = Outbox(path)

    @effect(name="send_email", simulate=lambda to, body: {"status": "deferred"})
    def send_email(to: str, body: str) -> dict[str, Any]:
        return box.send(to, body)

    return send_email


_ = CheckResult
