"""``agentsnap_core.layers.reach``: settings that reach outside the process, and the store's own list of them.

The adapters' tests show it end to end (CrewAI and AutoGen: ``tests/test_trust_endpoints.py``, a real request to a
stand-in server); these pin the rules they share: which keys count, data left alone, own values passing.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from agentsnap_core import Repo
from agentsnap_core.layers import reach

CONFIG = {
    "agents": [{"role": "a", "llm": {"model": "m", "base_url": "http://their-server/v1", "base_url_env": "X"},
                "mcps": [{"command": "sh", "args": ["-c", "true"]}], "tools": []}],
    "embedder": {"config": {"api_base": "http://emb/v1", "azure_endpoint": "", "database": "d"}},
    "outputs": [{"url": "https://some-page.example"}],
    "inputs": {"proxy": "http://p"},
}


def test_endpoints_and_servers_are_found_and_data_is_left_alone() -> None:
    found = reach.outside_settings(CONFIG, data_keys={"outputs", "inputs"})
    assert set(found) == {"agents[0].llm.base_url", "agents[0].mcps", "embedder.config.api_base"}
    assert found["agents[0].llm.base_url"] == "http://their-server/v1"
    assert '"sh"' in found["agents[0].mcps"]
    assert reach.may_reach_out('{"llm": {"base_url": "http://x"}}') and reach.may_reach_out('{"mcps": [{"a": 1}]}')
    assert not reach.may_reach_out('{"llm": {"base_url": null, "mcps": []}, "database": "x"}')


def test_values_used_here_pass_and_others_are_refused_by_path(tmp_path: Path) -> None:
    with Repo.init(tmp_path / "w") as repo:
        found = reach.outside_settings(CONFIG, data_keys={"outputs", "inputs"})
        with pytest.raises(reach.UntrustedSettings) as refused:
            reach.check(repo, "0" * 64, found, remedy="Pass your own", allowed={"agents[0].llm"})
        assert set(refused.value.settings) == {"agents[0].mcps", "embedder.config.api_base"}
        assert "Pass your own" in str(refused.value) and "trust_settings=True" in str(refused.value)
        reach.check(repo, "0" * 64, found, remedy="-", trust=True)
        reach.remember(repo, {"x": "http://emb/v1", "y": found["agents[0].mcps"]})
        reach.check(repo, "0" * 64, found, remedy="-", allowed={"agents[0].llm"})  # both now own: passes
        assert reach.outside_settings(CONFIG)["inputs.proxy"] == "http://p"  # (walked when not named data)
    with Repo.open(tmp_path / "w") as again:  # the list is the store's, kept across processes
        reach.check(again, "0" * 64, {"e": "http://emb/v1"}, remedy="-")
