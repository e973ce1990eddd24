"""Adapters installed as separate distributions are found through the `agentsnap` entry-point group."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from agentsnap_core.testing.servers import need_module

EXPECTED = {"langgraph": "agentsnap-langgraph", "claude_code": "agentsnap-claude-code"}


def plugins_json(env_extra: dict[str, str] | None = None) -> list[dict[str, str]]:
    env = {k: v for k, v in os.environ.items() if k != "AGENTSNAP_PLUGINS"}
    env.update(env_extra or {})
    out = subprocess.run([sys.executable, "-m", "agentsnap_core", "plugins", "--json"], capture_output=True, text=True, env=env, check=True)
    return json.loads(out.stdout)


def test_installed_adapters_are_discovered() -> None:
    for mod in ("agentsnap_langgraph", "agentsnap_claude_code"):
        need_module(mod)
    by_name = {p["name"]: p for p in plugins_json()}
    for name, dist in EXPECTED.items():
        assert name in by_name, f"{name} not discovered: {sorted(by_name)}"
        assert by_name[name]["dist"].startswith(dist), by_name[name]
        assert "agentsnap_handles" in by_name[name]["hooks"]
    assert "agentsnap_core.plugins.defaults" in by_name


def test_allow_list_limits_discovery() -> None:
    need_module("agentsnap_langgraph")
    names = {p["name"] for p in plugins_json({"AGENTSNAP_PLUGINS": "langgraph"})}
    assert "langgraph" in names and "claude_code" not in names
    names = {p["name"] for p in plugins_json({"AGENTSNAP_PLUGINS": "none"})}
    assert names == {"agentsnap_core.plugins.defaults"}
