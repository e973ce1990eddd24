"""Fork one snapshot into three teams that diverge; their snapshots share storage."""

from __future__ import annotations

import asyncio
import random

import agentsnap_autogen
from autogen_ext.models.replay import ReplayChatCompletionClient
from teams import make_team, said


def _stored_bytes(repo) -> int:
    return sum(len(repo.objects.get_stored(oid)) for oid in repo.objects.iter_oids())


def _document(words: int = 200_000) -> str:
    rng = random.Random(7)
    vocab = [f"w{rng.randrange(1 << 30):x}" for _ in range(5000)]
    return " ".join(rng.choice(vocab) for _ in range(words))


def test_fork_three_teams_diverge_share_storage_and_restore_independently(repo):
    doc = _document()
    fork_said = {}

    async def scenario():
        base = {"alice": ReplayChatCompletionClient(["alice reads"]), "bob": ReplayChatCompletionClient(["bob reads"])}
        team = make_team("roundrobin", base, max_turns=2)
        await team.run(task="summarise this document:\n" + doc)
        empty = _stored_bytes(repo)
        root = await agentsnap_autogen.snapshot(repo, team, "read the document")
        base_growth = _stored_bytes(repo) - empty

        def fork_clients(i):
            return {
                "alice": ReplayChatCompletionClient([f"alice plan {i}"]),
                "bob": ReplayChatCompletionClient([f"bob plan {i}"]),
            }

        forks = await agentsnap_autogen.fork(repo, root.id, 3, model_clients=fork_clients)
        before = _stored_bytes(repo)
        tips = {}
        for i, (branch, fork_team) in enumerate(forks):
            result = await fork_team.run()
            fork_said[branch] = said(result.messages)
            assert fork_said[branch] == [["alice", f"alice plan {i}"], ["bob", f"bob plan {i}"]]
            tips[branch] = await agentsnap_autogen.snapshot(repo, fork_team, f"attempt {i}", branch=branch)
        forks_growth = _stored_bytes(repo) - before
        return root, tips, base_growth, forks_growth

    root, tips, base_growth, forks_growth = asyncio.run(scenario())

    # a diverged fork stores only its new tail plus one boundary chunk per copy of the shared history
    # (thread, trace, each agent's context): far less than a full copy
    assert forks_growth / 3 < 0.25 * base_growth, (forks_growth, base_growth)
    print(f"\nbase snapshot {base_growth} B; 3 diverged fork snapshots together {forks_growth} B "
          f"({forks_growth / base_growth:.1%} of one base)")
    # each branch points at its own child of the root
    for branch, snap in tips.items():
        assert repo.branches()[branch] == snap.id
        assert snap.parents == [root.id]

    async def restore_each():
        out = {}
        for branch in tips:
            team = await agentsnap_autogen.load(repo, branch, model_clients=ReplayChatCompletionClient(["next"]))
            state = await team.save_state()
            thread = state["agent_states"]["RoundRobinGroupChatManager"]["message_thread"]
            out[branch] = [[m["source"], m["content"]] for m in thread[-2:]]
        return out

    restored = asyncio.run(restore_each())
    assert restored == fork_said  # each fork restores its own tail, not another's
    assert len({tuple(map(tuple, v)) for v in restored.values()}) == 3
    assert repo.verify()["ok"]
