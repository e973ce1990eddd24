"""The standard library's containers agents hold come back as themselves.

Before: ``collections.deque(maxlen=20)`` (a sliding window of recent turns), ``defaultdict(list)``, ``Counter`` (tool
use tallies) and ``OrderedDict`` (an LRU cache) were refused at save (``UnsupportedValue``, "a subclass of dict: it
would come back as a plain dict"), so an agent holding one could not be snapshotted without rewriting it. Now each
comes back with its type and what makes it that type: the window's ``maxlen``, the factory, the order.
"""

from __future__ import annotations

import collections
from pathlib import Path
from typing import Any

import pytest
from agentsnap_core import Client, Snapshottable
from agentsnap_core.errors import AgentSnapError


class Bot(Snapshottable):
    def __init__(self) -> None:
        self.memory: Any = None


@pytest.fixture
def client(tmp_path: Path) -> Client:
    with Client(tmp_path) as c:
        yield c


def _round_trip(client: Client, value: Any) -> Any:
    bot = Bot()
    bot.memory = value
    return client.restore(client.save(bot, agent_id="bot")).memory


def test_a_sliding_window_keeps_its_maxlen_and_goes_on_dropping_the_oldest(client: Client) -> None:
    window = collections.deque(["t1", "t2", "t3"], maxlen=3)
    back = _round_trip(client, window)
    assert type(back) is collections.deque and back.maxlen == 3 and list(back) == ["t1", "t2", "t3"]
    back.append("t4")
    assert list(back) == ["t2", "t3", "t4"]
    assert _round_trip(client, collections.deque([1])).maxlen is None


def test_a_defaultdict_keeps_its_factory(client: Client) -> None:
    back = _round_trip(client, collections.defaultdict(list, {"search": [1]}))
    assert type(back) is collections.defaultdict and back == {"search": [1]}
    back["fetch"].append(2)  # (a plain dict: KeyError)
    assert back["fetch"] == [2]
    assert _round_trip(client, collections.defaultdict(None, {"a": 1})).default_factory is None


def test_a_defaultdict_whose_factory_is_a_function_is_one_clear_error_and_nothing_is_saved(client: Client) -> None:
    bot = Bot()
    bot.memory = collections.defaultdict(lambda: "n/a")
    with pytest.raises(AgentSnapError, match=r"Bot\.memory: its default_factory .* is not a builtin or collections type"):
        client.save(bot, agent_id="bot")
    assert client.timeline() == []


def test_a_counter_counts_on_and_an_ordered_dict_keeps_its_order(client: Client) -> None:
    tally = _round_trip(client, collections.Counter({"search": 3, "fetch": 1}))
    assert type(tally) is collections.Counter and tally["never used"] == 0 and tally.most_common(1) == [("search", 3)]
    cache = collections.OrderedDict([("z", 1), ("a", 2)])
    back = _round_trip(client, cache)
    assert type(back) is collections.OrderedDict and list(back) == ["z", "a"]
    back.move_to_end("z")
    assert list(back) == ["a", "z"]


def test_they_keep_their_identity_too(client: Client) -> None:
    window: collections.deque[Any] = collections.deque(maxlen=5)
    window.append(window)  # (a window that holds itself)
    bot = Bot()
    bot.memory = {"recent": window, "same": window}
    back = client.restore(client.save(bot, agent_id="bot")).memory
    assert back["recent"] is back["same"] and back["recent"][0] is back["recent"]


def test_time_zones_and_compiled_patterns_come_back(client: Client) -> None:
    """A scheduling agent's ``self.tz = ZoneInfo("Europe/Paris")`` or a parser's ``re.compile(...)`` (held alone, not
    inside a datetime) were refused at save ("values of type zoneinfo.ZoneInfo are not supported")."""
    import datetime as dt
    import re
    from zoneinfo import ZoneInfo

    values = {"paris": ZoneInfo("Europe/Paris"), "utc": dt.timezone.utc,
              "named": dt.timezone(dt.timedelta(hours=5, minutes=30), "IST"), "plain": dt.timezone(-dt.timedelta(hours=3)),
              "ticket": re.compile(r"[A-Z]+-\d+", re.IGNORECASE), "raw": re.compile(rb"\x00+")}
    back = _round_trip(client, values)
    assert back == values and all(type(back[k]) is type(v) for k, v in values.items())
    assert back["named"].tzname(None) == "IST" and back["ticket"].match("abc-12")
