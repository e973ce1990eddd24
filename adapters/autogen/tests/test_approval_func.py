"""A team whose code executor asks for approval can be snapshotted, and comes back asking.

Reported (autogen-agentchat 0.7.5, tried): AutoGen warns at every ``CodeExecutorAgent`` built without an
``approval_func`` ("code will be executed automatically without human oversight") and recommends one, but its
``dump_component`` refuses an agent that has one (``ValueError: Cannot serialize CodeExecutorAgent with
approval_func set``): ``agentsnap_autogen.snapshot`` of such a team failed with that traceback, so the teams set up
as AutoGen advises could not be snapshotted at all. Now the config is dumped without the function (the live agent
keeps it), the snapshot names the agents that had one, and ``load`` / ``fork`` refuse to build them without it
(``MissingApproval``) unless the caller hands it back (``approval_funcs={agent: fn}``) - never an executor that
silently stopped asking. Before the fix every test here fails at the snapshot.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import agentsnap_autogen
import pytest
from agentsnap_core import Repo
from agentsnap_core.errors import InvalidInput
from autogen_ext.code_executors.local import LocalCommandLineCodeExecutor
from autogen_ext.models.replay import ReplayChatCompletionClient

agents = pytest.importorskip("autogen_agentchat.agents")
if not hasattr(agents, "ApprovalResponse"):  # autogen-agentchat 0.7.0 has no approval function to keep
    pytest.skip("this autogen-agentchat has no CodeExecutorAgent approval_func (0.7.5 has)", allow_module_level=True)
from autogen_agentchat.agents import ApprovalResponse, AssistantAgent, CodeExecutorAgent  # noqa: E402
from autogen_agentchat.teams import RoundRobinGroupChat  # noqa: E402


class Approver:
    def __init__(self, approve: bool) -> None:
        self.approve, self.asked = approve, []

    def __call__(self, request: Any) -> Any:
        self.asked.append(request.code)
        return ApprovalResponse(approved=self.approve, reason="reviewed")


def _team(tmp_path: Path, marker: Path, approver: Approver) -> Any:
    return RoundRobinGroupChat([
        AssistantAgent("alice", model_client=ReplayChatCompletionClient([f"```sh\ntouch {marker}\n```"])),
        CodeExecutorAgent("exec", code_executor=LocalCommandLineCodeExecutor(work_dir=str(tmp_path / "wd")),
                          approval_func=approver)], max_turns=1)


def _snapshotted(tmp_path: Path, marker: Path) -> tuple[Repo, Any, Approver]:
    approver = Approver(approve=False)
    team = _team(tmp_path, marker, approver)
    asyncio.run(team.run(task="write the code"))  # alice has written the code; exec speaks next
    repo = Repo.init(tmp_path / "work")
    asyncio.run(agentsnap_autogen.snapshot(repo, team, "mid-run"))
    return repo, team, approver


def test_a_team_with_an_approval_func_snapshots_and_keeps_it(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    repo, team, approver = _snapshotted(tmp_path, marker)
    asyncio.run(team.run())  # the live team still asks: denied, nothing ran
    assert approver.asked and not marker.exists()
    assert repo.read_layer(repo.get("HEAD"), "state")["approval"] == ["exec"]


def test_load_asks_for_the_approval_func_back_and_uses_it(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    repo, _team_live, _ = _snapshotted(tmp_path, marker)
    with pytest.raises(agentsnap_autogen.MissingApproval, match=r"'exec'.*approval_funcs="):
        asyncio.run(agentsnap_autogen.load(repo, "HEAD", model_clients=ReplayChatCompletionClient(["x"])))
    with pytest.raises(agentsnap_autogen.MissingApproval):
        asyncio.run(agentsnap_autogen.fork(repo, "HEAD", 1, model_clients=[ReplayChatCompletionClient(["x"])]))
    deny = Approver(approve=False)
    loaded = asyncio.run(agentsnap_autogen.load(repo, "HEAD", model_clients=ReplayChatCompletionClient(["x"]),
                                                approval_funcs={"exec": deny}))
    asyncio.run(loaded.run())
    assert deny.asked and not marker.exists()  # asked before running, and denied: the code did not run
    with pytest.raises(InvalidInput, match="bob"):  # a name the snapshot has no such agent of
        asyncio.run(agentsnap_autogen.load(repo, "HEAD", model_clients=ReplayChatCompletionClient(["x"]),
                                           approval_funcs={"exec": deny, "bob": deny}))


def test_restore_into_the_live_team_keeps_its_approval_func(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    repo, _team_live, _ = _snapshotted(tmp_path, marker)
    approver = Approver(approve=False)
    fresh = _team(tmp_path, marker, approver)
    asyncio.run(agentsnap_autogen.restore(repo, fresh, "HEAD"))
    asyncio.run(fresh.run())
    assert approver.asked and not marker.exists()
