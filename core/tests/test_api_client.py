"""Client / AsyncClient: save, restore, handoff, timeline, TTL, metadata, exists, delete; per-file restore."""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path
from typing import Any

import agentsnap_core
import pytest
from agentsnap_core.client import session_ref
from agentsnap_core.errors import InvalidInput, UnknownSnapshot
from agentsnap_core.repository.retention import SnapshotGone
from click.testing import CliRunner


class Clock:
    def __init__(self, now: float = 1_900_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class Bot(agentsnap_core.Snapshottable):
    def __init__(self) -> None:
        self.memory: list[str] = []
        self.turns = 0
        self.messages: list[dict[str, Any]] = []

    def turn(self, text: str) -> None:
        self.memory.append(text)
        self.turns += 1
        self.messages.append({"role": "user", "content": text})


@pytest.fixture
def client(tmp_path: Path) -> agentsnap_core.Client:
    c = agentsnap_core.Client(tmp_path / "store")
    yield c
    c.close()


def test_save_restore_into_fresh_instance_and_trace_layer(client: agentsnap_core.Client) -> None:
    bot = Bot()
    bot.turn("hi")
    snap = client.save(bot, agent_id="bot", message="first turn", metadata={"user": "ann"}, tags=["good"])
    assert client.repo.read_layer(snap, "trace") == [{"role": "user", "content": "hi"}]
    fresh = client.restore(snap, into=Bot())
    assert (fresh.memory, fresh.turns, fresh.messages) == (["hi"], 1, [{"role": "user", "content": "hi"}])
    meta = client.metadata(snap[:10])  # short ids work like on the CLI
    assert meta["agent_id"] == "bot" and meta["session_id"] == "default" and meta["message"] == "first turn"
    assert meta["metadata"] == {"user": "ann"} and meta["tags"] == ["good"] and meta["parents"] == []
    assert client.exists(snap) and not client.exists("f" * 64) and not client.exists("no-such-thing")


def test_sessions_are_chains_and_timeline_filters_newest_first(client: agentsnap_core.Client) -> None:
    bot = Bot()
    ids = {}
    for agent_id, session in [("a", "s1"), ("a", "s2"), ("b", "s1"), ("a", "s1")]:
        bot.turn(f"{agent_id}/{session}")
        ids.setdefault((agent_id, session), []).append(client.save(bot, agent_id=agent_id, session_id=session))
    a_s1 = client.timeline("a", "s1")
    assert [t.id for t in a_s1] == list(reversed(ids[("a", "s1")]))
    assert a_s1[0].parents == [ids[("a", "s1")][0]]
    assert {t.id for t in client.timeline("a")} == set(ids[("a", "s1")] + ids[("a", "s2")])
    assert {t.id for t in client.timeline(session_id="s1")} == set(ids[("a", "s1")] + ids[("b", "s1")])
    assert len(client.timeline()) == 4 and len(client.timeline(limit=2)) == 2
    assert client.latest("b", "s1").id == ids[("b", "s1")][0]
    assert client.latest("nobody") is None
    # the branch the user works on is untouched by client saves
    assert client.repo.head()[1] is None


def test_odd_agent_and_session_ids_are_kept_exactly(client: agentsnap_core.Client) -> None:
    snap = client.save(Bot(), agent_id="team/alpha..1 +ü", session_id="chat #7")
    assert session_ref("team/alpha..1 +ü", "chat #7") in client.repo.refs.list_refs("refs/agents/")
    [item] = client.timeline("team/alpha..1 +ü", "chat #7")
    assert (item.id, item.agent_id, item.session_id) == (snap, "team/alpha..1 +ü", "chat #7")


def test_handoff_new_snapshot_for_target_with_lineage(client: agentsnap_core.Client) -> None:
    bot = Bot()
    bot.turn("research")
    first = client.save(bot, agent_id="researcher", session_id="job", metadata={"k": 1})
    bot.turn("more")
    second = client.save(bot, agent_id="researcher", session_id="job")
    earlier_writer = client.save(Bot(), agent_id="writer", session_id="job")
    handed = client.handoff(second, "writer", metadata={"note": "yours"})
    m = client.metadata(handed)
    assert m["agent_id"] == "writer" and m["handoff_from"] == second
    assert m["parents"] == [second, earlier_writer]  # lineage first, then the writer's own history
    assert m["metadata"] == {"note": "yours"}
    assert [i.id for i in client.lineage(handed)] == [handed, second, first]
    assert client.restore(handed, into=Bot()).memory == ["research", "more"]
    assert client.latest("researcher", "job").id == second


def test_ttl_expiry_leaves_queries_and_gc_reclaims(tmp_path: Path) -> None:
    clock = Clock()
    with agentsnap_core.Client(tmp_path, clock=clock) as client:
        bot = Bot()
        bot.memory = ["x" * 5000]  # a layer of its own
        short = client.save(bot, agent_id="bot", ttl=10)
        layer = client.repo.get(short).layers["state"]["content"]
        assert client.exists(short)
        clock.now += 9.5
        assert client.exists(short)
        clock.now += 1
        assert not client.exists(short) and client.timeline("bot") == []
        assert [t.id for t in client.timeline("bot", include_expired=True)] == [short]
        with pytest.raises(SnapshotGone, match="TTL ran out"):
            client.metadata(short)
        with pytest.raises(SnapshotGone):
            client.restore(short, into=Bot())
        with pytest.raises(SnapshotGone):
            client.handoff(short, "other")
        assert client.repo.objects.has(layer)
        client.gc(grace_seconds=0)
        assert not client.repo.objects.has(layer)
        assert client.verify()["ok"]
        with pytest.raises(InvalidInput, match="ttl"):
            client.save(bot, agent_id="bot", ttl=0)


def test_expire_and_delete_are_immediate_and_idempotent(client: agentsnap_core.Client) -> None:
    a = client.save(Bot(), agent_id="bot")
    b_bot = Bot()
    b_bot.turn("x")
    b = client.save(b_bot, agent_id="bot")
    client.expire(a)
    client.expire(a)
    client.delete(b)
    assert not client.exists(a) and not client.exists(b) and client.timeline() == []
    with pytest.raises(SnapshotGone, match="was deleted"):
        client.restore(b, into=Bot())
    with pytest.raises(UnknownSnapshot):
        client.expire("nope")
    # the session ref still names b: its manifest stays (history), its layers go
    client.gc(grace_seconds=0)
    assert client.repo.manifest(b)["parents"] == [a]
    assert client.verify()["ok"]


def test_bad_input_is_refused_before_anything_is_written(client: agentsnap_core.Client) -> None:
    for kwargs in ({"agent_id": ""}, {"agent_id": "a", "session_id": ""}, {"agent_id": "a", "metadata": {"x": object()}},
                   {"agent_id": "a", "tags": [""]}, {"agent_id": "a", "ttl": -1}):
        with pytest.raises(InvalidInput):
            client.save(Bot(), **kwargs)
    with pytest.raises(agentsnap_core.AgentSnapError, match="no installed adapter handles object"):
        client.save(object(), agent_id="a")
    assert client.timeline() == [] and client.repo.refs.list_snapshots() == []


def test_restore_into_the_wrong_agent_class_is_refused(client: agentsnap_core.Client) -> None:
    class Other(agentsnap_core.Snapshottable):
        pass

    snap = client.save(Bot(), agent_id="bot")
    with pytest.raises(agentsnap_core.AgentSnapError, match="holds a Bot agent; it cannot be loaded into a Other"):
        client.restore(snap, into=Other())


def test_concurrent_saves_to_one_session_lose_nothing(tmp_path: Path) -> None:
    agentsnap_core.Client(tmp_path).close()
    errors: list[BaseException] = []
    saved: list[str] = []

    def work(n: int) -> None:
        try:
            with agentsnap_core.Client(tmp_path) as c:
                for i in range(5):
                    bot = Bot()
                    bot.turn(f"{n}-{i}")
                    saved.append(c.save(bot, agent_id="bot"))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    with agentsnap_core.Client(tmp_path) as c:
        chain = c.timeline("bot")
    assert sorted(t.id for t in chain) == sorted(saved)  # one chain holds every save
    assert all(len(t.parents) == 1 for t in chain[:-1])


def test_async_client_same_store_same_answers(tmp_path: Path) -> None:
    async def main() -> tuple[list[str], bool, bool]:
        async with agentsnap_core.AsyncClient(tmp_path, clock=Clock()) as client:
            bot = Bot()
            bot.turn("hi")
            first = await client.save(bot, agent_id="bot", ttl=5)
            second = await client.save(bot, agent_id="bot")
            handed = await client.handoff(second, "helper")
            restored = await client.restore(handed, into=Bot())
            assert restored.memory == ["hi"] and (await client.metadata(handed))["handoff_from"] == second
            client.client.clock.now += 6  # type: ignore[attr-defined]
            timeline = [t.id for t in await client.timeline("bot")]
            assert timeline == [second]
            await client.delete(second)
            gone = not await client.exists(second)
            await client.gc(grace_seconds=0)
            return [i.agent_id for i in await client.lineage(handed)], gone, (await client.verify())["ok"] and first != second

    lineage, gone, ok = asyncio.run(main())
    assert lineage == ["helper", "bot", "bot"] and gone and ok
    with agentsnap_core.Client(tmp_path, clock=Clock(1_900_000_010.0)) as sync:  # reads what the async one wrote
        assert [t.agent_id for t in sync.timeline()] == ["helper"]


# ---------------------------------------------------------------------------------------------- per-file restore
def test_per_file_restore_python_and_cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from agentsnap_core.cli import main

    root = tmp_path / "work"
    repo = agentsnap_core.Repo.init(root)
    (root / "a.txt").write_text("a1")
    (root / "docs").mkdir()
    (root / "docs" / "b.md").write_text("b1")
    (root / "c.txt").write_text("c1")
    snap = repo.snapshot("base")
    (root / "a.txt").write_text("a2")
    (root / "docs" / "b.md").write_text("b2")
    (root / "docs" / "new.md").write_text("created later")
    (root / "c.txt").write_text("c2")
    monkeypatch.chdir(root)
    repo.restore(snap.id, paths=["docs"])
    assert (root / "docs" / "b.md").read_text() == "b1" and not (root / "docs" / "new.md").exists()
    assert (root / "a.txt").read_text() == "a2" and (root / "c.txt").read_text() == "c2"  # others untouched
    head_before = repo.head()
    res = CliRunner().invoke(main, ["restore", snap.id[:12], "--", "a.txt"])
    assert res.exit_code == 0, res.output
    assert (root / "a.txt").read_text() == "a1" and (root / "c.txt").read_text() == "c2"
    assert repo.head() == head_before  # a per-file restore does not move the branch
    bad = CliRunner().invoke(main, ["restore", snap.id[:12], "--", os.fspath(tmp_path / "outside.txt")])
    assert bad.exit_code == 2 and "outside the working tree" in bad.output
    repo.close()


# ---------------------------------------------------------------------------------------------- shared stores
def test_client_on_a_postgresql_store_two_checkouts_share_timeline_and_ttl(postgres_url: str, tmp_path: Path) -> None:
    """Sessions, tombstones and TTL live in refs + manifests: any RefStore works, no schema change needed."""
    clock = Clock()
    one = agentsnap_core.Repo.init(tmp_path / "one", store_url=postgres_url)
    two = agentsnap_core.Repo.init(tmp_path / "two", store_url=postgres_url)
    with agentsnap_core.Client(repo=one, clock=clock) as c1, agentsnap_core.Client(repo=two, clock=clock) as c2:
        bot = Bot()
        bot.turn("from one")
        first = c1.save(bot, agent_id="bot", ttl=30)
        bot.turn("from two")
        second = c2.save(bot, agent_id="bot")
        handed = c2.handoff(second, "helper")
        assert [t.id for t in c1.timeline("bot")] == [second, first]
        assert c1.restore(handed, into=Bot()).memory == ["from one", "from two"]
        clock.now += 31
        assert [t.id for t in c2.timeline("bot")] == [second] and not c1.exists(first)
        c2.delete(handed)
        assert c1.timeline("helper") == []
        c1.gc(grace_seconds=0)
        assert c2.verify()["ok"]
    one.close()
    two.close()


def test_a_save_outlasted_by_many_concurrent_saves_keeps_re_parenting(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Twenty saves in a row beat this one to the session (a loaded machine, many writers): it backs off and
    re-parents until it lands, instead of giving up after 8 immediate re-tries ("written too fast to append to")."""
    from agentsnap_core import client as client_mod
    from agentsnap_core.errors import RefConflict
    from agentsnap_core.repository.repo import Repo

    real = Repo.snapshot
    lost = {"n": 0}

    def crowded(self: Repo, *args: Any, **kw: Any) -> Any:
        if lost["n"] < 20:
            lost["n"] += 1
            raise RefConflict(kw.get("ref") or "refs/x", "someone else", "moved")
        return real(self, *args, **kw)

    monkeypatch.setattr(client_mod, "_backoff", lambda attempt: 0.0, raising=False)  # no pauses in this test
    with agentsnap_core.Client(tmp_path) as c:
        monkeypatch.setattr(Repo, "snapshot", crowded)
        bot = Bot()
        bot.turn("x")
        sid = c.save(bot, agent_id="bot")
    assert lost["n"] == 20 and sid
