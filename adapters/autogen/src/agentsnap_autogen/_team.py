"""Capture and restore of AutoGen teams and agents (``save_state`` + ``dump_component``).

The ``state`` layer of a snapshot holds, in one value (so one manifest names all of it, atomically):
the redacted component config, the whole team's ``save_state()`` (every participant and the group
chat manager), the AutoGen versions and, for a snapshot taken between turns, the speakers the
manager had already asked to speak. The ``trace`` layer is the manager's message thread (or an
agent's model context) as agentsnap messages.
"""

from __future__ import annotations

import importlib.metadata
import inspect
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from agentsnap_core import Repo, Snapshot
from agentsnap_core.errors import AgentSnapError, InvalidInput
from agentsnap_core.layers import reach
from agentsnap_core.repository.repo import check_ref_name
from autogen_agentchat.base import ChatAgent, Team
from autogen_core import ComponentLoader

from ._config import (
    MissingApproval,
    MissingFunction,
    ModelClients,
    UntrustedCode,
    code_executors,
    loading,
    own_token,
    prepare,
    redact,
    refuse_executors,
    to_plain,
)
from ._format import FORMAT, FORMAT_VERSION
from ._graph import difference, refuse_callables, settle


class TeamRunning(AgentSnapError):
    """The team is inside ``run()`` / ``run_stream()``; its state is changing under us."""

    def __init__(self, name: str, action: str) -> None:
        self.name = name
        super().__init__(
            f"cannot {action} team {name!r} while a run is in flight; wait for run()/run_stream() to return, "
            "or attach agentsnap_autogen.TurnSnapshots to snapshot between turns without stopping it"
        )


class IncompatibleTarget(AgentSnapError):
    """The object given to restore into does not match the snapshot (kind or participants)."""


def kind_of(obj: Any) -> str | None:
    """``"team"``, ``"agent"`` or None for objects this adapter does not handle."""
    if isinstance(obj, Team) and hasattr(obj, "dump_component"):
        return "team"
    if isinstance(obj, ChatAgent) and hasattr(obj, "dump_component"):
        return "agent"
    return None


def versions() -> dict[str, str]:
    out = {}
    for dist in ("autogen-agentchat", "autogen-core", "autogen-ext", "pyautogen"):
        try:
            out[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            pass
    return out


def _running(obj: Any) -> bool:
    return bool(getattr(obj, "_is_running", False))


def _name(obj: Any) -> str:
    return str(getattr(obj, "name", type(obj).__name__))


async def capture_layers(obj: Any, *, _between_turns: dict[str, Any] | None = None) -> dict[str, Any]:
    """Return ``{"state": payload, "trace": messages}`` for a team or agent.

    Raises:
        TeamRunning: the team is inside a run (use :class:`TurnSnapshots` for in-run snapshots).
        UnserializableCondition: a GraphFlow edge's condition is a function (its config would lose it).
    """
    kind = kind_of(obj)
    if kind is None:
        raise InvalidInput(f"{type(obj).__name__} is not an AutoGen team or agent")
    if _running(obj) and _between_turns is None:
        raise TeamRunning(_name(obj), "snapshot")
    refuse_callables(_agents(obj))
    state = to_plain(await obj.save_state())
    approving = list(_approving(obj))
    config, redacted = redact(_dump_without_approval(obj))
    payload: dict[str, Any] = {
        "format": FORMAT,
        "v": FORMAT_VERSION,
        "kind": kind,
        "versions": versions(),
        "config": config,
        "state": state,
        "redacted": redacted,
    }
    if approving:
        payload["approval"] = sorted(agent.name for agent in approving)
    functions = _functions(obj)
    if functions:
        payload["functions"] = {owner: sorted(found) for owner, found in functions.items()}
    if _between_turns is not None:
        payload["between_turns"] = _between_turns
    if kind == "team" and getattr(obj, "_termination_condition", None) is not None:
        payload["termination"] = termination_state(obj._termination_condition)
    return {"state": payload, "trace": trace_of(kind, state)}


def _inner(obj: Any) -> list[Any]:
    """The agents and teams directly inside ``obj``: a team's participants, a ``SocietyOfMindAgent``'s inner team
    (``_team``), a ``MessageFilterAgent``'s wrapped agent (``_wrapped_agent``)."""
    inner = list(getattr(obj, "_participants", None) or [])
    for attr in ("_team", "_wrapped_agent"):
        value = getattr(obj, attr, None)
        if value is not None and kind_of(value) is not None:
            inner.append(value)
    return inner


def _agents(obj: Any) -> Iterator[Any]:
    """``obj`` and every agent and team in it, in order: nested teams and the teams inside a SocietyOfMindAgent
    included (their tools, code executors, graphs and functions are the snapshot's too)."""
    stack = [obj]
    while stack:
        current = stack.pop()
        yield current
        stack.extend(reversed(_inner(current)))


def _function_attrs() -> list[tuple[type, str, str]]:
    """``(class, attribute, argument)`` of each function AutoGen's ``dump_component`` leaves out of a config
    (autogen-agentchat 0.7.0 - 0.7.5: ``SelectorGroupChat._to_config`` has ``selector_func`` commented out and no
    ``candidate_func``, ``AssistantAgent._to_config`` has no ``tool_call_summary_formatter``,
    ``UserProxyAgent._to_config`` stores ``input_func=None``)."""
    from autogen_agentchat.agents import AssistantAgent, UserProxyAgent
    from autogen_agentchat.teams import SelectorGroupChat

    return [(SelectorGroupChat, "_selector_func", "selector_func"),
            (SelectorGroupChat, "_candidate_func", "candidate_func"),
            (AssistantAgent, "_tool_call_summary_formatter", "tool_call_summary_formatter"),
            (UserProxyAgent, "input_func", "input_func")]


def _default_input(func: Any) -> bool:
    """A ``UserProxyAgent``'s own ``input_func`` (what it uses when given none, and what a loaded one gets)."""
    return getattr(func, "__name__", None) == "cancellable_input" and \
        str(getattr(func, "__module__", "")).startswith("autogen_agentchat.")


def _functions(obj: Any) -> dict[str, dict[str, Any]]:
    """``{owner name: {argument: function}}``: every function of ``obj``'s agents and teams that its config loses."""
    out: dict[str, dict[str, Any]] = {}
    attrs = _function_attrs()
    for agent in _agents(obj):
        for cls, attr, arg in attrs:
            func = getattr(agent, attr, None) if isinstance(agent, cls) else None
            if func is not None and not (arg == "input_func" and _default_input(func)):
                out.setdefault(_name(agent), {})[arg] = func
    return out


def _check_functions(payload: Mapping[str, Any], functions: Mapping[str, Any] | None) -> dict[str, dict[str, Any]]:
    """The functions to give back to each owner the snapshot names (``payload["functions"]``); :class:`MissingFunction`
    before anything is built when one is not given: a loaded team without its ``selector_func`` lets the model pick
    the speakers, without its ``tool_call_summary_formatter`` writes other summaries, all without an error."""
    if functions is not None and not (isinstance(functions, Mapping)
                                      and all(isinstance(v, Mapping) for v in functions.values())):
        raise InvalidInput("functions must be a mapping {agent or team name: {argument: fn}}, e.g. "
                           "functions={'SelectorGroupChat': {'selector_func': fn}}")
    stored = payload.get("functions") if isinstance(payload.get("functions"), Mapping) else {}
    wanted = {str(owner): [str(a) for a in args] for owner, args in stored.items() if isinstance(args, list)}
    given = {str(owner): dict(args) for owner, args in (functions or {}).items()}
    unknown = sorted(f"{owner}.{arg}" for owner, args in given.items() for arg in args
                     if arg not in wanted.get(owner, []))
    if unknown:
        raise InvalidInput(f"functions names {unknown}, which the snapshot had no such function of; those it had are "
                           f"{sorted(f'{o}.{a}' for o, args in wanted.items() for a in args) or 'none'}")
    bad = sorted(f"{owner}.{arg}" for owner, args in given.items() for arg, fn in args.items() if not callable(fn))
    if bad:
        raise InvalidInput(f"functions {bad} are not callable")
    missing = {owner: [a for a in args if a not in given.get(owner, {})] for owner, args in wanted.items()}
    missing = {owner: args for owner, args in missing.items() if args}
    if missing:
        raise MissingFunction(missing)
    return given


def _give_functions(obj: Any, given: Mapping[str, Mapping[str, Any]]) -> None:
    """Set the functions handed back on the freshly built (not yet initialized) agents and teams: a group chat
    builds its manager from its attributes at its first run or ``load_state``."""
    attrs = _function_attrs()
    for agent in _agents(obj):
        for cls, attr, arg in attrs:
            func = given.get(_name(agent), {}).get(arg)
            if func is not None and isinstance(agent, cls):
                setattr(agent, attr, func)
                if arg == "input_func":  # (UserProxyAgent decides at construction whether to await it)
                    agent._is_async = inspect.iscoroutinefunction(func)


def _approving(obj: Any) -> Iterator[Any]:
    """The ``CodeExecutorAgent``s in ``obj`` that ask an approval function before running code (autogen 0.7.5)."""
    return (agent for agent in _agents(obj) if getattr(agent, "_approval_func", None) is not None)


def _dump_without_approval(obj: Any) -> Any:
    """``obj.dump_component()`` with the approval functions left out (autogen-agentchat 0.7.5
    ``CodeExecutorAgent._to_config`` refuses an agent that has one); the live agents keep theirs. No ``await`` in
    between: a run in flight (``TurnSnapshots``) never sees an agent without its function."""
    approving = list(_approving(obj))
    funcs = [agent._approval_func for agent in approving]
    try:
        for agent in approving:
            agent._approval_func = None
        return obj.dump_component()
    finally:
        for agent, func in zip(approving, funcs, strict=True):
            agent._approval_func = func


def _check_approval(payload: Mapping[str, Any], approval_funcs: Mapping[str, Any] | None) -> dict[str, Any]:
    """The approval function for each agent of the snapshot that had one; :class:`MissingApproval` before anything
    is built when one is not given (a loaded executor must not stop asking)."""
    if approval_funcs is not None and not isinstance(approval_funcs, Mapping):
        raise InvalidInput(f"approval_funcs must be a mapping {{agent name: fn}}, not a {type(approval_funcs).__name__}")
    wanted, given = list(payload.get("approval") or []), dict(approval_funcs or {})
    unknown = sorted(str(name) for name in given if name not in wanted)
    if unknown:
        raise InvalidInput(f"approval_funcs names {unknown}, which the snapshot has no code executor agent asking for "
                           f"approval of; those it has are {wanted}")
    missing = [name for name in wanted if name not in given]
    if missing:
        raise MissingApproval(missing)
    return given


def _conditions(condition: Any) -> Iterator[Any]:
    """A termination condition and the ones it combines (``a | b``, ``a & b``), depth first."""
    yield condition
    for inner in getattr(condition, "_conditions", None) or []:
        yield from _conditions(inner)


def _class_name(obj: Any) -> str:
    return f"{type(obj).__module__}.{type(obj).__qualname__}"


#: attributes that hold a ``time.monotonic()`` reading (TimeoutTermination's start): stored as seconds elapsed
_CLOCKS = frozenset({"_start_time"})


def termination_state(condition: Any) -> list[dict[str, Any]]:
    """What a team's termination condition has counted so far (``MaxMessageTermination``'s messages,
    ``TokenUsageTermination``'s tokens, ``TimeoutTermination``'s time, ``_terminated`` flags...), which AutoGen's
    ``save_state`` leaves out: each condition's number and flag attributes other than those its component config
    sets (the limits come from the config, so a team given another limit keeps its own)."""
    out = []
    for c in _conditions(condition):
        try:
            configured = {f"_{k}" for k in to_plain(c.dump_component()).get("config", {})}
        except Exception:  # noqa: BLE001 - a condition that is not a component (FunctionalTermination): no config
            configured = set()
        values: dict[str, Any] = {}
        for name, value in getattr(c, "__dict__", {}).items():  # (a condition with __slots__: nothing kept)
            if name in configured or not name.startswith("_") or not isinstance(value, (int, float)):
                continue  # (a limit, or no number or flag: bool is an int)
            values[name] = {"elapsed": time.monotonic() - value} if name in _CLOCKS else value
        out.append({"class": _class_name(c), "values": values})
    return out


def _restore_termination(obj: Any, stored: Any) -> None:
    """Give a restored team's termination condition the counts the snapshot's had (see :func:`termination_state`).
    A team whose condition is not made of the same classes in the same order starts its counts from zero, said
    by a RuntimeWarning."""
    condition = getattr(obj, "_termination_condition", None)
    if not isinstance(stored, list) or condition is None:
        return
    live = list(_conditions(condition))
    if [_class_name(c) for c in live] != [e.get("class") for e in stored if isinstance(e, dict)]:
        warnings.warn(f"team {_name(obj)!r}: its termination condition is not the snapshot's "
                      f"({', '.join(_class_name(c).rsplit('.', 1)[-1] for c in live)} here); what the snapshot's had "
                      "counted (messages, tokens, time) was not restored: its limits count from zero",
                      RuntimeWarning, stacklevel=3)
        return
    for c, entry in zip(live, stored, strict=True):
        for name, value in (entry.get("values") or {}).items():
            if name in _CLOCKS and isinstance(value, dict) and isinstance(value.get("elapsed"), (int, float)):
                value = time.monotonic() - value["elapsed"]
            if hasattr(c, name) and isinstance(value, (bool, int, float)):
                setattr(c, name, value)


def trace_of(kind: str, state: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The conversation as agentsnap trace messages (id, role, name, content, type)."""
    if kind == "team":
        thread = _manager_state(state).get("message_thread", [])
        return [
            {
                "id": str(m.get("id") or f"thread-{i}"),
                "role": "user" if m.get("source") == "user" else "assistant",
                "name": m.get("source", ""),
                "content": m.get("content", ""),
                "type": m.get("type", ""),
            }
            for i, m in enumerate(thread)
        ]
    context = state.get("llm_context", {}).get("messages", [])
    roles = {"SystemMessage": "system", "UserMessage": "user", "AssistantMessage": "assistant"}
    return [
        {
            "id": f"context-{i}",
            "role": roles.get(m.get("type", ""), "tool"),
            "name": m.get("source", ""),
            "content": m.get("content", ""),
            "type": m.get("type", ""),
        }
        for i, m in enumerate(context)
    ]


def _manager_state(state: Mapping[str, Any]) -> Mapping[str, Any]:
    for value in state.get("agent_states", {}).values():
        if isinstance(value, Mapping) and "message_thread" in value:
            return value
    return {}


def check_payload(payload: Any) -> dict[str, Any]:
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise IncompatibleTarget("this snapshot has no AutoGen state layer (was it taken with agentsnap-autogen?)")
    if payload.get("v") != FORMAT_VERSION:
        from agentsnap_core.errors import UnsupportedFormat

        raise UnsupportedFormat("AutoGen state layer", payload.get("v"), FORMAT_VERSION)
    return payload


def _participants(config: Any) -> list[tuple[str, str]] | None:
    """``(name, provider)`` of each participant, in order, from a team's component config (None when not listed)."""
    inner = config.get("config") if isinstance(config, Mapping) else None
    parts = inner.get("participants") if isinstance(inner, Mapping) else None
    if not isinstance(parts, list):
        return None
    out = []
    for p in parts:
        name = p.get("config", {}).get("name") if isinstance(p, Mapping) and isinstance(p.get("config"), Mapping) else None
        if not isinstance(name, str):
            return None
        out.append((name, str(p.get("provider", ""))))
    return out


def _check_target(obj: Any, kind: str, payload: Mapping[str, Any]) -> None:
    """Refuse a target of another class, name or participant line-up than the snapshot's.

    AutoGen's ``load_state`` ignores states it has no agent for, an agent of another class loads nothing (or
    fails half-way) and the manager's cursor is a position (``next_speaker_index``): a team with fewer,
    reordered or other participants would load without an error and continue with the wrong speaker (or fail
    on the next ``run()``).
    """
    stored = payload.get("config")
    if not isinstance(stored, Mapping):
        return
    current = to_plain(_dump_without_approval(obj))
    provider, now = stored.get("provider"), str(current.get("provider"))
    if isinstance(provider, str) and provider != now:
        raise IncompatibleTarget(f"snapshot holds an AutoGen {provider.rsplit('.', 1)[-1]} ({provider}), not an AutoGen "
                                 f"{now.rsplit('.', 1)[-1]} ({now}); use agentsnap_autogen.load() for a fresh one")
    if kind == "team":
        _check_participants(obj, payload, stored, current)
        graph = difference(stored, obj)  # (a GraphFlow's counts and ready nodes are the snapshot graph's)
        if graph:
            raise IncompatibleTarget(f"team graph differs from the snapshot's:{graph}\n"
                                     "use agentsnap_autogen.load() for a fresh team")
    else:
        inner = stored.get("config")
        want_name = inner.get("name") if isinstance(inner, Mapping) else None
        if isinstance(want_name, str) and want_name != _name(obj):
            raise IncompatibleTarget(f"snapshot holds agent {want_name!r}, not {_name(obj)!r}; "
                                     "use agentsnap_autogen.load() for a fresh one")


def _check_participants(obj: Any, payload: Mapping[str, Any], stored: Mapping[str, Any], current: Any) -> None:
    """Refuse a team whose participants are not the snapshot's: the same names, in the same order, of the same classes."""
    want, have = _participants(stored), _participants(current)
    if want is None or have is None:  # a team whose config does not list its participants: compare the names
        want = sorted(n for n, v in payload["state"].get("agent_states", {}).items() if "message_thread" not in v)
        have = sorted(p.name for p in getattr(obj, "_participants", []))
    elif [n for n, _ in have] == [n for n, _ in want]:
        other = [f"{n} is {b.rsplit('.', 1)[-1]} here, {a.rsplit('.', 1)[-1]} in the snapshot"
                 for (n, a), (_, b) in zip(want, have, strict=True) if a != b]
        if other:
            raise IncompatibleTarget(f"team participants differ from the snapshot's: {'; '.join(other)}; "
                                     "use agentsnap_autogen.load() for a fresh team")
        return
    else:
        want, have = [n for n, _ in want], [n for n, _ in have]
    if have != want:
        raise IncompatibleTarget(
            f"team participants {have} do not match the snapshot's {want} (the same names in the same order: "
            "the group chat's state refers to them by position); use agentsnap_autogen.load() for a fresh team")


async def restore_state(obj: Any, payload: Mapping[str, Any], *, own: bool = False, trust_code: bool = False) -> None:
    """Load a captured payload into an existing, compatible team or agent (not running).

    Into a team with a code executor agent, only a state this store captured (``own``) or ``trust_code``: its next
    run executes the code blocks in the messages the state holds (a teammate's, or a crafted snapshot's code)."""
    payload = check_payload(payload)
    kind = kind_of(obj)
    if kind != payload["kind"]:
        raise IncompatibleTarget(f"snapshot holds an AutoGen {payload['kind']}, not a {kind or type(obj).__name__}")
    if _running(obj):
        raise TeamRunning(_name(obj), "restore into")
    executing = [agent.name for agent in _agents(obj) if getattr(agent, "_code_executor", None) is not None]
    if executing and not (own or trust_code):
        raise UntrustedCode(executing[0], f"agent {executing[0]!r} of this {kind} runs code, and the snapshot was not "
                                          "captured by this store: its next run would execute the code in the "
                                          "snapshot's messages on this machine. Pass trust_code=True for snapshots you "
                                          "trust")
    _check_target(obj, kind, payload)
    memories = _stored_memories(obj, payload.get("config"))
    previous = await obj.save_state()  # AutoGen loads agent by agent: undo a half-done load
    try:
        await obj.load_state(payload["state"])
    except Exception as exc:
        await obj.load_state(previous)
        raise IncompatibleTarget(f"the snapshot's state does not load into this {kind} ({exc}); it was left unchanged") from exc
    for memory, contents in memories:
        memory.content = contents
    if kind == "team":
        await settle(_agents(obj))
        _restore_termination(obj, payload.get("termination"))


def _memory_configs(config: Any, out: dict[str, list[Any]] | None = None) -> dict[str, list[Any]]:
    """``{agent name: [memory component config, ...]}`` from a stored team or agent config."""
    out = {} if out is None else out
    if isinstance(config, Mapping):
        inner = config.get("config")
        if isinstance(inner, Mapping) and isinstance(inner.get("name"), str) and isinstance(inner.get("memory"), list):
            out.setdefault(inner["name"], inner["memory"])
        for value in config.values():
            _memory_configs(value, out)
    elif isinstance(config, list):
        for value in config:
            _memory_configs(value, out)
    return out


def _stored_memories(obj: Any, config: Any) -> list[tuple[Any, list[Any]]]:
    """``(live ListMemory, the snapshot's contents)`` for each ``ListMemory`` of ``obj``'s agents. AutoGen's
    ``save_state`` leaves an agent's memory out (autogen-agentchat 0.7.5 ``AssistantAgent.save_state`` holds only its
    model context); a ``ListMemory``'s contents are in its config, which only ``load`` rebuilt: restoring into a live
    team kept the memories added after the snapshot. Validated before anything is loaded; a memory the snapshot has
    no ``ListMemory`` for (another line-up) is left as it is, said by a RuntimeWarning."""
    from autogen_core.memory import ListMemory, MemoryContent

    stored, out = _memory_configs(config), []
    for agent in _agents(obj):
        live = [m for m in (getattr(agent, "_memory", None) or []) if isinstance(m, ListMemory)]
        if not live:
            continue
        kept = [c for c in stored.get(_name(agent), []) if isinstance(c, Mapping)
                and str(c.get("provider", "")).rsplit(".", 1)[-1] == "ListMemory"]
        if len(kept) != len(live):
            warnings.warn(f"agent {_name(agent)!r}: the snapshot has {len(kept)} ListMemory and this agent "
                          f"{len(live)}; its memory was not restored", RuntimeWarning, stacklevel=4)
            continue
        for memory, comp in zip(live, kept, strict=True):
            contents = (comp.get("config") or {}).get("memory_contents") or []
            out.append((memory, [MemoryContent.model_validate(c) for c in contents]))
    return out


def build(
    payload: Mapping[str, Any],
    model_clients: ModelClients = None,
    secrets: Mapping[str, str] | None = None,
    *,
    tools: Mapping[str, Any] | None = None,
    trust_code: bool = False,
    approval_funcs: Mapping[str, Any] | None = None,
    functions: Mapping[str, Mapping[str, Any]] | None = None,
    _loaded_from: tuple[Repo, str, bool] | None = None,
) -> Any:
    """A fresh team or agent from the stored component config (without its state).

    Args:
        payload: the ``state`` layer of a snapshot.
        model_clients: one client for every slot, ``{slot: client}`` or ``fn(slot, stored) -> client``;
            a slot is the name of the agent (or team, for a selector) owning the client.
        secrets: values for redacted fields, by field name (``{"api_key": ...}``).
        tools: live tools by name, used instead of the stored ``FunctionTool`` source code.
        trust_code: allow AutoGen to execute stored ``FunctionTool`` source code, and build stored code executors
            (trusted snapshots only). Without it a code executor is built only by :func:`load` of a snapshot the
            store captured itself: its agent runs the code blocks in the snapshot's messages at the next run.
        approval_funcs: ``{agent name: fn}``, the approval function of each code executor agent that had one when
            snapshotted (never stored: AutoGen cannot serialize it); required for each, else :class:`MissingApproval`.
        functions: ``{agent or team name: {argument: fn}}``, the functions AutoGen's config cannot hold that the
            snapshot's team had (``selector_func`` / ``candidate_func`` of a SelectorGroupChat,
            ``tool_call_summary_formatter`` of an AssistantAgent, ``input_func`` of a UserProxyAgent); required for
            each, else :class:`MissingFunction`.
    """
    payload = check_payload(payload)
    approvals = _check_approval(payload, approval_funcs)
    given_functions = _check_functions(payload, functions)
    config, live = prepare(payload["config"], model_clients, secrets, tools, trust_code)
    # (load: the repository, the snapshot and trust_settings; what a store captured itself loads without asking)
    repo, snapshot, trust_settings = _loaded_from or (None, "", True)
    if not trust_code:
        refuse_executors(config, repo is not None and repo.captured_here(own_token(payload)))
    if repo is not None and not trust_settings:  # the snapshot's settings that no live client replaced
        given = {str(v) for v in (secrets or {}).values()}  # a value the caller passed in secrets= is theirs
        found = {path: value for path, value in reach.outside_settings(config).items() if value not in given}
        reach.check(repo, snapshot, found, remedy=(
            "Re-supply the model clients (model_clients=client, {slot: client} or fn) for the slots naming them"))
    with loading(live):
        obj = ComponentLoader.load_component(config)
    for agent in _agents(obj):
        if agent.name in approvals and hasattr(agent, "_approval_func"):  # (autogen-agentchat 0.7.5 CodeExecutorAgent)
            func = approvals[agent.name]
            agent._approval_func, agent._approval_func_is_async = func, inspect.iscoroutinefunction(func)
    _give_functions(obj, given_functions)
    return obj


async def snapshot(
    repo: Repo,
    obj: Any,
    message: str = "",
    *,
    branch: str | None = None,
    capture_world: bool = False,
    meta: dict[str, Any] | None = None,
    **kw: Any,
) -> Snapshot:
    """Snapshot a team or agent atomically; ``branch`` commits to that branch instead of HEAD's."""
    if branch is not None:
        _check_branch(branch)
    layers = await capture_layers(obj)
    return _commit(repo, obj, layers, message, branch=branch, capture_world=capture_world, meta=meta, **kw)


def _check_branch(branch: Any) -> str:
    """A branch name the core accepts everywhere (``Repo.snapshot(ref=...)`` does not check it)."""
    if not isinstance(branch, str):
        raise InvalidInput(f"branch must be a branch name (str), not {type(branch).__name__}")
    return check_ref_name(branch)


def own_settings(repo: Any, payload: Mapping[str, Any]) -> None:
    """Note the endpoints and servers a capture made here names as this store's own (:func:`load` trusts them)."""
    if repo is not None:
        reach.remember(repo, reach.outside_settings(payload.get("config")))
        if code_executors(payload.get("config")):  # (its code executors load without trust_code: refuse_executors)
            repo.remember_own(own_token(payload))


def _commit(repo: Repo, obj: Any, layers: dict[str, Any], message: str, *, branch: str | None, **kw: Any) -> Snapshot:
    own_settings(repo, layers["state"])
    trace = layers.pop("trace")
    if branch is not None:
        kw["ref"] = f"refs/heads/{_check_branch(branch)}"
    return repo.snapshot(message or f"autogen: {_name(obj)}", agent=f"autogen:{_name(obj)}", layers=layers, trace=trace, **kw)


async def load(
    repo: Repo,
    spec: str | None = None,
    *,
    model_clients: ModelClients = None,
    secrets: Mapping[str, str] | None = None,
    tools: Mapping[str, Any] | None = None,
    trust_code: bool = False,
    effects: Any = None,
    trust_settings: bool = False,
    approval_funcs: Mapping[str, Any] | None = None,
    functions: Mapping[str, Mapping[str, Any]] | None = None,
) -> Any:
    """A FRESH team/agent built from snapshot ``spec``'s config, with its state loaded.

    See :func:`build` for the arguments; ``effects`` (an ``agentsnap_core.layers.effects.Effects`` session)
    guards every ``FunctionTool`` of the result with the effects ledger (:func:`wrap_tools`).

    A stored model client (or any component) that names an endpoint or MCP server this store never used itself (a
    clone's, a pull's, a crafted snapshot's: ``agentsnap_core.layers.reach``) raises ``UntrustedSettings`` before
    anything is built, unless a live client replaces it (``model_clients``) or ``trust_settings``: AutoGen would
    send your API key (the environment's, or the one you pass in ``secrets``) to whatever ``base_url`` it holds.
    """
    snap = repo.get(spec)
    payload = check_payload(repo.read_layer(snap, "state"))
    obj = build(payload, model_clients, secrets, tools=tools, trust_code=trust_code, approval_funcs=approval_funcs,
                functions=functions, _loaded_from=(repo, snap.id, trust_settings))
    await restore_state(obj, payload, own=True)  # (build refused a code executor it could not trust)
    if effects is not None:
        wrap_tools(obj, effects)
    return obj


def wrap_tools(obj: Any, session: Any, **options: Any) -> list[str]:
    """Guard every ``FunctionTool`` of a team's agents (or one agent) with the effects ledger.

    ``session`` is an ``agentsnap_core.layers.effects.Effects``; ``options`` go to ``agentsnap_core.layers.effects.wrap_tool``
    (``kind=``, ``simulate=`` ...). Returns the names of the tools wrapped.
    """
    from agentsnap_core.layers.effects import wrap_tool
    from autogen_core.tools import FunctionTool

    wrapped = []
    for agent in _agents(obj):  # (nested teams, a SocietyOfMindAgent's inner team and a MessageFilterAgent's agent too)
        for bench in getattr(agent, "_workbench", None) or []:
            for tool in getattr(bench, "_tools", []):
                if isinstance(tool, FunctionTool) and not hasattr(tool._func, "__agentsnap_effect__"):
                    wrap_tool(tool, session, name=tool.name, **options)
                    wrapped.append(tool.name)
    return wrapped


async def restore(repo: Repo, obj: Any, spec: str | None = None, *, trust_code: bool = False) -> Snapshot:
    """Load snapshot ``spec`` into an existing compatible team or agent (keeps its live model clients); into a
    team that runs code only from a snapshot this store captured, or with ``trust_code`` (see :func:`restore_state`)."""
    if _running(obj):
        raise TeamRunning(_name(obj), "restore into")
    snap = repo.get(spec)
    payload = check_payload(repo.read_layer(snap, "state"))
    await restore_state(obj, payload, own=repo.captured_here(own_token(payload)), trust_code=trust_code)
    return snap


async def fork(
    repo: Repo,
    spec: str | None,
    n: int,
    *,
    model_clients: Sequence[ModelClients] | Callable[[int], ModelClients] | None = None,
    secrets: Mapping[str, str] | None = None,
    prefix: str = "attempt",
    **load_options: Any,
) -> list[tuple[str, Any]]:
    """``n`` branches at ``spec`` and ``n`` independent fresh teams restored from it.

    ``model_clients`` gives each fork its own clients: a list (one entry per fork) or ``fn(i)``;
    ``load_options`` (``tools=``, ``trust_code=``, ``effects=``) go to :func:`load`. Returns ``[(branch name, team), ...]``; snapshot fork ``i`` with ``snapshot(..., branch=name)``.
    """
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= 10_000:
        raise InvalidInput(f"fork count must be an int between 1 and 10000, not {n!r}")
    if model_clients is not None and not callable(model_clients):
        if isinstance(model_clients, (Mapping, str)) or not isinstance(model_clients, Sequence):
            raise InvalidInput(
                f"fork's model_clients is one entry per fork (a list of {n}) or fn(i) -> clients, not a "
                f"{type(model_clients).__name__}; for the same slots in every fork pass "
                "model_clients=lambda i: {slot: new_client(), ...} (forks must not share clients)")
        if len(model_clients) != n:
            raise InvalidInput(f"model_clients has {len(model_clients)} entries for {n} forks")
    check_ref_name(prefix)
    snap = repo.get(spec)
    # every team first: a missing secret or client (or untrusted code) refuses the fork before any branch exists
    teams = []
    for i in range(n):
        clients = None if model_clients is None else model_clients(i) if callable(model_clients) else model_clients[i]
        teams.append(await load(repo, snap.id, model_clients=clients, secrets=secrets, **load_options))
    branches = repo.fork(spec, n, prefix=prefix)
    return [(item["branch"], team) for item, team in zip(branches, teams, strict=True)]
