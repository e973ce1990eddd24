"""GraphFlow (DiGraph) teams: snapshot between runs or between turns, restore into a freshly built team, continue
exactly as the uninterrupted team did (same speakers, same messages, same stops, same model inputs).

Checked against autogen-agentchat 0.7.0 and 0.7.5 (``teams/_group_chat/_graph/_digraph_group_chat.py``, identical
in both but for the cycle check): ``GraphFlowManager.save_state`` holds the thread, the turn, ``ready``,
``remaining`` and ``enqueued_any``, not ``_triggered_activation_groups`` (which ``select_speaker`` uses to put a
node's counts back when it speaks), and ``dump_component`` drops callable edge conditions without a word.

Models are ``ReplayChatCompletionClient`` scripts; a restored team gets clients positioned after the answers each
agent had given at the snapshot (what a real model would not need).
"""

from __future__ import annotations

import asyncio
from typing import Any

import agentsnap_autogen
import pytest
from autogen_agentchat.agents import AssistantAgent
from autogen_agentchat.conditions import MaxMessageTermination
from autogen_agentchat.teams import DiGraphBuilder, GraphFlow
from autogen_ext.models.replay import ReplayChatCompletionClient
from teams import received

COMPLETE = "Digraph execution is complete"  # GraphFlowManager's stop message when no node is ready (0.7.0 - 0.7.5)


def _many(name: str) -> list[str]:
    return [f"{name} says {i}" for i in range(12)]


#: every shape: the agents' scripts and the edges (source, target, options); entry point when a start node has parents
SHAPES: dict[str, dict[str, Any]] = {
    # A -> B -> C
    "sequential": {
        "scripts": {"A": _many("A"), "B": _many("B"), "C": _many("C")},
        "edges": [("A", "B", {}), ("B", "C", {})],
    },
    # A -> B if "yes", A -> C if "no"; B, C -> D (any): one branch runs
    "branch": {
        "scripts": {"A": ["no, not that"], "B": _many("B"), "C": _many("C"), "D": _many("D")},
        "edges": [("A", "B", {"condition": "yes"}), ("A", "C", {"condition": "no"}),
                  ("B", "D", {"activation_condition": "any"}), ("C", "D", {"activation_condition": "any"})],
    },
    # A -> B; B -> A if "again" (a loop), B -> C if "done"
    "loop": {
        "scripts": {"A": _many("A"), "B": ["again 1", "again 2", "again 3", "done"], "C": _many("C")},
        "edges": [("A", "B", {}), ("B", "A", {"condition": "again"}), ("B", "C", {"condition": "done"})],
        "entry": "A",
    },
    # fan-out A -> (B, C), fan-in B, C -> D (any), D -> A if "again" (group "retry"), D -> E if "done"
    "fanloop": {
        "scripts": {"A": _many("A"), "B": _many("B"), "C": _many("C"), "D": ["again 1", "again 2", "done"],
                    "E": _many("E")},
        "edges": [("A", "B", {}), ("A", "C", {}),
                  ("B", "D", {"activation_condition": "any"}), ("C", "D", {"activation_condition": "any"}),
                  ("D", "A", {"condition": "again", "activation_group": "retry"}), ("D", "E", {"condition": "done"})],
        "entry": "A",
    },
    # fan-out A -> (B, C), fan-in B, C -> D (all of both), D -> B and C if "revise" (their group "feedback", beside
    # their first parent's), D -> E if "approve"
    "groups": {
        "scripts": {"A": _many("A"), "B": _many("B"), "C": _many("C"), "D": ["revise 1", "revise 2", "approve"],
                    "E": _many("E")},
        "edges": [("A", "B", {"activation_group": "initial"}), ("A", "C", {}), ("B", "D", {}), ("C", "D", {}),
                  ("D", "B", {"condition": "revise", "activation_group": "feedback"}),
                  ("D", "C", {"condition": "revise", "activation_group": "feedback"}),
                  ("D", "E", {"condition": "approve"})],
    },
}


def clients(shape: str, used: dict[str, int] | None = None, scripts: dict[str, list[Any]] | None = None) -> dict[str, Any]:
    used, scripts = used or {}, scripts or SHAPES[shape]["scripts"]
    return {n: ReplayChatCompletionClient(list(s)[used.get(n, 0):]) for n, s in scripts.items()}


def flow(shape: str, live: dict[str, Any], edges: list[tuple[str, str, dict[str, Any]]] | None = None,
         **team_options: Any) -> GraphFlow:
    agents = {n: AssistantAgent(n, model_client=c) for n, c in live.items()}
    builder = DiGraphBuilder()
    for agent in agents.values():
        builder.add_node(agent)
    for source, target, options in edges if edges is not None else SHAPES[shape]["edges"]:
        builder.add_edge(agents[source], agents[target], **options)
    if SHAPES[shape].get("entry"):
        builder.set_entry_point(agents[SHAPES[shape]["entry"]])
    return GraphFlow(list(agents.values()), graph=builder.build(), **team_options)


def transcript(results: list[Any]) -> list[list[str]]:
    """Every run's chat messages, each run closed by ``["STOP", its stop reason]``."""
    out = []
    for result in results:
        out += [[m.source, str(m.content)] for m in result.messages]
        out.append(["STOP", str(result.stop_reason)])
    return out


async def runs(team: Any, task: str | None = None, limit: int = 12) -> list[Any]:
    """``run()`` again and again until the graph completes (the transcript the user would see)."""
    results = []
    while len(results) < limit:
        results.append(await team.run(task=task) if task is not None and not results else await team.run())
        if results[-1].stop_reason == COMPLETE:
            break
    return results


def _thread(payload: dict[str, Any]) -> list[dict[str, Any]]:
    return payload["state"]["agent_states"]["GraphManager"]["message_thread"]


def answers_given(payload: dict[str, Any], names: Any) -> dict[str, int]:
    """How many scripted answers each agent had given at the snapshot (one model call per answer)."""
    return {n: sum(1 for m in _thread(payload) if m.get("source") == n) for n in names}


def tail(straight: list[list[str]], payload: dict[str, Any], *, between_runs: bool) -> list[list[str]]:
    """The uninterrupted transcript after the snapshot: after the messages its thread held, and after the stop of
    the run before (a snapshot taken between runs, or between turns at the first turn of a run)."""
    seen, i = len(_thread(payload)), 0
    while seen:
        seen -= straight[i][0] != "STOP"
        i += 1
    assert not between_runs or straight[i][0] == "STOP", straight[i]
    return straight[i + (straight[i][0] == "STOP"):]


STOPS = {  # shape: how its runs stop before the graph completes (max_turns, or a termination condition)
    "sequential": {"max_turns": 1},
    "branch": {"max_turns": 1},
    "loop": {"max_turns": 3},
    "fanloop": {"max_turns": 2},
    "groups": {"termination_condition": MaxMessageTermination(3)},
}


def _stop(shape: str) -> dict[str, Any]:
    options = dict(STOPS[shape])
    if "termination_condition" in options:  # a fresh condition per team
        options["termination_condition"] = MaxMessageTermination(options["termination_condition"]._max_messages)
    return options


async def _resume(repo, shape, snap_id, given):
    """Load ``snap_id`` into a fresh team whose models stand where the uninterrupted ones were (``given`` answers
    used) and run it on: its transcript and what each model was sent."""
    fresh = clients(shape, given)
    team = await agentsnap_autogen.load(repo, snap_id, model_clients=fresh)
    return transcript(await runs(team)), {n: received(c) for n, c in fresh.items()}


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_a_graphflow_restored_between_runs_continues_like_the_uninterrupted_one(shape, repo):
    """After ``run()`` stopped (max_turns / termination) with nodes ready, a snapshot restored into a fresh team
    continued differently: AutoGen's state has no ``_triggered_activation_groups``, so the restored manager never
    put the count of the node it had ready back (an ``all`` group stayed at 0, an ``any`` group stayed enqueued) and
    a loop through that node ended early ("Digraph execution is complete") or took another speaker. Checked at
    every run boundary, for every shape."""

    async def uninterrupted():
        live = clients(shape)
        team = flow(shape, live, **_stop(shape))
        results, snaps, used = [], [], []
        while not results or results[-1].stop_reason != COMPLETE:
            results.append(await team.run(task="go") if not results else await team.run())
            snaps.append(await agentsnap_autogen.snapshot(repo, team, f"after run {len(results)}"))
            used.append({n: len(c.create_calls) for n, c in live.items()})
            assert len(results) < 12, transcript(results)
        return transcript(results), snaps, used, live

    straight, snaps, used, live = asyncio.run(uninterrupted())
    assert len(snaps) >= 2 and straight[-1] == ["STOP", COMPLETE]
    for snap, given in zip(snaps[:-1], used, strict=False):
        payload = repo.read_layer(snap, "state")
        assert answers_given(payload, live) == given

        resumed, sent = asyncio.run(_resume(repo, shape, snap.id, given))
        assert resumed == tail(straight, payload, between_runs=True), (snap.message, resumed)
        assert sent == {n: received(c, given[n]) for n, c in live.items()}  # every model saw what it saw uninterrupted


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_a_graphflow_restored_between_turns_continues_like_the_uninterrupted_one(shape, repo):
    """TurnSnapshots on a GraphFlow: the manager has drained its ready queue when it asks the next speaker, so every
    turn snapshot restored into a team with nothing ready - its ``run()`` ended at once ("The group chat is
    stopped."). At a fan-out (A -> B, C) the second request was snapshotted too, while the first speaker may already
    be running. Now one snapshot per turn, holding every speaker the manager chose, and each restores mid-graph (at
    a fan-out, inside a loop, mid-run before max_turns / a termination condition stops it) and continues
    identically."""

    async def uninterrupted():
        live = clients(shape)
        team = flow(shape, live, **_stop(shape))
        turns = agentsnap_autogen.TurnSnapshots(repo).attach(team)
        return transcript(await runs(team, task="go")), turns.snapshots, live

    straight, snapshots, live = asyncio.run(uninterrupted())
    chosen = [repo.read_layer(s, "state")["between_turns"]["next_speakers"] for s in snapshots]
    spoken = [m for m in straight if m[0] not in ("user", "STOP")]
    assert sum(len(c) for c in chosen) == len(spoken)  # one snapshot per turn, each with all the turn's speakers
    assert [m[0] for m in spoken] == [name for c in chosen for name in c]
    if shape in ("fanloop", "groups"):
        assert ["B", "C"] in chosen  # a fan-out boundary

    for snap in snapshots:
        payload = repo.read_layer(snap, "state")
        given = answers_given(payload, live)

        resumed, sent = asyncio.run(_resume(repo, shape, snap.id, given))
        assert resumed == tail(straight, payload, between_runs=False), (snap.message, resumed)
        assert sent == {n: received(c, given[n]) for n, c in live.items()}


def test_conditional_edges_pick_the_same_branch_after_a_restore(repo):
    """String conditions travel in the config: a restored team takes the branch the uninterrupted one took."""

    async def scenario():
        team = flow("branch", clients("branch"), max_turns=1)
        first = await team.run(task="go")
        snap = await agentsnap_autogen.snapshot(repo, team)
        restored = await agentsnap_autogen.load(repo, snap.id, model_clients=clients("branch", {"A": 1}))
        return transcript([first]), transcript(await runs(restored))

    first, resumed = asyncio.run(scenario())
    assert first == [["user", "go"], ["A", "no, not that"], ["STOP", "Maximum number of turns 1 reached."]]
    assert [m[0] for m in resumed if m[0] != "STOP"] == ["C", "D"]  # the "no" branch, never B


def test_a_fork_of_a_graphflow_continues_each_attempt_as_its_own_uninterrupted_run(repo):
    """Two attempts forked from one snapshot inside the loop (B ready): each continues exactly as a team that was
    never snapshotted and got that attempt's answers; before, both left the loop at once (B's count never came
    back), whatever B answered."""
    attempts = [["done"], ["again 2", "again 3", "done"]]  # what B answers after the fork, per attempt
    first_run = {"max_turns": 3}  # A, B ("again 1"), A: B is ready

    def scripts(i: int) -> dict[str, list[str]]:
        return {**SHAPES["loop"]["scripts"], "B": ["again 1", *attempts[i]]}

    async def scenario():
        live = clients("loop")
        team = flow("loop", live, **first_run)
        await team.run(task="go")
        snap = await agentsnap_autogen.snapshot(repo, team, "in the loop")
        used = {n: len(c.create_calls) for n, c in live.items()}
        references = []
        for i in range(2):  # each attempt uninterrupted, for reference
            ref = flow("loop", clients("loop", scripts=scripts(i)), **first_run)
            await ref.run(task="go")
            references.append(transcript(await runs(ref)))
        forks = await agentsnap_autogen.fork(repo, snap.id, 2, model_clients=lambda i: clients("loop", used, scripts(i)))
        out = []
        for branch, attempt in forks:
            out.append(transcript(await runs(attempt)))
            out.append((await agentsnap_autogen.snapshot(repo, attempt, branch, branch=branch)).parents)
        return snap, references, out

    snap, references, (one, one_parents, two, two_parents) = asyncio.run(scenario())
    assert one == references[0] and two == references[1]
    assert [m[1] for m in two if m[0] == "B"] == ["again 2", "again 3", "done"]  # the second attempt looped twice more
    assert one_parents == two_parents == [snap.id]


def _callable_flow() -> GraphFlow:
    edges = [("A", "B", {"condition": lambda m: "yes" in m.to_model_text()}), ("A", "C", {"condition": "no"}),
             ("B", "D", {"activation_condition": "any"}), ("C", "D", {"activation_condition": "any"})]
    return flow("branch", clients("branch"), edges, max_turns=1)


def test_a_callable_edge_condition_is_refused_at_snapshot_not_lost(repo):
    """AutoGen's ``dump_component`` stores a callable condition as no condition: ``load`` of such a snapshot built
    a team whose edge A -> B was unconditional (A's answer then ran B and C both), nothing said. Refused when the
    snapshot is taken, naming the edge; nothing is written."""

    async def scenario():
        team = _callable_flow()
        await team.run(task="go")
        with pytest.raises(agentsnap_autogen.UnserializableCondition, match=r"edge A -> B\b") as caught:
            await agentsnap_autogen.snapshot(repo, team)
        with pytest.raises(agentsnap_autogen.UnserializableCondition, match=r"edge A -> B\b"):
            agentsnap_autogen.TurnSnapshots(repo).attach(_callable_flow())  # before a run, not at its first turn
        return caught.value

    error = asyncio.run(scenario())
    assert error.edges == ["A -> B"]
    assert "string condition" in str(error)
    assert repo.head()[1] is None
    assert list(repo.objects.iter_oids()) == []


def test_restoring_into_a_graphflow_with_another_graph_is_refused_naming_the_difference(repo):
    """The same participants in another graph loaded without an error (AutoGen does not check ``remaining`` or
    ``ready`` against the graph) and continued along the other graph's edges. Refused, naming what differs, and the
    team is left as it was."""

    async def scenario():
        team = flow("loop", clients("loop"), max_turns=3)
        await team.run(task="go")
        snap = await agentsnap_autogen.snapshot(repo, team)
        errors = []
        others = [
            [("A", "B", {}), ("B", "A", {"condition": "retry"}), ("B", "C", {"condition": "done"})],
            [("A", "B", {}), ("B", "C", {})],
            [("A", "B", {}), ("B", "A", {"condition": lambda m: "again" in m.to_model_text()}),
             ("B", "C", {"condition": "done"})],
        ]
        for edges in others:
            other = flow("loop", clients("loop"), edges, max_turns=3)
            await other.run(task="something else")
            before = await other.save_state()
            with pytest.raises(agentsnap_autogen.IncompatibleTarget) as caught:
                await agentsnap_autogen.restore(repo, other, snap.id)
            assert await other.save_state() == before
            errors.append(str(caught.value))
        same = flow("loop", clients("loop"), max_turns=3)  # the same graph restores
        await agentsnap_autogen.restore(repo, same, snap.id)
        return errors

    retry, sequential, function = asyncio.run(scenario())
    assert "edge B -> A if 'again'" in retry and "edge B -> A if 'retry'" in retry, retry
    assert "edge B -> A if 'again'" in sequential, sequential
    assert "edge B -> C (unconditional)" in sequential, sequential
    assert "a Python function" in function, function


def test_restore_into_a_graphflow_that_ran_on_continues_like_the_uninterrupted_one(repo):
    """``restore`` into a live team that had run past the snapshot: it had its own activation groups waiting to be
    put back (A ready), the snapshot had others (B ready); the restored team has the snapshot's."""
    many = SHAPES["loop"]["scripts"]["A"]
    # the live team answers its own two runs, then what the uninterrupted team answers after the snapshot
    ran_on = {**SHAPES["loop"]["scripts"], "A": [*many[:3], *many[2:]],
              "B": ["again 1", "again 2", "again 3", "again 2", "again 3", "done"]}

    async def scenario():
        team = flow("loop", clients("loop"), max_turns=3)
        await team.run(task="go")  # A, B ("again 1"), A: B ready
        snap = await agentsnap_autogen.snapshot(repo, team)
        straight = transcript(await runs(team))
        live = flow("loop", clients("loop", scripts=ran_on), max_turns=3)
        await live.run(task="go")
        await live.run()  # B ("again 2"), A, B ("again 3"): A ready
        await agentsnap_autogen.restore(repo, live, snap.id)
        return straight, transcript(await runs(live))

    straight, resumed = asyncio.run(scenario())
    assert resumed == straight
