"""Snapshottable agents and the typed value encoding: every supported type round-trips, nothing else does."""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import socket
import uuid
from collections import namedtuple
from decimal import Decimal
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any

import agentsnap_core
import pydantic
import pytest
from agentsnap_core.errors import AgentSnapError, UnsafeSnapshot
from agentsnap_core.format.encoding import pack, pack_value, unpack
from agentsnap_core.format.snapshottable import decode_value, dump_state, encode_value
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st


class Color(enum.Enum):
    RED = "red"
    BLUE = 2


class Level(enum.IntEnum):
    LOW = 1
    HIGH = 2


@dataclasses.dataclass(frozen=True)
class Point:
    x: int
    y: str = "origin"


@dataclasses.dataclass
class Note:
    text: str
    tags: list[str] = dataclasses.field(default_factory=list)
    seen: int = dataclasses.field(default=0, init=False)


class Profile(pydantic.BaseModel):
    name: str
    born: dt.date
    scores: list[float] = []


class Aliased(pydantic.BaseModel):
    user_name: str = pydantic.Field(alias="userName")


class WithExcluded(pydantic.BaseModel):
    keep: int = 1
    token: str = pydantic.Field(default="none", exclude=True)


class Forbidding(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid")
    a: int = 1

    @pydantic.computed_field  # type: ignore[prop-decorator]
    @property
    def double(self) -> int:
        return self.a * 2


class Memo(pydantic.BaseModel):
    text: str = ""


class Holds(pydantic.BaseModel):
    child: pydantic.BaseModel  # declared as the base class, holding a Memo


class Tagged(pydantic.BaseModel):
    tags: list[str]

    @pydantic.field_validator("tags")
    @classmethod
    def _stamp(cls, v: list[str]) -> list[str]:
        return [*v, "seen"]  # not idempotent: validating twice changes the value


class Loose(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="allow")
    a: int = 0


@dataclasses.dataclass
class Plan:
    steps: list[str]

    def __post_init__(self) -> None:
        self.steps = ["start", *self.steps]  # not idempotent: each __init__ prepends again
        self.seen = set(self.steps)  # made by __init__, not a field


@dataclasses.dataclass(frozen=True)
class Seeded:
    x: int
    seed: dataclasses.InitVar[int]
    derived: int = dataclasses.field(init=False, default=0)

    def __post_init__(self, seed: int) -> None:
        object.__setattr__(self, "derived", seed * 2)


class Slotted(agentsnap_core.Snapshottable):
    __slots__ = ("plan", "done", "_client", "spare")  # a memory-lean agent class

    def __init__(self) -> None:
        self.plan: list[str] = []
        self.done = 0
        self._client = "live connection"


class MoreSlots(Slotted):
    __slots__ = ("budget",)

    def __init__(self) -> None:
        super().__init__()
        self.budget = 10


Pair = namedtuple("Pair", "left right")


class Tool(agentsnap_core.Snapshottable):
    def __init__(self) -> None:
        self.name = "search"
        self.uses = 0


class Agent(agentsnap_core.Snapshottable):
    def __init__(self) -> None:
        self.memory: list[Any] = []
        self.counters: dict[str, int] = {}
        self.tool = Tool()
        self._client = "live connection"


class Picked(agentsnap_core.Snapshottable):
    __snapshot_fields__ = ("keep",)

    def __init__(self) -> None:
        self.keep = 1
        self.skip = "not captured"


class Counter(agentsnap_core.Snapshottable):
    """A nested snapshottable value (equality by state, for the property test)."""

    def __init__(self, n: int = 0, label: str = "") -> None:
        self.n, self.label = n, label
        self._cache: dict[str, Any] = {}

    def __eq__(self, other: object) -> bool:
        return type(other) is Counter and other.state_dict() == self.state_dict()

    __hash__ = None  # type: ignore[assignment]


class Holder(agentsnap_core.Snapshottable):
    def __init__(self) -> None:
        self.value: Any = None


def roundtrip(value: Any) -> Any:
    """Through the encoding and real msgpack bytes, as the store does."""
    return decode_value(unpack(pack_value(encode_value(value))))


def same(a: Any, b: Any) -> bool:
    """Equal, and of the same types all the way down (1 vs True vs 1.0, list vs tuple), dicts in the same order."""
    if type(a) is not type(b):
        return False
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, dt.datetime) and a.tzinfo is not None:
        return a == b and a.utcoffset() == b.utcoffset() and a.tzinfo == b.tzinfo
    return bool(a == b)


# ---------------------------------------------------------------------------------------------- property
def _zones() -> st.SearchStrategy[Any]:
    zones: list[dt.tzinfo] = [dt.timezone.utc, dt.timezone(dt.timedelta(hours=5, minutes=30)), dt.timezone(-dt.timedelta(hours=7))]
    try:
        from zoneinfo import ZoneInfo

        zones.append(ZoneInfo("Europe/Paris"))
    except Exception:  # no tz database on this machine
        pass
    return st.sampled_from(zones)


hashables = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.text(max_size=8),
    st.binary(max_size=8),
    st.dates(),
    st.uuids(),
    st.decimals(allow_nan=False, allow_infinity=False, places=3),
    st.sampled_from(list(Color) + list(Level)),
    st.builds(Point, st.integers(), st.text(max_size=4)),
)
leaves = st.one_of(
    hashables,
    st.floats(allow_nan=False),
    st.complex_numbers(allow_nan=False, allow_infinity=False),
    st.builds(bytearray, st.binary(max_size=8)),
    st.datetimes(),
    st.datetimes(timezones=_zones()),
    st.times(),
    st.timedeltas(),
    st.builds(PurePosixPath, st.text(alphabet="abc/._", max_size=12)),
    # pathlib itself does not parse every Windows path back from its own string (a device path such as the one
    # made of two backslashes, a dot and a backslash prints with a doubled last backslash, which parses as the root):
    # paths are stored as their string, so only paths pathlib round-trips are expected back
    st.builds(PureWindowsPath, st.text(alphabet="abc\\._", max_size=12)).filter(lambda p: PureWindowsPath(str(p)) == p),
    st.builds(Path, st.text(alphabet="abc/._", max_size=12)),
    st.builds(Note, st.text(max_size=6), st.lists(st.text(max_size=3), max_size=3)),
    st.builds(Profile, name=st.text(max_size=6), born=st.dates(), scores=st.lists(st.floats(allow_nan=False, allow_infinity=False), max_size=3)),
    st.builds(Pair, st.integers(), st.text(max_size=3)),
    st.builds(Counter, st.integers(), st.text(max_size=4)),
)
values = st.recursive(
    leaves,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.lists(inner, max_size=4).map(tuple),
        st.dictionaries(st.text(max_size=6), inner, max_size=4),
        st.dictionaries(hashables, inner, max_size=4),
        st.sets(hashables, max_size=4),
        st.frozensets(hashables, max_size=4),
    ),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(values)
def test_property_every_supported_type_round_trips_through_msgpack_bytes(value: Any) -> None:
    back = roundtrip(value)
    assert same(back, value), (value, back)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=values)
def test_property_nested_values_round_trip_through_the_store(value: Any, tmp_path_factory: pytest.TempPathFactory) -> None:
    with agentsnap_core.Client(tmp_path_factory.mktemp("store")) as client:
        holder = Holder()
        holder.value = {"nested": [value, (value,)], "child": Tool()}
        snap = client.save(holder, agent_id="holder")
        back = client.restore(snap, into=Holder())
    assert same(back.value["nested"], [value, (value,)])
    assert isinstance(back.value["child"], Tool)


def test_same_value_same_bytes_so_snapshots_dedup() -> None:
    a = {"s": {3, 1, 2}, "d": {2: "b", 1: "a"}, "t": {"y": 1, "x": 2}}
    b = {"s": {2, 3, 1}, "d": {2: "b", 1: "a"}, "t": {"y": 1, "x": 2}}  # (sets have no order of their own)
    assert pack_value(encode_value(a)) == pack_value(encode_value(b))
    assert pack_value({"a": 1, "b": {"c": 2}}) == pack({"b": {"c": 2}, "a": 1})  # sorted maps: pack's bytes


def test_a_layer_value_is_packed_as_it_is_and_a_key_msgpack_cannot_read_back_is_refused() -> None:
    """pack_value checks the keys without rebuilding the value (it copied every dict and list of a state before
    packing it): tuples pack as lists and a dict or list subclass as the plain type, in its own order, as before;
    a map key that is not a str, bytes or number is still refused, naming the type, in a nested map too."""
    import collections

    plain = {"m": [{"role": "user", "tags": ["a", "b"]}], 2: {"z": 1, "a": [1.5, None, True, b"x"]}}
    shaped = collections.OrderedDict([("m", ({"role": "user", "tags": ("a", "b")},)),
                                      (2, {"z": 1, "a": [1.5, None, True, b"x"]})])
    assert pack_value(shaped) == pack_value(plain)
    assert unpack(pack_value(plain)) == plain
    for bad in ({None: 1}, {"ok": [{(1, 2): "x"}]}, {"ok": {True: 1}}):
        with pytest.raises(AgentSnapError, match="map keys must be str, bytes or numbers"):
            pack_value(bad)


@pytest.mark.parametrize("model", [
    Aliased(userName="bob"), WithExcluded(keep=2, token="t-123"), Forbidding(a=3), Holds(child=Memo(text="n")),
    Tagged(tags=["a"]), Loose(a=1, extra_field={"k": 1}), Profile(name="x", born=dt.date(2000, 1, 2)),
], ids=lambda m: type(m).__name__)
def test_a_pydantic_model_comes_back_field_for_field(model: pydantic.BaseModel, tmp_path: Path) -> None:
    """Pydantic models an agent keeps (its memory, its tool settings), saved and restored through the store.

    Before, a model was stored as ``model_dump()`` and rebuilt with ``model_validate``: a model with a field alias
    saved and then could never be restored (ValidationError, "userName: Field required"); one with a
    ``@computed_field`` and ``extra="forbid"`` the same; a field marked ``exclude=True`` came back as its default
    with no word (the token lost); a submodel in a field typed as its base class failed with a bare AttributeError;
    a validator that changes values ran a second time (["a", "seen"] came back ["a", "seen", "seen"]). Now every
    field comes back as it was, nested models as their own classes, which fields were set too, without validating
    again.
    """
    holder = Holder()
    holder.value = model
    with agentsnap_core.Client(tmp_path) as client:
        back = client.restore(client.save(holder, agent_id="m"), into=Holder()).value
    assert type(back) is type(model) and back == model
    assert back.__dict__ == model.__dict__ and back.__pydantic_fields_set__ == model.__pydantic_fields_set__
    assert back.__pydantic_extra__ == model.__pydantic_extra__
    if isinstance(model, Holds):
        assert type(back.child) is Memo


def test_a_dicts_order_comes_back_as_the_agent_built_it(tmp_path: Path) -> None:
    """An agent keeps tool results in a dict in the order they came and builds its next prompt from it.

    Before, every map of a saved state came back with its keys sorted (``{"search": .., "fetch": ..}`` as
    ``{"fetch": .., "search": ..}``; a dict with int keys sorted too), typed agent or plain ``state_dict()`` alike,
    and the trace's messages with their keys sorted: the restored agent built a different prompt than the one it
    would have built, with no word said. Now maps keep their order through the store, nested ones too.
    """

    class Plain:
        def __init__(self) -> None:
            self.results: dict[str, Any] = {}
            self.messages = [{"role": "user", "content": "hi"}]

        def state_dict(self) -> dict[str, Any]:
            return {"results": self.results}

        def load_state_dict(self, state: dict[str, Any]) -> None:
            self.results = state["results"]

    typed = Holder()
    typed.value = {"search": {"q": "x", "hits": 3}, "fetch": {"url": "u"}, 10: "ten", 2: "two", "calc": (1, {"z": 0, "a": 1})}
    plain = Plain()
    plain.results = {"search": 1, "fetch": {"url": "u", "status": 200}, "calc": 3}
    with agentsnap_core.Client(tmp_path / "store") as client:
        back = client.restore(client.save(typed, agent_id="typed"), into=Holder())
        assert same(back.value, typed.value)
        assert list(back.value) == ["search", "fetch", 10, 2, "calc"] and list(back.value["calc"][1]) == ["z", "a"]
        again = Plain()
        client.restore(snap := client.save(plain, agent_id="plain"), into=again)
        assert list(again.results) == ["search", "fetch", "calc"] and list(again.results["fetch"]) == ["url", "status"]
        assert list(client.repo.read_layer(snap, "trace")[0]) == ["role", "content"]
    repo = agentsnap_core.Repo.init(tmp_path / "work")  # the working trace, through a restore
    repo.append_message("assistant", "calling", tool_calls=[{"name": "search", "args": {"q": "x", "k": 3}}])
    first = repo.snapshot("one")
    repo.append_message("user", "more")
    repo.restore(first.id)
    [msg] = repo.messages()
    assert list(msg) == ["id", "role", "content", "tool_calls"] and list(msg["tool_calls"][0]["args"]) == ["q", "k"]
    repo.close()


# ---------------------------------------------------------------------------------------------- errors
def test_unsupported_type_names_the_attribute_path(tmp_path: Path) -> None:
    agent = Agent()
    sock = socket.socket()
    try:
        agent.memory = ["ok", {"k": [1, 2, sock]}]
        with agentsnap_core.Client(tmp_path) as client:
            with pytest.raises(agentsnap_core.UnsupportedValue) as err:
                client.save(agent, agent_id="a")
            assert client.timeline() == []  # nothing half-written
    finally:
        sock.close()
    assert err.value.path == "Agent.memory[1]['k'][2]"
    assert "socket.socket" in str(err.value) and "Agent.memory[1]['k'][2]" in str(err.value)


def test_unsupported_type_inside_a_nested_agent_names_the_full_path() -> None:
    agent = Agent()
    agent.tool.uses = object()
    with pytest.raises(agentsnap_core.UnsupportedValue, match=r"Agent\.tool\.uses: values of type builtins\.object"):
        dump_state(agent)


def test_unsupported_set_member_and_dict_key_are_named() -> None:
    with pytest.raises(agentsnap_core.UnsupportedValue) as err:
        encode_value({"tools": {frozenset({object()})}}, "agent")
    assert err.value.path.startswith("agent['tools'] item")


def test_no_pickle_by_default_and_never_on_load_without_trust() -> None:
    class Pickly(agentsnap_core.Snapshottable):
        __snapshot_pickle__ = True

        def __init__(self) -> None:
            self.blob = range(3)  # not a supported type: pickled only because the class opted in

    data = encode_value(Pickly().state_dict(), "Pickly", allow_pickle=True)
    assert data["blob"]["$t"] == "pickle"
    with pytest.raises(UnsafeSnapshot, match="pickle"):
        decode_value(data, "Pickly")
    assert decode_value(data, "Pickly", trust_pickle=True)["blob"] == range(3)
    with pytest.raises(agentsnap_core.UnsupportedValue):
        encode_value({"blob": range(3)}, "NotOptedIn")


def test_classes_named_by_a_snapshot_are_never_imported() -> None:
    doc = {"$t": "dataclass", "cls": "some_module_not_imported_xyz:Evil", "v": {}}
    with pytest.raises(agentsnap_core.AgentSnapError, match="not imported"):
        decode_value(doc, "agent.x")
    with pytest.raises(agentsnap_core.AgentSnapError, match="not a dataclass"):
        decode_value({"$t": "dataclass", "cls": "builtins:dict", "v": {}}, "agent.x")
    with pytest.raises(agentsnap_core.AgentSnapError, match="unknown value tag"):
        decode_value({"$t": "future-type", "v": 1}, "agent.x")


def test_user_dict_with_the_tag_key_is_escaped() -> None:
    value = {"$t": "tuple", "v": [1, 2]}
    assert same(roundtrip(value), value)


# ---------------------------------------------------------------------------------------------- the mixin
def test_public_attributes_by_default_private_excluded_nested_recursive(tmp_path: Path) -> None:
    agent = Agent()
    agent.memory = [("user", "hi")]
    agent.counters = {"calls": 3}
    agent.tool.uses = 2
    assert set(agent.state_dict()) == {"memory", "counters", "tool"}
    with agentsnap_core.Client(tmp_path) as client:
        snap = client.save(agent, agent_id="a")
        fresh = Agent()
        fresh_tool = fresh.tool
        client.restore(snap, into=fresh)
        rebuilt = client.restore(snap)  # a new instance of the saved class
    assert fresh.memory == [("user", "hi")] and fresh.counters == {"calls": 3}
    assert fresh.tool is fresh_tool and fresh.tool.uses == 2  # nested agents load in place
    assert fresh._client == "live connection"
    assert isinstance(rebuilt, Agent) and rebuilt.tool.uses == 2


def test_explicit_field_list() -> None:
    p = Picked()
    assert p.state_dict() == {"keep": 1}
    with pytest.raises(agentsnap_core.AgentSnapError, match="not one of __snapshot_fields__"):
        p.load_state_dict({"skip": 2})


def test_clone_is_independent_and_shares_private_resources() -> None:
    agent = Agent()
    agent.memory.append({"at": dt.datetime(2024, 5, 1, 12, 0)})
    twin = agent.clone()
    twin.memory.append("more")
    twin.tool.uses = 9
    assert agent.memory == [{"at": dt.datetime(2024, 5, 1, 12, 0)}] and agent.tool.uses == 0
    assert twin._client is agent._client


def test_plain_state_dict_objects_still_work_through_the_client(tmp_path: Path) -> None:
    class Plain:
        def __init__(self) -> None:
            self.data = {"n": 1}
            self.messages: list[dict[str, Any]] = [{"role": "user", "content": "hi"}]

        def state_dict(self) -> dict[str, Any]:
            return dict(self.data)

        def load_state_dict(self, state: dict[str, Any]) -> None:
            self.data = dict(state)

    p = Plain()
    with agentsnap_core.Client(tmp_path) as client:
        snap = client.save(p, agent_id="plain")
        p.data["n"], p.messages[:] = 2, []
        client.restore(snap, into=p)
        assert client.repo.read_layer(snap, "trace")[0]["content"] == "hi"
    assert p.data == {"n": 1} and p.messages == [{"role": "user", "content": "hi"}]


def test_timezones_and_folds_survive() -> None:
    from zoneinfo import ZoneInfo

    ambiguous = dt.datetime(2024, 10, 27, 2, 30, tzinfo=ZoneInfo("Europe/Paris"), fold=1)
    back = roundtrip(ambiguous)
    assert back.tzinfo == ZoneInfo("Europe/Paris") and back.utcoffset() == ambiguous.utcoffset() and back.fold == 1
    assert same(roundtrip(uuid.UUID(int=5)), uuid.UUID(int=5))
    assert same(roundtrip(Decimal("1.10")), Decimal("1.10")) and str(roundtrip(Decimal("1.10"))) == "1.10"


def test_a_model_saved_by_an_earlier_version_still_loads() -> None:
    """Snapshots written before models were stored field by field hold ``model_dump()`` under ``v``: still read."""
    from agentsnap_core.format.snapshottable import TAG

    old = {TAG: "model", "cls": f"{__name__}:Profile", "v": {"name": "x", "born": {TAG: "date", "v": "2000-01-02"}, "scores": [1.5]}}
    assert decode_value(unpack(pack(old))) == Profile(name="x", born=dt.date(2000, 1, 2), scores=[1.5])


def test_a_dataclass_comes_back_as_saved_even_when_its_init_changes_fields(tmp_path: Path) -> None:
    """Before, a dataclass was rebuilt by calling it with the saved fields: a ``__post_init__`` that prepends
    ("start") did it again on every restore (["start", "a"] came back ["start", "start", "a"], in silence), and one
    that takes an ``InitVar`` (which is never stored) could not be called at all: saved, never restored. Now each
    field is set as saved after ``__init__`` (which still makes what is not a field, like ``seen`` here); a class
    whose ``__init__`` needs an ``InitVar`` is rebuilt from its fields alone."""
    holder = Holder()
    holder.value = [Plan(["a"]), Seeded(1, 5)]
    with agentsnap_core.Client(tmp_path) as client:
        plan, seeded = client.restore(client.save(holder, agent_id="dc"), into=Holder()).value
    assert plan.steps == ["start", "a"] and plan.seen == {"start", "a"}
    assert seeded == Seeded(1, 5) and seeded.derived == 10


def test_an_agent_class_with_slots_saves_its_slots(tmp_path: Path) -> None:
    """Before, ``state_dict()`` read ``vars(self)`` only: an agent class with ``__slots__`` saved ``{}`` and came back
    as a fresh instance (its plan and progress gone, no word said), ``clone()`` the same, and ``rollback`` left a
    slot set by the failed block. Now slots are attributes like any other: public ones saved, private ones kept
    out (and shared by ``clone``), an unset slot skipped."""
    agent = MoreSlots()
    agent.plan, agent.done, agent.budget = ["search", "write"], 1, 7
    agent.note = "a dict attribute too"  # (the mixin gives instances a __dict__ as well)
    assert agent.state_dict() == {"plan": ["search", "write"], "done": 1, "budget": 7, "note": "a dict attribute too"}
    with agentsnap_core.Client(tmp_path) as client:
        back = client.restore(client.save(agent, agent_id="slots"), into=MoreSlots())
    assert (back.plan, back.done, back.budget, back.note) == (["search", "write"], 1, 7, "a dict attribute too")
    twin = agent.clone()
    assert (twin.plan, twin.budget, twin._client) == (["search", "write"], 7, "live connection")
    with pytest.raises(RuntimeError), agentsnap_core.rollback(agent):
        agent.spare = "set by the failed block"
        agent.done = 2
        raise RuntimeError
    assert agent.done == 1 and not hasattr(agent, "spare")



def test_file_names_that_are_not_utf8_survive_a_typed_agent_and_are_named_in_a_plain_one(tmp_path: Path) -> None:
    """An agent that listed a directory holding a file name that is not UTF-8 (``os.listdir`` gives it with a lone
    surrogate, ``"bad\\udcff.txt"``). Before, the agent could not be saved at all ("value cannot be stored: 'utf-8'
    codec can't encode character '\\udcff'...", not saying where). Now a typed agent keeps such strings exactly (as
    keys and set members too); a plain ``state_dict()`` value is still refused, and the message says where it is."""

    class Plain:
        def __init__(self) -> None:
            self.listing: list[str] = []

        def state_dict(self) -> dict[str, Any]:
            return {"listing": self.listing}

        def load_state_dict(self, state: dict[str, Any]) -> None:
            self.listing = state["listing"]

    holder = Holder()
    holder.value = {"files": ["ok.txt", "bad\udcff.txt"], "bad\udcfe": 1, "seen": {"x\udc80"}}
    plain = Plain()
    plain.listing = ["ok.txt", "bad\udcff.txt"]
    with agentsnap_core.Client(tmp_path) as client:
        back = client.restore(client.save(holder, agent_id="typed"), into=Holder()).value
        assert same(back, holder.value)
        with pytest.raises(agentsnap_core.AgentSnapError, match=r"value\['listing'\]\[1\] is a string with characters"):
            client.save(plain, agent_id="plain")
        assert client.timeline("plain") == []


def test_a_class_a_restore_could_not_find_is_refused_at_save_and_register_type_names_it(tmp_path: Path) -> None:
    """A dataclass made inside a function (a factory, a test, a notebook cell's helper) held in an agent's state.

    Before, the save succeeded and the snapshot could never be restored, not even in the same process ("...
    make.<locals>.Local is not a class in the running program"), and ``register_type(cls, "name")`` did not help:
    snapshots still held the qualified name, and a name without ``module:`` was "a bad class reference". Now the
    save is refused, saying what to do, and a class given a name with ``register_type`` is written and found by it.
    """

    def make() -> type:
        @dataclasses.dataclass
        class Local:
            x: int = 1

        return Local

    local = make()
    holder = Holder()
    holder.value = [local(x=2)]
    with agentsnap_core.Client(tmp_path) as client:
        with pytest.raises(agentsnap_core.AgentSnapError, match=r"cannot snapshot .*Local cannot be found by its name .*"
                                                                r"defined inside a function.*register_type"):
            client.save(holder, agent_id="local")
        assert client.timeline("local") == []
        agentsnap_core.register_type(local, "tests.Local")
        back = client.restore(client.save(holder, agent_id="local"), into=Holder())
    assert type(back.value[0]) is local and back.value[0].x == 2
