"""CrewAI tools wrapped by the effects ledger: a restored run does not send the email twice."""

from __future__ import annotations

from pathlib import Path

import pytest
from agentsnap_core import AgentSnapError, Repo
from agentsnap_core.layers.effects import Effects
from agentsnap_crewai.effects import guard_tool
from crewai import Agent, Crew, Task
from crewai.tools import BaseTool, tool
from crewai_fakes import ScriptedLLM

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


class ActingLLM(ScriptedLLM):
    """Calls ``send_email`` (ReAct text) for 'Email Bob' until it has seen the tool's result."""

    def call(self, messages, *args, **kwargs):  # type: ignore[no-untyped-def]
        text = messages if isinstance(messages, str) else "\n".join(str(m.get("content", "")) for m in messages)
        if "Email Bob" in text and "sent #" not in text:
            self._received.append({"kind": "task", "text": text})
            return 'Thought: I will send it.\nAction: send_email\nAction Input: {"to": "bob@example.com"}'
        return super().call(messages, *args, **kwargs)


def test_a_crew_rerun_after_restore_does_not_send_twice(tmp_path: Path) -> None:
    """A real crew calls the guarded tool through CrewAI's tool loop; the re-run gets the recorded result."""
    SENT.clear()
    repo = Repo.init(tmp_path / "repo")

    def run() -> tuple[str, list, list[str]]:
        llm = ActingLLM(answers={"Email Bob": "done"})
        agent = Agent(role="Assistant", goal="Send reports", backstory="Reliable", llm=llm, tools=[guard_tool(send_email)])
        crew = Crew(agents=[agent], tasks=[Task(description="Email Bob the report.", expected_output="confirmation", agent=agent)])
        with Effects(repo) as fx, fx.step(0):
            out = crew.kickoff()
        return out.raw, fx.events, llm.task_prompts()

    first = run()
    assert first[0] == "done" and [s for s, _ in first[1]] == ["run"] and SENT == ["bob@example.com"]
    second = run()
    assert [s for s, _ in second[1]] == ["replayed"] and SENT == ["bob@example.com"]
    assert "Observation: sent #1 to bob@example.com" in second[2][-1]  # the LLM saw the recorded result
