"""The Python API for any agent (``docs/PYTHON_API.md``) gives back exactly what was saved, or says why it cannot.

Reported, as a user of ``Snapshottable``, ``Client``/``AsyncClient``, ``rollback``, ``checkpoint`` and migrations
would meet it (each test's docstring quotes the old behaviour).
"""

from __future__ import annotations

import asyncio
import collections
import enum
import math
from pathlib import Path
from typing import Any

import agentsnap_core
import pytest
from agentsnap_core import AsyncClient, Client, Snapshottable
from agentsnap_core.errors import AgentSnapError, InvalidInput
from agentsnap_core.format.migrations import clear_migrations
from agentsnap_core.format.snapshottable import UnsupportedValue


class Bot(Snapshottable):
    def __init__(self) -> None:
        self.memory = ["hello"]


class Tool(Snapshottable):
    def __init__(self) -> None:
        self.uses = 0


class Worker(Snapshottable):
    def __init__(self) -> None:
        self.calls = 0
        self.tool = Tool()


class Tags(list):  # noqa: FURB189 - a user's list subclass, the point of the test
    pass


class Name(str):  # noqa: FURB189
    __slots__ = ()


class Recent(collections.OrderedDict):  # a user's subclass of a container that does come back as itself
    pass


class Perm(enum.Flag):
    READ = 1
    WRITE = 2


class Kind(str, enum.Enum):
    TOOL = "tool"
    USER = "user"


@pytest.fixture
def client(tmp_path: Path) -> Client:
    return Client(tmp_path)


@pytest.mark.parametrize(
    "value",
    [
        Tags(["x"]),
        Name("n"),
        Recent(a=1),
    ],
    ids=["list-subclass", "str-subclass", "OrderedDict-subclass"],
)
def test_a_subclass_of_a_builtin_is_refused_not_restored_as_the_base_type(client: Client, value: Any) -> None:
    """``bot.counts = Counter(...)`` saved without a word and came back a plain ``dict`` (so ``counts['new']``
    raised KeyError instead of giving 0); an OrderedDict, a defaultdict (its factory gone), a list or str subclass
    all came back as the base type. Now the save is refused, naming the attribute and the base type, and writes
    nothing. (OrderedDict, defaultdict, Counter and deque themselves now come back as they are:
    test_trust_collections.py.)"""
    bot = Bot()
    bot.memory = value
    with pytest.raises(UnsupportedValue) as err:
        client.save(bot, agent_id="bot")
    base = next(b for b in type(value).__mro__ if b.__module__ == "builtins")
    assert "Bot.memory" in str(err.value) and f"a plain {base.__name__}" in str(err.value)
    assert client.timeline() == []


def test_a_str_enum_used_as_a_dict_key_comes_back_as_the_enum(client: Client) -> None:
    """``{Kind.TOOL: 3}`` (a ``str, Enum`` key) came back as ``{'tool': 3}``: the key's type was lost silently."""
    bot = Bot()
    bot.memory = {Kind.TOOL: 3}
    back = client.restore(client.save(bot, agent_id="bot"))
    assert back.memory == {Kind.TOOL: 3} and type(next(iter(back.memory))) is Kind


@pytest.mark.parametrize("value", [Perm.READ | Perm.WRITE, Perm(0), Perm.READ], ids=["combined", "empty", "member"])
def test_a_combined_flag_restores(client: Client, value: Perm) -> None:
    """``Perm.READ | Perm.WRITE`` saved fine, then the snapshot could never be restored: ``cannot restore
    Bot.memory: bad 'enum' value (KeyError: 'READ|WRITE')``."""
    bot = Bot()
    bot.memory = [value]
    back = client.restore(client.save(bot, agent_id="bot"))
    assert back.memory == [value] and type(back.memory[0]) is Perm


def test_clone_of_an_agent_that_holds_itself_holds_the_clone() -> None:
    """``agent.clone()`` on ``agent.me = agent`` raised a bare ``RecursionError``, then a refusal; now the clone
    holds itself (not the original)."""
    bot = Bot()
    bot.me = bot
    twin = bot.clone()
    assert twin.me is twin and twin is not bot


def test_rollback_removes_attributes_the_block_added() -> None:
    """After a failed block, attributes the block had added stayed on the agent (and on its nested tool):
    ``vars(agent)`` held ``'scratch': 'half done'``, so the agent was not the one saved on entry."""
    worker = Worker()
    entry = worker.state_dict().keys()
    with pytest.raises(ValueError), agentsnap_core.rollback(worker):
        worker.calls = 5
        worker.scratch = "half done"
        worker.tool.uses = 9
        worker.tool.cache = [1, 2]
        raise ValueError("tool failed")
    assert worker.state_dict().keys() == entry and worker.calls == 0
    assert vars(worker.tool) == {"uses": 0}


def test_rollback_with_nothing_to_protect_is_refused() -> None:
    """``with rollback(None):`` (an agent variable not set yet) protected nothing and said nothing."""
    with pytest.raises(InvalidInput, match="agent or world="):
        with agentsnap_core.rollback(None):
            pass


@pytest.mark.parametrize("seconds", [math.nan, math.inf])
def test_checkpoint_seconds_that_never_come_are_refused(seconds: float) -> None:
    """``@checkpoint(seconds=float('nan'))`` (a config value that failed to parse) was accepted and never saved."""
    with pytest.raises(InvalidInput, match="seconds"):
        agentsnap_core.checkpoint(seconds=seconds)
    with pytest.raises(InvalidInput, match="seconds"):
        agentsnap_core.auto_snapshot(Bot(), seconds=seconds)


def test_checkpoint_without_parentheses_says_how_to_use_it() -> None:
    """``@checkpoint`` without ``(...)`` said ``every must be a positive number of calls, not <function ...>``."""
    with pytest.raises(InvalidInput, match=r"@agentsnap_core.checkpoint\(every=N\)"):

        @agentsnap_core.checkpoint  # type: ignore[arg-type]
        def step(self: Any) -> None: ...


@pytest.mark.parametrize("bad", [None, "", 5])
def test_latest_and_timeline_refuse_an_agent_id_that_is_not_a_str(client: Client, bad: object) -> None:
    """``client.latest(None)`` (an unset agent id) returned ANOTHER agent's newest snapshot; ``timeline(5)``
    raised ``TypeError: 'int' object is not iterable``."""
    client.save(Bot(), agent_id="someone-else")
    with pytest.raises(InvalidInput, match="agent_id"):
        client.latest(bad)  # type: ignore[arg-type]
    if bad is not None:
        with pytest.raises(InvalidInput, match="agent_id"):
            client.timeline(bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match="session_id"):
        client.timeline("someone-else", 5)  # type: ignore[arg-type]


def test_metadata_that_would_come_back_changed_is_refused(client: Client) -> None:
    """``metadata={"span": (3, 9)}`` was saved and ``client.metadata(id)`` gave back ``[3, 9]``; a handoff's
    ``metadata=[...]`` raised ``TypeError: 'list' object is not a mapping``."""
    with pytest.raises(InvalidInput, match=r"metadata\['span'\].*tuple"):
        client.save(Bot(), agent_id="bot", metadata={"span": (3, 9)})
    assert client.timeline() == []
    sid = client.save(Bot(), agent_id="bot", metadata={"span": [3, 9], "n": math.nan, 1: b"x"})
    meta = client.metadata(sid)["metadata"]
    assert meta["span"] == [3, 9] and math.isnan(meta["n"]) and meta[1] == b"x"
    with pytest.raises(InvalidInput, match="metadata"):
        client.handoff(sid, "writer", metadata=["note"])  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match="metadata"):
        client.handoff(sid, "writer", metadata={"at": (1, 2)})
    assert client.timeline("writer") == []


@pytest.mark.parametrize("bad", ["", 7])
def test_handoff_into_a_session_id_that_is_not_a_str_is_refused(client: Client, bad: object) -> None:
    """``handoff(sid, "writer", session_id="")`` quietly used the source's session; ``session_id=7`` raised
    ``TypeError: 'int' object is not iterable``."""
    sid = client.save(Bot(), agent_id="bot", session_id="job-1")
    with pytest.raises(InvalidInput, match="session_id"):
        client.handoff(sid, "writer", session_id=bad)  # type: ignore[arg-type]
    assert client.timeline("writer") == []


def test_save_world_given_a_path_is_refused(client: Client) -> None:
    """``save(agent, world="sandbox/")`` (as ``rollback(world=...)`` takes) captured the whole working tree."""
    with pytest.raises(InvalidInput, match="world"):
        client.save(Bot(), agent_id="bot", world="sandbox/")  # type: ignore[arg-type]
    assert client.timeline() == []


def test_restore_world_true_puts_the_saved_files_back_sync_and_async(tmp_path: Path) -> None:
    """``save(agent, world=True)`` captured the files, but ``restore`` loaded the agent alone and had no way to put
    them back (nor said so): an agent restored to before its file edits kept the edited files. Now
    ``restore(id, world=True)`` (sync and async) puts them back too, undoable, without moving the branch; a snapshot
    saved without files, or a world that is not a bool, is refused before anything is touched."""
    root = tmp_path / "work"
    with Client(root) as client:
        bot = Bot()
        (root / "notes.md").write_text("plan v1\n")
        saved = client.save(bot, agent_id="bot", world=True)
        head = client.repo.head()
        bot.memory.append("edited the plan")
        (root / "notes.md").write_text("plan v2\n")
        (root / "scratch.txt").write_text("x")
        back = client.restore(saved, into=Bot(), world=True)
        assert back.memory == ["hello"] and (root / "notes.md").read_text() == "plan v1\n"
        assert not (root / "scratch.txt").exists() and client.repo.head() == head
        agent_only = client.save(bot, agent_id="bot")
        (root / "notes.md").write_text("plan v3\n")
        with pytest.raises(InvalidInput, match="holds no files"):
            client.restore(agent_only, world=True)
        with pytest.raises(InvalidInput, match="world must be True"):
            client.restore(saved, world="notes.md")  # type: ignore[arg-type]
        assert (root / "notes.md").read_text() == "plan v3\n"

    async def main() -> list[str]:
        async with AsyncClient(root) as aclient:
            agent = await aclient.restore(saved, into=Bot(), world=True)
            return agent.memory

    assert asyncio.run(main()) == ["hello"] and (root / "notes.md").read_text() == "plan v1\n"


def test_register_migration_with_the_class_or_a_float_version() -> None:
    """``register_migration(MyAgent, "1.0", fn)`` (the class, not its name) was accepted and never used: loading
    then said ``no migration from version 1.0; register one with register_migration('MyAgent', '1.0', fn)``.
    ``register_migration("MyAgent", 1.10, fn)`` was registered as version ``1.1``."""
    clear_migrations()
    try:
        agentsnap_core.register_migration(Bot, "1.0", lambda s: {"memory": [*s["memory"], "migrated"]}, to="2.0")
        from agentsnap_core.format.migrations import migrate

        assert migrate("Bot", "1.0", {"memory": []}, "2.0") == {"memory": ["migrated"]}
        with pytest.raises(AgentSnapError, match="str"):
            agentsnap_core.register_migration("Bot", 1.10, lambda s: s)  # type: ignore[arg-type]
        with pytest.raises(AgentSnapError, match="str"):
            agentsnap_core.register_migration("Bot", "1.0", lambda s: s, to=2.0)  # type: ignore[arg-type]
    finally:
        clear_migrations()


def test_version_1_and_1_0_are_the_same_version(client: Client) -> None:
    """A state saved as ``__snapshot_version__ = "1.0"`` loaded into a class that says ``"1"`` was refused as
    ``the snapshot is newer than this code``, though versions compare numerically."""

    class Memo(Snapshottable):
        __snapshot_version__ = "1.0"

        def __init__(self) -> None:
            self.notes = ["a"]

    sid = client.save(Memo(), agent_id="memo")
    Memo.__snapshot_version__ = "1"
    assert client.restore(sid, into=Memo()).notes == ["a"]


def test_async_client_closed_twice_or_used_after_close(tmp_path: Path) -> None:
    """A second ``aclose()`` (``async with`` around an explicit close) and any call after it raised
    ``RuntimeError: cannot schedule new futures after shutdown``."""

    async def main() -> None:
        async with AsyncClient(tmp_path) as ac:
            await ac.save(Bot(), agent_id="bot")
            await ac.aclose()
        with pytest.raises(AgentSnapError, match="closed"):
            await ac.timeline()

    asyncio.run(main())


def test_gc_grace_that_is_not_a_number_is_refused(client: Client) -> None:
    """``client.gc("0")`` raised ``TypeError: unsupported operand type(s) for -: 'float' and 'str'``."""
    with pytest.raises(InvalidInput, match="grace_seconds"):
        client.gc("0")  # type: ignore[arg-type]


class Fussy:
    """A plain ``state_dict()`` agent whose ``load_state_dict`` refuses (a validating agent, a closed resource)."""

    def __init__(self) -> None:
        self.data = {"n": 0}

    def state_dict(self) -> dict[str, Any]:
        return dict(self.data)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        raise RuntimeError("the agent's connection is closed")


def test_rollback_puts_the_files_back_even_when_the_agent_cannot_be_restored(tmp_path: Path) -> None:
    """When the agent's ``load_state_dict`` raised during a rollback, the files under ``world=`` were left as the
    failed block wrote them (half restored), with no word about the files."""
    agentsnap_core.Repo.init(tmp_path).close()
    sandbox = tmp_path / "sandbox"
    sandbox.mkdir()
    (sandbox / "plan.txt").write_text("v1\n")
    with pytest.raises(RuntimeError, match="connection is closed") as err:
        with agentsnap_core.rollback(Fussy(), world=sandbox) as rb:
            (sandbox / "plan.txt").write_text("half written\n")
            (sandbox / "tmp.txt").write_text("scratch\n")
            raise ValueError("tool failed")
    assert isinstance(err.value.__context__, ValueError)
    assert (sandbox / "plan.txt").read_text() == "v1\n" and not (sandbox / "tmp.txt").exists()
    assert rb.undo is not None and not rb.rolled_back


@pytest.mark.parametrize("bad", [5, b"work", ""])
def test_a_store_path_that_is_not_a_path_is_one_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            bad: object) -> None:
    """Was: ``Client(5)``, ``AsyncClient(5)``, ``Repo.open(5)`` / ``Repo.init(5)``: bare ``TypeError: expected str,
    bytes or os.PathLike object, not int`` (``b"work"``: "argument should be a str object or an os.PathLike object
    returning str"); ``Client("")`` opened (or made) a store in whatever the current directory was."""
    monkeypatch.chdir(tmp_path)
    for make in (lambda: Client(bad), lambda: agentsnap_core.Repo.open(bad), lambda: agentsnap_core.Repo.init(bad),
                 lambda: asyncio.run(AsyncClient(bad).save(Bot(), agent_id="a"))):
        with pytest.raises(InvalidInput, match="path"):
            make()
    assert list(tmp_path.iterdir()) == []  # nothing made anywhere


def test_rollback_world_or_repo_of_the_wrong_type_is_refused_before_the_block(tmp_path: Path) -> None:
    """Was: ``rollback(agent, world=5)`` raised a bare ``TypeError`` from ``Path(5)`` on entry; ``repo=5`` was
    accepted and failed inside the snapshot with ``AttributeError: 'int' object has no attribute 'head'``."""
    with pytest.raises(InvalidInput, match="world must be a path"):
        agentsnap_core.rollback(Bot(), world=5)
    with pytest.raises(InvalidInput, match="repo must be an open agentsnap_core.Repo"):
        agentsnap_core.rollback(Bot(), world=str(tmp_path), repo=5)


def test_client_repo_or_clock_of_the_wrong_type_is_refused_when_made(tmp_path: Path) -> None:
    """Was: ``Client(repo=5)`` was made and failed at its first use (``AttributeError``); ``Client(clock=5)`` at the
    first ``save(ttl=...)`` with ``TypeError: 'int' object is not callable``."""
    with pytest.raises(InvalidInput, match="repo must be"):
        Client(repo=5)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match="clock must be"):
        Client(tmp_path, clock=5)  # type: ignore[arg-type]


def test_saving_the_class_instead_of_an_instance_is_one_clear_error(client: Client) -> None:
    """Was: ``client.save(Bot, agent_id="a")``: ``TypeError: Snapshottable.state_dict() missing 1 required
    positional argument: 'self'``; ``rollback(Bot)`` the same on entry."""
    with pytest.raises(InvalidInput, match="the class Bot itself: pass an instance"):
        client.save(Bot, agent_id="a")
    with pytest.raises(InvalidInput, match="the class Bot itself"), agentsnap_core.rollback(Bot):
        pass
    assert client.timeline("a") == []


@pytest.mark.parametrize("bad", [5, None, b"msg", ["a"]])
def test_a_snapshot_message_that_is_not_a_str_is_refused_and_nothing_is_written(client: Client, bad: object) -> None:
    """Was: ``client.save(agent, agent_id="a", message=5)`` and ``repo.snapshot(None)`` were kept and ``agentsnap
    log`` showed "5" / "None" / "b'msg'"; ``repo.snapshot(["a"])`` failed late, in the index,
    with ``sqlite3.ProgrammingError: Error binding parameter 4: type 'list' is not supported``."""
    with pytest.raises(InvalidInput, match="message must be a str"):
        client.save(Bot(), agent_id="a", message=bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match="message must be a str"):
        client.repo.snapshot(bad)  # type: ignore[arg-type]
    assert client.timeline("a") == [] and client.repo.head()[1] is None
