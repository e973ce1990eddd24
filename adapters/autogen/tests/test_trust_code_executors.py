"""A team loaded from a snapshot from elsewhere does not run code on this machine by itself.

Reported (autogen-agentchat / autogen-ext 0.7.5, tried): a team's config can hold a ``CodeExecutorAgent`` with a
``LocalCommandLineCodeExecutor``, and its state the messages buffered for that agent. ``load`` built both, and the
first ``team.run()`` executed the code blocks in those messages - in a snapshot pulled from a teammate or crafted,
code of their choosing - even with the user's own model client and ``trust_code`` off (0.7.5's approval function is
never stored: AutoGen refuses to serialize one, so a loaded executor agent runs code without asking; 0.7.0 has none). Before the fix the
first test fails: the marker file the snapshot's code makes is there.

Now a stored code executor (any ``autogen_ext.code_executors`` component) in a snapshot this store did not capture
(a digest of the captured config and state is noted in the store's own list) raises ``UntrustedCode`` before anything
is built, unless ``trust_code=True``; the store's own snapshots load as before.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import agentsnap_autogen
import pytest
from agentsnap_core import Repo
from agentsnap_core.operations.remote import clone
from autogen_agentchat.agents import AssistantAgent, CodeExecutorAgent
from autogen_agentchat.teams import RoundRobinGroupChat
from autogen_ext.code_executors.local import LocalCommandLineCodeExecutor
from autogen_ext.models.replay import ReplayChatCompletionClient


def _mid_run(tmp_path: Path, marker: Path) -> Path:
    """Their store: alice has written a code block; the executor agent speaks next (what a teammate's mid-run
    snapshot holds, or a crafted one)."""
    async def made() -> None:
        code = f"```sh\ntouch {marker}\n```"
        team = RoundRobinGroupChat([
            AssistantAgent("alice", model_client=ReplayChatCompletionClient([code])),
            CodeExecutorAgent("exec", code_executor=LocalCommandLineCodeExecutor(work_dir=str(tmp_path / "wd")))],
            max_turns=1)
        await team.run(task="write the code")
        with Repo.init(tmp_path / "theirs") as repo:
            await agentsnap_autogen.snapshot(repo, team, "mid-run")

    asyncio.run(made())
    assert not marker.exists()
    return tmp_path / "theirs"


def _run(repo: Repo, **options: object) -> None:
    async def go() -> None:
        team = await agentsnap_autogen.load(repo, "main", model_clients=ReplayChatCompletionClient(["fine"]), **options)
        await team.run()

    asyncio.run(go())


@pytest.mark.filterwarnings("ignore:No approval function")
def test_a_cloned_team_with_a_local_code_executor_is_refused_before_it_runs_code(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    repo, _ = clone(str(_mid_run(tmp_path, marker) / ".agentsnap"), tmp_path / "mine")
    with pytest.raises(agentsnap_autogen.UntrustedCode, match=r"LocalCommandLineCodeExecutor.*trust_code=True"):
        _run(repo)
    assert not marker.exists(), "the snapshot's code ran on this machine"
    with pytest.raises(agentsnap_autogen.UntrustedCode):  # fork builds its teams the same way
        asyncio.run(agentsnap_autogen.fork(repo, "main", 1, model_clients=[ReplayChatCompletionClient(["x"])]))
    assert not marker.exists()


@pytest.mark.filterwarnings("ignore:No approval function")
def test_own_snapshots_and_trust_code_load_code_executors_as_before(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    origin = _mid_run(tmp_path, marker)
    with Repo.open(origin) as own:
        _run(own)
    assert marker.exists()  # the store's own team runs its own code, as it did before the snapshot
    marker.unlink()
    repo, _ = clone(str(origin / ".agentsnap"), tmp_path / "mine")
    _run(repo, trust_code=True)
    assert marker.exists()


@pytest.mark.filterwarnings("ignore:No approval function")
def test_restore_into_your_own_team_that_runs_code_refuses_a_cloned_state(tmp_path: Path) -> None:
    """``restore`` (and ``repo.restore_into``) into the user's own team with a local executor: the cloned state's
    buffered code would run at the next ``run()``. Refused unless ``trust_code=True``; the store's own state loads."""
    marker = tmp_path / "ran"
    origin = _mid_run(tmp_path, marker)
    repo, _ = clone(str(origin / ".agentsnap"), tmp_path / "mine")

    def team() -> RoundRobinGroupChat:
        return RoundRobinGroupChat([
            AssistantAgent("alice", model_client=ReplayChatCompletionClient(["fine"])),
            CodeExecutorAgent("exec", code_executor=LocalCommandLineCodeExecutor(work_dir=str(tmp_path / "wd2")))],
            max_turns=1)

    mine = team()
    with pytest.raises(agentsnap_autogen.UntrustedCode, match=r"'exec'.*trust_code=True"):
        asyncio.run(agentsnap_autogen.restore(repo, mine, "main"))
    with pytest.raises(agentsnap_autogen.UntrustedCode):
        repo.restore_into(mine, "main")
    asyncio.run(mine.run(task="nothing to run"))
    assert not marker.exists()
    trusted = team()
    asyncio.run(agentsnap_autogen.restore(repo, trusted, "main", trust_code=True))
    asyncio.run(trusted.run())
    assert marker.exists()
    marker.unlink()
    with Repo.open(origin) as own:
        again = team()
        own.restore_into(again, "main")
        asyncio.run(again.run())
    assert marker.exists()
