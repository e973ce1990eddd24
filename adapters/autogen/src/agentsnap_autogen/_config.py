"""Component configurations: secrets redacted on capture, model clients re-supplied on restore.

A stored config never holds a secret: every ``SecretStr``, every string under a secret-looking
key (``api_key``, ``token``, ``password``, ``Authorization`` ...) and every string whose shape is a
secret (a password in a URL, a token in a query string, ``sk-...``) is replaced by a :data:`REDACTED`
marker (core's :mod:`agentsnap_core.layers.redact`, shared by every adapter). On restore each ``model_client`` component is replaced by the live
client the caller re-supplies for its *slot* (the ``name`` of the agent or team that owns it),
and remaining markers are filled from ``secrets={field: value}``.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from agentsnap_core.errors import AgentSnapError, InvalidInput
from agentsnap_core.format import objects
from agentsnap_core.layers.reach import UntrustedSettings  # noqa: F401 - re-exported by the package
from agentsnap_core.layers.redact import may_hold_secret
from agentsnap_core.layers.redact import redact as core_redact
from autogen_core import Component, ComponentBase
from autogen_core.models import ChatCompletionClient
from pydantic import BaseModel
from pydantic_core import to_jsonable_python

REDACTED = "$agentsnap-redacted"

#: what a caller passes to re-supply model clients: one client for every slot, a mapping slot -> client,
#: or a callable ``(slot, stored component dict) -> client``
ModelClients = Any


class MissingApproval(AgentSnapError):
    """The snapshot's code executor agents asked for approval before running code; their functions were not given."""

    def __init__(self, agents: list[str]) -> None:
        self.agents = agents
        names = ", ".join(repr(a) for a in agents)
        super().__init__(
            f"the snapshot's code executor agent(s) {names} asked for approval before running code, and an approval "
            "function is never stored (AutoGen cannot serialize one): hand them back, approval_funcs={"
            + ", ".join(f"{a!r}: fn" for a in agents) + "}; a loaded agent never runs code without the approval it had"
        )


class MissingFunction(AgentSnapError):
    """The snapshot's team had functions AutoGen's config cannot hold (a ``selector_func``, ...); they were not given."""

    def __init__(self, missing: dict[str, list[str]]) -> None:
        self.missing = missing
        hint = ", ".join(f"{owner!r}: {{" + ", ".join(f"{arg!r}: fn" for arg in args) + "}"
                         for owner, args in missing.items())
        what = "; ".join(f"{owner}: {', '.join(args)}" for owner, args in missing.items())
        super().__init__(
            f"the snapshot's team had functions that AutoGen's dump_component cannot store ({what}); a team loaded "
            "without them would continue differently without an error (a SelectorGroupChat's model picks the "
            "speakers its selector_func / candidate_func picked, tool call summaries change format, a "
            "UserProxyAgent reads stdin): hand them back, functions={" + hint + "}"
        )


class MissingSecret(AgentSnapError):
    """A redacted secret or model client was not re-supplied on restore."""

    def __init__(self, what: list[str], slots: list[str]) -> None:
        self.what, self.slots = what, slots
        super().__init__(
            f"the snapshot's config had secrets redacted at {', '.join(what)}; re-supply them: "
            f"model_clients={{slot: client}} for slots {slots} or secrets={{field: value}}"
        )


def to_plain(value: Any) -> Any:
    """AutoGen state/config -> msgpack-able data (datetimes as ISO strings, models as dicts)."""
    return to_jsonable_python(value, fallback=repr)


def redact(config: Any) -> tuple[Any, list[str]]:
    """Return ``(config with secrets replaced by markers, the dotted paths redacted)``.

    Uses :func:`agentsnap_core.layers.redact.redact` (key names *and* value shapes: ``https://user:PASS@host``,
    ``?api_key=...``, ``sk-...``); each secret value is replaced whole by ``{REDACTED: field name}``, which
    ``load(..., secrets={field name: value})`` fills back.
    """
    if not may_hold_secret(config):  # core's fast pre-check: nothing to walk for a config without a secret
        return to_plain(config), []
    found = core_redact(config, whole=lambda key, _path: {REDACTED: key})
    return to_plain(found.value), list(found.paths)


def model_slots(config: Any) -> dict[str, dict[str, Any]]:
    """``{slot: stored model_client component}``; a slot is the ``name`` of the client's owner."""
    out: dict[str, dict[str, Any]] = {}
    for slot, comp, _owner in _model_clients(config):
        out[slot] = comp
    return out


def _model_clients(config: Any, owner: str = "") -> Iterator[tuple[str, dict[str, Any], dict[str, Any]]]:
    if isinstance(config, dict):
        name = config.get("name") if isinstance(config.get("name"), str) else owner
        for k, v in config.items():
            if k == "model_client" and isinstance(v, dict) and "provider" in v:
                yield name or "model_client", v, config
            else:
                yield from _model_clients(v, name or owner)
    elif isinstance(config, list):
        for v in config:
            yield from _model_clients(v, owner)


def _has_marker(value: Any) -> list[str]:
    if isinstance(value, dict):
        if set(value) == {REDACTED}:
            return [str(value[REDACTED])]
        return [m for v in value.values() for m in _has_marker(v)]
    if isinstance(value, list):
        return [m for v in value for m in _has_marker(v)]
    return []


def _fill(value: Any, secrets: Mapping[str, str]) -> Any:
    if isinstance(value, dict):
        if set(value) == {REDACTED} and str(value[REDACTED]) in secrets:
            return secrets[str(value[REDACTED])]
        return {k: _fill(v, secrets) for k, v in value.items()}
    if isinstance(value, list):
        return [_fill(v, secrets) for v in value]
    return value


_supplied: ContextVar[dict[str, Any] | None] = ContextVar("agentsnap_autogen_supplied", default=None)


def prepare(
    config: dict[str, Any],
    model_clients: ModelClients = None,
    secrets: Mapping[str, str] | None = None,
    tools: Mapping[str, Any] | None = None,
    trust_code: bool = False,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Make a stored config loadable: ``(config, {key: live object})``.

    Every re-supplied model client slot and tool name becomes a placeholder that :func:`loading`
    resolves to the live object; markers left anywhere raise :class:`MissingSecret`; a stored
    ``FunctionTool`` (its source code would be executed) raises :class:`UntrustedCode` unless it is
    re-supplied in ``tools`` or ``trust_code=True``.
    """
    for arg, value, shape in (("secrets", secrets, "{field: value}"), ("tools", tools, "{tool name: tool}")):
        if value is not None and not isinstance(value, Mapping):
            raise InvalidInput(f"{arg} must be a mapping {shape}, not a {type(value).__name__}")
    config = _fill(config, dict(secrets or {}))
    live: dict[str, Any] = {}
    slots = model_slots(config)
    if isinstance(model_clients, Mapping):  # a misspelt slot would leave the real one rebuilt from its stored config
        unknown = sorted(str(k) for k in model_clients if k not in slots)
        if unknown:
            raise InvalidInput(f"model_clients names slots {unknown} that the snapshot does not have; "
                               f"its slots are {sorted(slots)}")
    if tools is not None:
        stored_tools = _function_tools(config)
        unknown = sorted(str(k) for k in tools if k not in stored_tools)
        if unknown:
            raise InvalidInput(f"tools names {unknown}, which the snapshot has no FunctionTool of; "
                               f"its FunctionTools are {sorted(stored_tools)}")

    def supplied(slot: str, comp: dict[str, Any]) -> Any:
        if model_clients is None:
            return None
        if isinstance(model_clients, Mapping):
            client = model_clients.get(slot)
        elif callable(model_clients) and not hasattr(model_clients, "create"):
            client = model_clients(slot, comp)
        else:
            client = model_clients  # one client for every slot
        if client is not None and not isinstance(client, ChatCompletionClient):
            raise InvalidInput(f"the model client re-supplied for slot {slot!r} is a {type(client).__name__}, not an "
                               "autogen_core.models.ChatCompletionClient (model_clients takes one client, "
                               "{slot: client} or fn(slot, stored) -> client)")
        return client

    def replace(value: Any, owner: str) -> Any:
        if isinstance(value, dict):
            name = value.get("name") if isinstance(value.get("name"), str) else owner
            out = {}
            for k, v in value.items():
                if k == "model_client" and isinstance(v, dict) and "provider" in v:
                    slot = name or "model_client"
                    client = supplied(slot, v)
                    if client is not None:
                        live[f"model:{slot}"] = client
                        v = _placeholder("model", slot)
                    out[k] = v
                elif k == "tools" and isinstance(v, list):
                    out[k] = [_tool(t) for t in v]
                else:
                    out[k] = replace(v, name or owner)
            return out
        if isinstance(value, list):
            return [replace(v, owner) for v in value]
        return value

    def _tool(comp: Any) -> Any:
        if not (isinstance(comp, dict) and isinstance(comp.get("config"), dict) and "source_code" in comp["config"]):
            return replace(comp, "")
        name = str(comp["config"].get("name", ""))
        if tools is not None and name in tools:
            live[f"tool:{name}"] = tools[name]
            return _placeholder("tool", name)
        if not trust_code:
            raise UntrustedCode(name)
        return comp

    config = replace(config, "")
    if not trust_code:
        _refuse_code(config)
    missing = _has_marker(config)
    if missing:
        raise MissingSecret(sorted(set(missing)), sorted(slots))
    return config, live


def _function_tools(config: Any) -> set[str]:
    """Names of the stored ``FunctionTool`` components (those holding source code) anywhere in ``config``."""
    if isinstance(config, dict):
        inner = config.get("config")
        found = {str(inner.get("name", ""))} if isinstance(inner, dict) and "source_code" in inner else set()
        return found.union(*(_function_tools(v) for v in config.values()))
    if isinstance(config, list):
        return set().union(*(_function_tools(v) for v in config))
    return set()


#: the packages AutoGen's loader imports from to load a config (autogen-core 0.7.5 ``ComponentLoader.load_component``
#: imports the module a ``provider`` names); a provider elsewhere must be in a module the program already imported
_AUTOGEN_PACKAGES = frozenset({"autogen_core", "autogen_agentchat", "autogen_ext", "agentsnap_autogen"})


def _providers(config: Any) -> Iterator[str]:
    """The ``provider`` of every component in ``config``, nested ones included."""
    if isinstance(config, dict):
        if isinstance(config.get("provider"), str):
            yield config["provider"]
        for value in config.values():
            yield from _providers(value)
    elif isinstance(config, list):
        for value in config:
            yield from _providers(value)


def _refuse_code(config: Any) -> None:
    """Before anything is loaded, refuse what loading would run: a stored ``FunctionTool`` anywhere (AutoGen builds
    the component a config names - executing a FunctionTool's imports and source - before it checks the type the
    caller expected, so one hidden where an agent's ``model_context`` goes ran too), and a provider in a module
    outside AutoGen that the program has not imported (its import would run that module's code)."""
    hidden = sorted(_function_tools(config))
    if hidden:
        raise UntrustedCode(hidden[0])
    try:
        from autogen_core._component_config import WELL_KNOWN_PROVIDERS as known  # (short names of model clients)
    except ImportError:  # pragma: no cover - another autogen-core layout
        known = {}
    for provider in _providers(config):
        module = str(known.get(provider, provider)).rpartition(".")[0]
        if module and module.partition(".")[0] not in _AUTOGEN_PACKAGES and module not in sys.modules:
            raise UntrustedCode(provider, f"the snapshot's config names component {provider!r}, from module {module!r}, "
                                          "which this program has not imported: loading it would import (run) that "
                                          "module. Import it first if you trust the snapshot, or pass trust_code=True")


#: components that execute code on this machine: every code executor autogen-ext ships (local, Jupyter, Docker ...)
_EXECUTORS = "autogen_ext.code_executors."


def code_executors(config: Any) -> list[str]:
    """The providers of the code executors in ``config`` (a ``CodeExecutorAgent``'s, a ``PythonCodeExecutionTool``'s)."""
    return sorted({p for p in _providers(config) if p.startswith(_EXECUTORS)})


def own_token(payload: Mapping[str, Any]) -> str:
    """The token a capture made here notes in the store's own list: a digest of its config and state."""
    data = json.dumps([payload.get("config"), payload.get("state")], sort_keys=True, default=str)
    return objects.own_token("autogen", [data.encode("utf-8", "surrogatepass")])


def refuse_executors(config: Any, own: bool) -> None:
    """A code executor loaded from a snapshot not captured here runs the code blocks in the messages that snapshot
    holds (buffered for its agent, or a crafted one's) at the next run, without asking (AutoGen never stores an
    approval function): refused, before anything is built."""
    found = [] if own else code_executors(config)
    if found:
        raise UntrustedCode(found[0], f"the snapshot's config holds a code executor ({found[0]}) and it was not "
                                      "captured by this store: its agent would run the code in the snapshot's messages "
                                      "on this machine at the next run. Pass trust_code=True for snapshots you trust")


def _placeholder(kind: str, key: str) -> dict[str, Any]:
    return {
        "provider": "agentsnap_autogen._config.SuppliedModelClient",
        "component_type": kind,
        "config": {"slot": f"{kind}:{key}"},
    }


class UntrustedCode(AgentSnapError):
    """Loading the snapshot's config would run code it names: a FunctionTool's source, or a module not imported."""

    def __init__(self, name: str, why: str | None = None) -> None:
        self.name = name
        super().__init__(
            why or f"the snapshot's config holds the source code of tool {name!r}; loading it would execute that "
            f"code. Re-supply the tool (tools={{{name!r}: tool}}) or pass trust_code=True for snapshots you trust"
        )


@contextmanager
def loading(live: dict[str, Any]) -> Iterator[None]:
    """Within the block, :class:`SuppliedModelClient` placeholders load as the live clients."""
    token = _supplied.set(live)
    try:
        yield
    finally:
        _supplied.reset(token)


class _SuppliedConfig(BaseModel):
    slot: str


class SuppliedModelClient(ComponentBase[_SuppliedConfig], Component[_SuppliedConfig]):
    """Placeholder component: ``load_component`` turns it into the caller's live client (or tool) for ``slot``."""

    component_type = "model"
    component_config_schema = _SuppliedConfig
    component_provider_override = "agentsnap_autogen._config.SuppliedModelClient"

    def _to_config(self) -> _SuppliedConfig:  # pragma: no cover - never instantiated
        raise TypeError("SuppliedModelClient is a load-time placeholder")

    @classmethod
    def _from_config(cls, config: _SuppliedConfig) -> Any:
        live = _supplied.get() or {}
        if config.slot not in live:
            raise MissingSecret([config.slot], sorted(live))
        return live[config.slot]

