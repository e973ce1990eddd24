"""Settings in an adapter's stored config that reach outside the process when the framework builds it again.

A framework that rebuilds an agent from stored config (CrewAI's checkpoint resume, AutoGen's ``load_component``)
takes what the config says: a model client's ``base_url`` (and sends the API key it finds in the environment
there), an MCP server's command (and starts it). A snapshot travels (push, pull, clone), so what a teammate's or a
crafted snapshot names is not what you chose. :func:`outside_settings` finds such settings; :func:`remember` notes the
values of a capture made here (in the store's local list of own objects, never pushed: ``Repo.remember_own``);
:func:`check` refuses a config naming any value not noted here, unless the caller trusts it. A value you have used
yourself (your own gateway's URL in a teammate's snapshot) passes.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

from agentsnap_core.errors import AgentSnapError
from agentsnap_core.format.objects import own_token

__all__ = ["UntrustedSettings", "check", "may_reach_out", "outside_settings", "remember"]

#: a client setting naming where requests go (``base_url``, ``api_base``, ``azure_endpoint``, ``proxy``, ...)
ENDPOINT_KEY = re.compile(r"(?:[a-z0-9]*_)*(?:url|uri|endpoint|base|host|proxy|proxies)", re.IGNORECASE)
#: the same on JSON text, with a non-empty string value, or a non-empty list of MCP servers: the cheap pre-check
_TEXT = re.compile(r'"(?:[A-Za-z0-9]*_)*(?:url|uri|endpoint|base|host|proxy|proxies)"\s*:\s*"[^"]'
                   r'|"(?:mcps|mcp_servers|server_params)"\s*:\s*[\[{]\s*[^\]}\s]', re.IGNORECASE)
#: settings whose whole value is a server to start or connect to (CrewAI's ``mcps``, AutoGen's MCP workbench)
SERVER_KEYS = frozenset({"mcps", "mcp_servers", "server_params"})


def may_reach_out(text: str) -> bool:
    """False only when :func:`outside_settings` would find nothing in the JSON ``text`` (no parse)."""
    return _TEXT.search(text) is not None


def outside_settings(config: Any, *, data_keys: Iterable[str] = ()) -> dict[str, str]:
    """``{dotted path: value}`` of the settings in ``config`` (plain JSON data) that reach outside the process:
    endpoints (a non-empty string under a key :data:`ENDPOINT_KEY` matches) and servers (:data:`SERVER_KEYS`, as
    JSON). Values under ``data_keys`` are the run's data (task outputs, inputs, messages), never walked."""
    skip = frozenset(data_keys)
    found: dict[str, str] = {}

    def walk(node: Any, path: str) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                sub = f"{path}.{key}" if path else str(key)
                if key in SERVER_KEYS and value:
                    found[sub] = json.dumps(value, sort_keys=True, default=str)
                elif isinstance(value, str) and value and ENDPOINT_KEY.fullmatch(str(key)):
                    found[sub] = value
                elif key not in skip:
                    walk(value, sub)
        elif isinstance(node, list):
            for i, item in enumerate(node):
                walk(item, f"{path}[{i}]")

    walk(config, "")
    return found


def _token(value: str) -> str:
    return own_token("reach", [value.encode("utf-8", "surrogatepass")])


def remember(repo: Any, found: dict[str, str]) -> None:
    """Note ``found``'s values (of a capture made here) as this store's own (``repo.remember_own``)."""
    own = repo.own_trees()
    for value in set(found.values()):
        if _token(value) not in own:
            repo.remember_own(_token(value))


class UntrustedSettings(AgentSnapError):
    """A snapshot's config names endpoints or servers this store never used itself; nothing was built from it."""

    def __init__(self, snapshot: str, settings: dict[str, str], remedy: str) -> None:
        self.snapshot = snapshot
        self.settings = settings
        shown = "; ".join(f"{path} = {value[:200]}" for path, value in list(settings.items())[:8])
        more = f" (and {len(settings) - 8} more)" if len(settings) > 8 else ""
        super().__init__(
            f"snapshot {snapshot[:12]} names settings this store never used itself (it came from a clone, a pull or "
            f"a crafted store?) that reach outside this process: {shown}{more}. Built as they are, they would send "
            f"your API keys to those endpoints and start or connect to those servers. {remedy}, or pass "
            "trust_settings=True if you trust whoever wrote it"
        )


def check(repo: Any, snapshot: str, found: dict[str, str], *, remedy: str, trust: bool = False,
          allowed: Iterable[str] = ()) -> None:
    """Raise :class:`UntrustedSettings` for the settings in ``found`` whose value this store never noted as its own
    (:func:`remember`), apart from those at or under a path in ``allowed`` (what the caller's live objects
    replace). Nothing to raise with ``trust``."""
    if trust or not found:
        return
    kept = tuple(allowed)
    own = repo.own_trees()
    foreign = {path: value for path, value in found.items()
               if _token(value) not in own and not any(path == a or path.startswith((f"{a}.", f"{a}[")) for a in kept)}
    if foreign:
        raise UntrustedSettings(snapshot, foreign, remedy)
