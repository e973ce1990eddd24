"""GraphFlow (DiGraph) teams: what AutoGen's ``save_state`` and ``dump_component`` leave out or lose.

Read against autogen-agentchat 0.7.0 and 0.7.5 ``teams/_group_chat/_graph/_digraph_group_chat.py`` (the two differ
only in ``DiGraph.has_cycles_with_exit``):

* ``GraphFlowManager.save_state`` stores ``ready``, ``remaining`` and ``enqueued_any`` but not
  ``_triggered_activation_groups``: the activation groups that made each ready node ready, whose counts
  ``select_speaker`` puts back when the node is picked. A restored manager has none, so the node it picks keeps its
  ``all`` count at 0 (or its ``any`` group enqueued) and a loop back to it never makes it ready again.
  :func:`settle` rebuilds the map from the loaded counts: a group is triggered exactly when its ``all`` count has
  reached 0 (or its ``any`` group is enqueued) - both are put back when the node speaks, never otherwise.
* ``DiGraphEdge`` keeps a callable condition in ``condition_function``, excluded from the model dump: the stored
  config has that edge unconditional. :func:`refuse_callables` refuses such a team before anything is captured.
* ``load_state`` checks nothing against the graph: :func:`difference` names what differs from the snapshot's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from agentsnap_core.errors import AgentSnapError
from autogen_agentchat.teams import GraphFlow
from autogen_core import AgentId

_FUNCTION = object()  # a callable condition, in the edges :func:`_edges` lists


class UnserializableCondition(AgentSnapError):
    """A GraphFlow edge has a callable condition, which AutoGen cannot store in the team's config."""

    def __init__(self, team: str, edges: list[str]) -> None:
        self.team, self.edges = team, edges
        super().__init__(
            f"GraphFlow team {team!r}: the condition of edge {', edge '.join(edges)} "
            f"{'is a Python function' if len(edges) == 1 else 'are Python functions'}, which AutoGen cannot "
            "serialize (dump_component stores the edge as unconditional, so a restored team would take it whatever "
            "the message says); nothing was written. Use a string condition, which the snapshot keeps: "
            "add_edge(a, b, condition='APPROVE') takes the edge when the text is in the message"
        )


def graph_teams(objs: Iterable[Any]) -> list[GraphFlow]:
    return [obj for obj in objs if isinstance(obj, GraphFlow)]


def refuse_callables(objs: Iterable[Any]) -> None:
    for team in graph_teams(objs):
        edges = [f"{name} -> {edge.target}" for name, node in team._graph.nodes.items() for edge in node.edges
                 if edge.condition_function is not None]
        if edges:
            raise UnserializableCondition(str(team.name), edges)


def _edges(graph: Mapping[str, Any]) -> tuple[dict[str, list[str]], list[str]]:
    """Each node's outgoing edges, described, in order (the order AutoGen makes their targets ready), and the rest
    of the graph (node activation, start node) as lines."""
    edges, other = {}, [f"start node {graph.get('default_start_node')!r}"]
    for name, node in (graph.get("nodes") or {}).items():
        node = node if isinstance(node, Mapping) else {}
        other.append(f"node {name} activation {node.get('activation', 'all')!r}")
        edges[name] = []
        for edge in node.get("edges") or []:
            target, condition = edge.get("target"), edge.get("condition")
            text = f"edge {name} -> {target}" + (" if a Python function" if condition is _FUNCTION else
                                                  f" if {condition!r}" if condition is not None else " (unconditional)")
            group, how = edge.get("activation_group") or target, edge.get("activation_condition", "all")
            edges[name].append(text + (f" [activation_group {group!r}, {how}]" if (group, how) != (target, "all") else ""))
    return edges, other


def _live(team: GraphFlow) -> dict[str, Any]:
    graph = team._graph
    return {"default_start_node": graph.default_start_node, "nodes": {name: {
        "activation": node.activation,
        "edges": [{"target": e.target, "activation_group": e.activation_group, "activation_condition": e.activation_condition,
                   "condition": _FUNCTION if e.condition_function is not None else e.condition} for e in node.edges],
    } for name, node in graph.nodes.items()}}


def difference(stored_config: Any, team: Any) -> str | None:
    """What differs between the graph of a snapshot's GraphFlow config and ``team``'s, or None."""
    if not isinstance(team, GraphFlow):
        return None
    inner = stored_config.get("config") if isinstance(stored_config, Mapping) else None
    stored = inner.get("graph") if isinstance(inner, Mapping) else None
    if not isinstance(stored, Mapping):
        return "the snapshot's config holds no graph"
    (want, want_other), (have, have_other) = _edges(stored), _edges(_live(team))
    lines = [f"only in the snapshot: node {n}" for n in want if n not in have]
    lines += [f"only here: node {n}" for n in have if n not in want]
    for name in (n for n in want if n in have and want[n] != have[n]):
        gone, added = [e for e in want[name] if e not in have[name]], [e for e in have[name] if e not in want[name]]
        lines += [f"only in the snapshot: {e}" for e in gone] + [f"only here: {e}" for e in added]
        if not gone and not added:
            lines.append(f"the edges of {name} are in another order ({', '.join(want[name])} in the snapshot)")
    lines += [f"{line} in the snapshot, not here" for line in want_other if line not in have_other]
    return "\n  ".join(["", *lines]) if lines else None


async def settle(objs: Iterable[Any]) -> None:
    """After ``load_state``: give each GraphFlow manager the triggered activation groups its counts imply (see the
    module docstring), and its own copy of ``enqueued_any`` (``load_state`` keeps the loaded dict, so a run would
    change the caller's state)."""
    for team in graph_teams(objs):
        if not team._initialized:
            continue
        manager = await team._runtime.try_get_underlying_agent_instance(
            AgentId(team._group_chat_manager_topic_type, team._team_id))
        if not all(hasattr(manager, a) for a in ("_activation", "_remaining", "_enqueued_any", "_triggered_activation_groups")):
            continue  # (a release without this bookkeeping; 0.7.0 - 0.7.5 have it)
        manager._enqueued_any = {target: dict(groups) for target, groups in manager._enqueued_any.items()}
        remaining, enqueued = manager._remaining, manager._enqueued_any
        manager._triggered_activation_groups = {
            target: {group for group, how in groups.items()
                     if (remaining.get(target, {}).get(group, 1) <= 0 if how == "all" else enqueued.get(target, {}).get(group))}
            for target, groups in manager._activation.items()}


def rewind(manager: dict[str, Any], speakers: list[str]) -> bool:
    """Put the speakers a GraphFlow manager has just taken from its ready queue back at its front (their counts were
    already put back when they were taken); False for another manager's state."""
    if not {"ready", "remaining", "enqueued_any"} <= manager.keys():
        return False
    manager["ready"] = [*speakers, *manager["ready"]]
    return True
