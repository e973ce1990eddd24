"""``agentsnap_core.rollback`` (agent + files) and ``@agentsnap_core.checkpoint`` / ``AutoSnapshot``."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import agentsnap_core
import pytest
from agentsnap_core.errors import InvalidInput


class Agent(agentsnap_core.Snapshottable):
    def __init__(self) -> None:
        self.memory: list[str] = []
        self.calls = 0

    def step(self, text: str) -> int:
        self.memory.append(text)
        self.calls += 1
        return self.calls


class PlainAgent:
    """Not Snapshottable: only state_dict()/load_state_dict() (the core's default plugin handles it)."""

    def __init__(self) -> None:
        self.data: dict[str, Any] = {"n": 0}

    def state_dict(self) -> dict[str, Any]:
        return self.data

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.data = state


def test_rollback_restores_agent_and_reraises() -> None:
    agent = Agent()
    agent.step("kept")
    with pytest.raises(KeyError, match="boom"):
        with agentsnap_core.rollback(agent) as rb:
            agent.step("lost")
            raise KeyError("boom")
    assert rb.rolled_back and agent.memory == ["kept"] and agent.calls == 1


def test_no_rollback_when_the_block_succeeds() -> None:
    agent = Agent()
    with agentsnap_core.rollback(agent) as rb:
        agent.step("kept")
    assert not rb.rolled_back and agent.memory == ["kept"]


def test_rollback_of_a_plain_state_dict_object_is_a_deep_copy() -> None:
    agent = PlainAgent()
    with pytest.raises(RuntimeError):
        with agentsnap_core.rollback(agent):
            agent.data["n"] = 5  # mutated in place: the copy taken on entry must not share it
            raise RuntimeError
    assert agent.data == {"n": 0}


def test_rollback_with_world_puts_files_back_and_keeps_the_failed_state(tmp_path: Path) -> None:
    repo = agentsnap_core.Repo.init(tmp_path)
    (tmp_path / "notes.txt").write_text("v1")
    (tmp_path / "keep.txt").write_text("k")
    base = repo.snapshot("base")
    agent = Agent()
    with pytest.raises(ValueError):
        with agentsnap_core.rollback(agent, world=tmp_path, repo=repo, message="risky edit") as rb:
            agent.step("edit")
            (tmp_path / "notes.txt").write_text("broken")
            (tmp_path / "junk.tmp").write_text("x")
            (tmp_path / "keep.txt").unlink()
            raise ValueError("tool failed")
    assert (tmp_path / "notes.txt").read_text() == "v1" and (tmp_path / "keep.txt").read_text() == "k"
    assert not (tmp_path / "junk.tmp").exists() and agent.memory == []
    assert repo.head()[1] == base.id  # the branch did not move
    failed = repo.world_entries(rb.undo)
    assert any(e[0] == "junk.tmp" for e in failed)  # the failed attempt is kept for inspection
    assert repo.get(rb.snapshot).message == "rollback: before risky edit"
    repo.close()


def test_rollback_of_a_link_in_the_tree_puts_the_link_back(tmp_path: Path) -> None:
    """``rollback(world="cache")`` where ``cache`` is a link in the tree to a directory elsewhere (a shared model or
    pip cache). Before, the path was read with the link followed: "world ... is outside the working tree", and the
    block could not be protected at all. Now ``cache`` is the tree's own path: a block that replaces the link gets
    the link back, and nothing where it points is touched."""
    work, elsewhere = tmp_path / "work", tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "model.bin").write_text("weights")
    repo = agentsnap_core.Repo.init(work)
    (work / "cache").symlink_to(elsewhere)
    repo.snapshot("base")
    with pytest.raises(RuntimeError), agentsnap_core.rollback(None, world=work / "cache", repo=repo):
        (work / "cache").unlink()
        (work / "cache").mkdir()
        (work / "cache" / "junk").write_text("x")
        raise RuntimeError
    assert (work / "cache").is_symlink() and os.readlink(work / "cache") == str(elsewhere)
    assert sorted(p.name for p in elsewhere.iterdir()) == ["model.bin"]
    with pytest.raises(InvalidInput, match="world .* is outside the working tree"):
        with agentsnap_core.rollback(None, world=elsewhere / "model.bin", repo=repo):
            pass
    repo.close()


def test_rollback_of_one_directory_only(tmp_path: Path) -> None:
    repo = agentsnap_core.Repo.init(tmp_path)
    (tmp_path / "sandbox").mkdir()
    (tmp_path / "sandbox" / "a.txt").write_text("a")
    (tmp_path / "outside.txt").write_text("o")
    repo.snapshot("base")
    repo.close()
    with pytest.raises(RuntimeError):
        with agentsnap_core.rollback(None, world=tmp_path / "sandbox"):
            (tmp_path / "sandbox" / "a.txt").write_text("changed")
            (tmp_path / "outside.txt").write_text("changed too")
            raise RuntimeError
    assert (tmp_path / "sandbox" / "a.txt").read_text() == "a"
    assert (tmp_path / "outside.txt").read_text() == "changed too"  # outside the protected world


def test_async_rollback() -> None:
    agent = Agent()

    async def main() -> None:
        async with agentsnap_core.rollback(agent):
            agent.step("x")
            await asyncio.sleep(0)
            raise OSError("network")

    with pytest.raises(OSError):
        asyncio.run(main())
    assert agent.calls == 0


def test_rollback_refuses_objects_nothing_handles() -> None:
    with pytest.raises(agentsnap_core.AgentSnapError, match="no installed adapter"):
        with agentsnap_core.rollback(object()):
            pass


# ---------------------------------------------------------------------------------------------- checkpoint
def test_checkpoint_every_n_calls(tmp_path: Path) -> None:
    client = agentsnap_core.Client(tmp_path)

    class Worker(Agent):
        @agentsnap_core.checkpoint(every=3, client=client, agent_id="worker")
        def work(self, text: str) -> int:
            return self.step(text)

    w = Worker()
    for i in range(7):
        w.work(f"t{i}")
    timeline = client.timeline("worker")
    assert len(timeline) == 2  # after calls 3 and 6
    assert client.restore(timeline[0].id, into=Worker()).memory == ["t0", "t1", "t2", "t3", "t4", "t5"]
    assert Worker.work.last == timeline[0].id
    client.close()


def test_checkpoint_every_t_seconds_with_a_fake_clock(tmp_path: Path) -> None:
    now = [100.0]
    client = agentsnap_core.Client(tmp_path)

    @agentsnap_core.checkpoint(seconds=60, client=client, agent=lambda agent, text: agent, clock=lambda: now[0])
    def act(agent: Agent, text: str) -> None:
        agent.step(text)

    a = Agent()
    act(a, "first")
    now[0] += 30
    act(a, "second")
    assert client.timeline() == []
    now[0] += 31
    act(a, "third")
    [snap] = client.timeline("Agent")
    assert client.restore(snap.id, into=Agent()).calls == 3
    client.close()


def test_failed_calls_do_not_count_and_agents_are_counted_separately() -> None:
    policy = agentsnap_core.AutoSnapshot(every=2)
    a, b = Agent(), Agent()
    assert [policy.tick(a), policy.tick(b), policy.tick(a), policy.tick(b), policy.tick(a)] == [False, False, True, True, False]
    saved: list[str] = []

    class FakeClient:  # records what would be saved; the real Client is covered above
        def save(self, agent: Any, **kw: Any) -> str:
            saved.append(kw["agent_id"])
            return "id"

    class Flaky(Agent):
        @agentsnap_core.checkpoint(every=1, client=FakeClient())
        def go(self, fail: bool) -> None:
            if fail:
                raise RuntimeError
            self.step("ok")

    f = Flaky()
    with pytest.raises(RuntimeError):
        f.go(True)
    f.go(False)
    assert saved == ["Flaky"]


def test_async_checkpoint_with_async_client(tmp_path: Path) -> None:
    async def main() -> int:
        async with agentsnap_core.AsyncClient(tmp_path) as client:

            class Async(Agent):
                @agentsnap_core.checkpoint(every=2, client=client, agent_id="async")
                async def work(self) -> None:
                    await asyncio.sleep(0)
                    self.step("x")

            w = Async()
            for _ in range(4):
                await w.work()
            return len(await client.timeline("async"))

    assert asyncio.run(main()) == 2


def test_a_streaming_agent_is_checkpointed_after_its_stream_not_before(tmp_path: Path) -> None:
    """``@checkpoint`` on a generator or async generator method (an agent that streams its steps) and on a plain
    function that returns a coroutine (another decorator around an async one).

    Before, the wrapper called the method, got the generator (or coroutine) back without running it, and saved at
    once: the snapshot held the agent as it was *before* the call (``[]`` after a three-step stream), and a stream
    that then failed or was abandoned still counted as a successful call. Now the save comes after the stream has
    run to its end; one that raised or was closed early saves nothing; values sent or thrown in reach the stream.
    """
    client = agentsnap_core.Client(tmp_path)

    class Streamer(Agent):
        @agentsnap_core.checkpoint(every=1, client=client, agent_id="gen")
        def stream(self, n: int, fail_at: int = -1) -> Any:
            for i in range(n):
                if i == fail_at:
                    raise RuntimeError("tool failed")
                self.step(f"s{i}")
                got = yield i
                if got is not None:
                    self.step(f"sent {got}")
            return "done"

        @agentsnap_core.checkpoint(every=1, client=client, agent_id="agen")
        async def astream(self, n: int) -> Any:
            for i in range(n):
                self.step(f"a{i}")
                try:
                    yield i
                except KeyError:
                    self.step("handled")

        @agentsnap_core.checkpoint(every=1, client=client, agent_id="wrapped")
        def later(self) -> Any:  # a plain function returning a coroutine
            async def work() -> str:
                self.step("awaited")
                return "ok"

            return work()

    s = Streamer()
    assert list(s.stream(3)) == [0, 1, 2]
    assert client.restore(Streamer.stream.last, into=Streamer()).memory == ["s0", "s1", "s2"]
    gen = s.stream(2)
    assert next(gen) == 0 and gen.send("x") == 1
    with pytest.raises(StopIteration) as stop:
        next(gen)
    assert stop.value.value == "done"  # (the generator's return value comes through)
    assert client.restore(Streamer.stream.last, into=Streamer()).memory[-3:] == ["s0", "sent x", "s1"]
    last = Streamer.stream.last
    with pytest.raises(RuntimeError):
        list(s.stream(3, fail_at=1))
    abandoned = s.stream(3)
    next(abandoned)
    abandoned.close()
    assert Streamer.stream.last == last and len(client.timeline("gen")) == 2  # neither saved

    async def run() -> list[int]:
        out = []
        agen = s.astream(3)
        out.append(await agen.asend(None))
        out.append(await agen.athrow(KeyError("k")))  # handled inside: the stream goes on
        out.extend([x async for x in agen])
        return out

    assert asyncio.run(run()) == [0, 1, 2]
    assert client.restore(Streamer.astream.last, into=Streamer()).memory[-4:] == ["a0", "handled", "a1", "a2"]
    assert asyncio.run(s.later()) == "ok"
    assert client.restore(Streamer.later.last, into=Streamer()).memory[-1] == "awaited"
    client.close()


def test_an_async_client_on_a_plain_function_is_refused_not_left_unsaved(tmp_path: Path) -> None:
    """Before, a plain method with ``client=AsyncClient(...)`` got a coroutine from ``save`` that nobody awaited:
    no snapshot, ``.last`` a coroutine object, only a RuntimeWarning at exit. Now the call says what to do."""

    async def main() -> None:
        async with agentsnap_core.AsyncClient(tmp_path) as client:

            class Sync(Agent):
                @agentsnap_core.checkpoint(every=1, client=client)
                def work(self) -> None:
                    self.step("x")

            with pytest.raises(InvalidInput, match="AsyncClient saves only from an async def"):
                Sync().work()
            assert await client.timeline() == []

    asyncio.run(main())


def test_auto_snapshot_with_an_async_client_saves_through_atick(tmp_path: Path) -> None:
    """Before, ``snapper.tick()`` with an AsyncClient returned the save's coroutine, which asyncio code that called
    ``tick()`` as documented never awaited: no snapshot, ``.last`` a coroutine object, a RuntimeWarning at exit. Now
    ``tick()`` refuses it with what to call instead, and ``await snapper.atick()`` saves."""

    async def main() -> int:
        async with agentsnap_core.AsyncClient(tmp_path) as client:
            agent = Agent()
            snapper = agentsnap_core.auto_snapshot(agent, every=1, client=client, agent_id="loop")
            agent.step("one")
            with pytest.raises(InvalidInput, match="await snapper.atick"):
                snapper.tick()
            agent.step("two")
            saved = await snapper.atick("turn 2")
            assert saved is not None and snapper.last == saved
            return len(await client.timeline("loop"))

    assert asyncio.run(main()) == 1


@pytest.mark.parametrize("kwargs", [{}, {"every": 0}, {"every": True}, {"seconds": -1}])
def test_checkpoint_policy_needs_a_sane_interval(kwargs: dict[str, Any]) -> None:
    with pytest.raises(InvalidInput):
        agentsnap_core.checkpoint(**kwargs)


def test_auto_snapshot_policy_in_a_loop_you_do_not_own(tmp_path: Path) -> None:
    with agentsnap_core.Client(tmp_path) as client:
        agent = Agent()
        snapper = agentsnap_core.auto_snapshot(agent, every=4, client=client, agent_id="looper")
        saved = []
        for i in range(10):
            agent.step(f"turn {i}")
            saved.append(snapper.tick(f"turn {i}"))
        assert [i for i, s in enumerate(saved) if s] == [3, 7]
        assert [t.message for t in client.timeline("looper")] == ["turn 7", "turn 3"]
        assert client.restore(snapper.last, into=Agent()).calls == 8
