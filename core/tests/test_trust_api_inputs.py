"""The Python API's ``Client`` takes what its own answers hand back, and refuses a wrong type with one clear error.

Reported, as a user of ``docs/PYTHON_API.md`` would write it:

- ``client.metadata(client.latest("bot"))`` (a :class:`SnapshotInfo`, which ``latest``/``timeline``/``lineage``
  return) raised ``AttributeError: 'SnapshotInfo' object has no attribute 'partition'``; so did ``restore``,
  ``expire``, ``delete``, ``handoff`` and ``lineage``. They now take a SnapshotInfo as its id; anything else that is
  not a str is an :class:`InvalidInput` that says what a snapshot is named by.
- ``save(..., tags="good")`` stored the tags ``["g", "o", "o", "d"]`` (a str is iterable) - the same defect as
  PFSaver's ``prune("xy")``. A str is refused: tags are a list of str.
- ``timeline(limit=0)`` returned one snapshot, and ``limit=-1`` one too; 0 now returns none and a negative or
  non-integer limit is refused.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from agentsnap_core import Client, Snapshottable
from agentsnap_core.errors import InvalidInput


class Bot(Snapshottable):
    def __init__(self) -> None:
        self.memory = ["hello"]


@pytest.fixture
def client(tmp_path: Path) -> Client:
    c = Client(tmp_path)
    c.save(Bot(), agent_id="bot")
    c.save(Bot(), agent_id="bot")
    return c


def test_a_snapshot_info_names_its_snapshot_everywhere(client: Client) -> None:
    info = client.latest("bot")
    assert info is not None
    assert client.metadata(info)["id"] == info.id
    assert client.exists(info)
    assert isinstance(client.restore(info), Bot)
    assert [i.id for i in client.lineage(info)][0] == info.id
    new = client.handoff(info, "writer")
    assert client.metadata(new)["agent_id"] == "writer"
    client.expire(info)
    assert not client.exists(info)


@pytest.mark.parametrize("bad", [42, None, b"abc", ["x"]], ids=repr)
def test_a_snapshot_named_by_another_type_is_one_clear_error(client: Client, bad: object) -> None:
    for call in (client.metadata, client.restore, client.lineage, client.expire, client.delete):
        with pytest.raises(InvalidInput, match="snapshot"):
            call(bad)  # type: ignore[arg-type]
    assert client.exists(bad) is False  # type: ignore[arg-type]


def test_tags_given_as_one_string_are_refused_not_split_into_letters(client: Client) -> None:
    with pytest.raises(InvalidInput, match="tags"):
        client.save(Bot(), agent_id="bot", tags="good")  # type: ignore[arg-type]
    assert len(client.timeline("bot")) == 2
    sid = client.save(Bot(), agent_id="bot", tags=["good"])
    assert client.metadata(sid)["tags"] == ["good"]


def test_timeline_limit_zero_is_none_and_a_negative_limit_is_refused(client: Client) -> None:
    assert client.timeline("bot", limit=0) == []
    assert len(client.timeline("bot", limit=1)) == 1 and len(client.timeline("bot")) == 2
    for bad in (-1, 1.5, "2", True):
        with pytest.raises(InvalidInput, match="limit"):
            client.timeline("bot", limit=bad)  # type: ignore[arg-type]


def test_a_state_too_large_to_restore_is_refused_at_save_not_at_restore(client: Client) -> None:
    """Reported with the above: ``save`` of an agent holding a 100 MB string succeeded, and its ``restore`` then
    failed ("cannot decode state layer: ... over the 67108864 byte limit"): a snapshot that could never come back.
    The save is now refused with the reason, and nothing is saved."""
    from agentsnap_core.format.content import ValueTooLarge

    big = Bot()
    big.memory = ["x" * (65 * 1024 * 1024)]
    before = client.timeline("bot")
    with pytest.raises(ValueTooLarge, match=r"state layer is 65\.0 MiB.*nothing was saved"):
        client.save(big, agent_id="bot")
    assert client.timeline("bot") == before
    fits = Bot()
    fits.memory = ["x" * (8 * 1024 * 1024)]
    assert client.restore(client.save(fits, agent_id="bot")).memory == fits.memory


def test_an_agent_that_holds_itself_comes_back_holding_itself_not_a_recursion_error(client: Client) -> None:
    """First a bare RecursionError, then a refusal ("reference cycle"); now the agent comes back holding itself."""
    cyclic = Bot()
    cyclic.me = cyclic  # type: ignore[attr-defined]
    back = client.restore(client.save(cyclic, agent_id="bot"))
    assert back.me is back


@pytest.mark.parametrize("bad", [5, None, b"main", ["main"]])
def test_a_branch_or_tag_name_that_is_not_a_str_is_one_clear_error(tmp_path: Path, bad: object) -> None:
    """Before: ``repo.create_branch(5)`` (and every API taking a ref name: ``tag``, crewai's
    ``AgentsnapStorage(path, branch=5)``) raised ``TypeError: expected string or bytes-like object`` from deep in the
    name check (``None``: it passed the check's ``not name`` as an empty name). Now an InvalidRefName naming the type."""
    from agentsnap_core import Repo
    from agentsnap_core.errors import InvalidRefName

    (tmp_path / "a.txt").write_text("a")
    repo = Repo.init(tmp_path)
    repo.snapshot("one")
    for make in (repo.create_branch, repo.tag):
        with pytest.raises(InvalidRefName, match=f"a name is a str, not a {type(bad).__name__}"):
            make(bad)  # type: ignore[arg-type]
    assert set(repo.branches()) == {"main"} and repo.tags() == {}


@pytest.mark.parametrize("ref", ["refs/heads/bad..name", "refs/heads/-f", "refs/heads/two words", "refs/tags/a b"])
def test_snapshot_to_a_branch_no_verb_accepts_is_refused_and_writes_nothing(tmp_path: Path, ref: str) -> None:
    """Before: ``repo.snapshot(ref="refs/heads/two words")`` (what adapters' ``branch=`` options pass on, e.g.
    AutoGen's ``snapshot(team, branch=...)``) made that branch, which every verb then refused to name
    ("invalid name 'two words'"): a snapshot reachable only by its id. The name is checked first."""
    from agentsnap_core import Repo
    from agentsnap_core.errors import InvalidRefName

    (tmp_path / "a.txt").write_text("a")
    repo = Repo.init(tmp_path)
    repo.snapshot("one")
    before = repo.refs.list_refs("refs/")
    with pytest.raises(InvalidRefName):
        repo.snapshot("two", ref=ref)
    assert repo.refs.list_refs("refs/") == before


@pytest.mark.parametrize("n", ["3", 2.0, True, None])
def test_a_fork_count_that_is_not_a_whole_number_is_one_clear_error(tmp_path: Path, n: object) -> None:
    """Before: ``repo.fork(n="3")`` raised ``TypeError: '<' not supported between instances of 'str' and 'int'``
    (``True`` made one fork, ``2.0`` two)."""
    from agentsnap_core import Repo

    (tmp_path / "a.txt").write_text("a")
    repo = Repo.init(tmp_path)
    repo.snapshot("one")
    with pytest.raises(InvalidInput, match="fork count must be a whole number"):
        repo.fork(n=n)  # type: ignore[arg-type]
    assert set(repo.branches()) == {"main"}
