"""CrewAI tools wrapped by the effects ledger: a restored run does not send the email twice."""

from __future__ import annotations

from pathlib import Path

import pytest
from agentsnap import AgentSnapError, Repo
from agentsnap.effects import Effects
from agentsnap_crewai.effects import guard_tool
from crewai.tools import BaseTool, tool

SENT: list[str] = []


@tool("send_email")
def send_email(to: str) -> str:
    """Send an email (irreversible)."""
    SENT.append(to)
    return f"sent #{len(SENT)} to {to}"


class Charge(BaseTool):
    name: str = "charge_card"
    description: str = "Charge a card (irreversible)."

    def _run(self, amount: int) -> str:
        SENT.append(f"charge {amount}")
        return f"charged {amount}"


@pytest.mark.parametrize("make", [lambda: send_email, Charge], ids=["function-tool", "basetool-subclass"])
def test_a_restored_run_replays_the_recorded_result(tmp_path: Path, make) -> None:
    SENT.clear()
    repo = Repo.init(tmp_path / "repo")
    guarded = guard_tool(make())
    args = {"to": "bob@example.com"} if guarded.name == "send_email" else {"amount": 5}
    with Effects(repo) as fx, fx.step(0):
        first = guarded.run(**args)
    assert len(SENT) == 1
    with Effects(repo) as again, again.step(0):  # the same step re-run after a restore
        second = guarded.run(**args)
    assert second == first and len(SENT) == 1
    assert again.events == [("replayed", again.events[0][1])]


def test_guarded_tool_outside_a_session_fails_clearly() -> None:
    with pytest.raises(AgentSnapError, match="no effects session"):
        guard_tool(send_email).run(to="x")
    assert send_email.run(to="y").startswith("sent")  # the original tool is not modified
