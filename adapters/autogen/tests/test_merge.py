"""Two forked teams merged with the core merge engine: the winner continues knowing the other's result."""

from __future__ import annotations

import asyncio

import agentsnap_autogen
from agentsnap_core.operations.merge import merge
from autogen_ext.models.replay import ReplayChatCompletionClient
from teams import make_team, received


def test_merge_folds_the_other_branch_into_the_team_state(repo):
    async def diverge():
        team = make_team("roundrobin", {"alice": ReplayChatCompletionClient(["alice starts"]),
                                        "bob": ReplayChatCompletionClient(["bob starts"])}, max_turns=2)
        await team.run(task="find a hotel")
        root = await agentsnap_autogen.snapshot(repo, team, "root")

        def fork_clients(i):
            return {"alice": ReplayChatCompletionClient([f"alice plan {i}"]),
                    "bob": ReplayChatCompletionClient([f"bob found hotel {i}"])}

        for i, (branch, fork_team) in enumerate(await agentsnap_autogen.fork(repo, root.id, 2, model_clients=fork_clients)):
            await fork_team.run()
            await agentsnap_autogen.snapshot(repo, fork_team, f"attempt {i}", branch=branch)

    asyncio.run(diverge())
    assert merge(repo, "attempt-1").status == "fast-forward"
    result = merge(repo, "attempt-2")
    assert result.status == "merged", [(c.get("layer"), c.get("path"), c.get("message")) for c in result.conflicts]
    merged = repo.get(result.snapshot)
    assert len(merged.parents) == 2

    # the merged trace: ours, then their tail as a marked block (the core's trace merge)
    trace = [m["content"] for m in repo.read_layer(merged, "trace")]
    assert trace.index("bob found hotel 0") < trace.index("bob found hotel 1")

    async def continue_merged():
        alice = ReplayChatCompletionClient(["alice decides"])
        team = await agentsnap_autogen.load(repo, merged.id, model_clients={
            "alice": alice, "bob": ReplayChatCompletionClient(["bob agrees"])})
        await team.run()
        return received(alice)

    first_call = asyncio.run(continue_merged())[0]
    seen = [content for _source, content in first_call]
    assert "bob found hotel 0" in seen  # our own branch's history
    note = [c for c in seen if "bob found hotel 1" in c]
    assert len(note) == 1 and "attempt-2" in note[0]  # their result arrives as one note from the merge
    # the note says everything their branch found, by whom - not only its last answer (issue 23 item 11)
    assert "- alice: alice plan 1" in note[0] and "- bob: bob found hotel 1" in note[0]


def test_a_summarizer_passed_to_merge_writes_the_note(repo):
    async def diverge():
        team = make_team("roundrobin", {"alice": ReplayChatCompletionClient(["a"]),
                                        "bob": ReplayChatCompletionClient(["b"])}, max_turns=2)
        await team.run(task="t")
        root = await agentsnap_autogen.snapshot(repo, team, "root")
        for i, (branch, fork_team) in enumerate(await agentsnap_autogen.fork(
                repo, root.id, 2, model_clients=lambda i: {"alice": ReplayChatCompletionClient([f"x{i}"]),
                                                           "bob": ReplayChatCompletionClient([f"y{i}"])})):
            await fork_team.run()
            await agentsnap_autogen.snapshot(repo, fork_team, f"attempt {i}", branch=branch)

    asyncio.run(diverge())
    merge(repo, "attempt-1")
    seen = []

    def summarizer(messages, context):
        seen.append([m.get("content") for m in messages])
        return {"role": "system", "content": "SUMMARY: y1 was best"}

    result = merge(repo, "attempt-2", summarizer=summarizer)
    assert seen and all(s == ["x1", "y1"] for s in seen)  # their tail, for the trace and for the team
    state = repo.read_layer(result.snapshot, "state")["state"]
    threads = [a["message_thread"] for a in state["agent_states"].values() if "message_thread" in a]
    assert threads and threads[0][-1]["content"] == "SUMMARY: y1 was best"
