"""Automatic per-turn snapshots of a running team, without stopping it.

:class:`TurnSnapshots` is an AutoGen *intervention handler* on the team's
``SingleThreadedAgentRuntime``. The runtime calls ``on_publish`` from its message loop, before it
delivers a message, so while the handler runs no agent handler is started. The handler acts on
``GroupChatRequestPublish`` - the manager asking the next speaker to talk: at that moment the
finished turn is in the manager's thread and in every participant's buffer, the turn is counted,
and the next speaker is chosen but has not started. That is the between-turns point. (At a run's first
boundary the task the manager sent the participants is still queued behind the request; the snapshot
puts it in their buffers.)

The manager has already *selected* the next speaker, so the snapshot records it
(``between_turns.next_speakers``) and rewinds the manager's selection cursor to what it was before
the selection, so ``team.run()`` after a restore picks the same speaker:

* RoundRobinGroupChat: ``next_speaker_index`` = index of the recorded speaker (exact);
* Swarm: selection is a pure function of the thread (exact, nothing to rewind);
* SelectorGroupChat: ``previous_speaker`` = the last participant in the thread; the restored team
  asks its selector model again (a deterministic or replayed selector picks the same speaker);
* GraphFlow: the speakers go back to the front of the manager's ``ready`` queue (exact); a fan-out asks
  several speakers at once, so the boundary is the first request and the snapshot holds them all;
* other managers (MagenticOne): recorded as is, not rewound.

The public way in is autogen-core's own: a runtime built with ``intervention_handlers=[...]``
(``SingleThreadedAgentRuntime``'s constructor) passed to the team as ``runtime=``; use
:meth:`TurnSnapshots.runtime`. A team on its embedded runtime gets the handler added to that runtime's
list, which has no public setter. Recognising the manager's request needs AutoGen's
``GroupChatRequestPublish``, which no public module exports: both private parts are used only on the
AutoGen releases tested here (:data:`TESTED_AUTOGEN`); any other release fails loudly with
:class:`UntestedAutoGen` instead of silently taking no snapshot.
"""

from __future__ import annotations

from typing import Any

import autogen_agentchat
from agentsnap_core import Repo, Snapshot
from agentsnap_core.errors import AgentSnapError, InvalidInput
from autogen_core import AgentId, DefaultInterventionHandler, MessageContext, SingleThreadedAgentRuntime, TopicId

from ._config import to_plain
from ._graph import refuse_callables, rewind
from ._team import _agents, _check_branch, _commit, capture_layers, kind_of

#: the oldest and newest autogen-agentchat releases whose private parts this module uses (nox runs both)
TESTED_AUTOGEN = ("0.7.0", "0.7.5")


class UntestedAutoGen(AgentSnapError):
    """Per-turn snapshots rely on AutoGen internals that this release was not tested with."""

    def __init__(self, version: str) -> None:
        self.version = version
        super().__init__(
            f"agentsnap_autogen.TurnSnapshots is tested with autogen-agentchat {TESTED_AUTOGEN[0]} to "
            f"{TESTED_AUTOGEN[1]}, not {version}: it reads the group chat's private request event, which may have "
            f"changed. Install autogen-agentchat=={TESTED_AUTOGEN[1]}, or upgrade agentsnap-autogen"
        )


class TurnSnapshotFailed(AgentSnapError):
    """A between-turns snapshot could not be taken; the run was stopped at that boundary."""

    def __init__(self, n: int, speaker: str, cause: BaseException) -> None:
        self.n, self.speaker, self.cause = n, speaker, cause
        super().__init__(
            f"turn boundary {n} (next speaker {speaker!r}) could not be snapshotted, so the run was stopped there "
            f"before {speaker!r} spoke: {type(cause).__name__}: {cause}. The snapshots taken before it are in "
            "TurnSnapshots.snapshots; restore the last one (agentsnap_autogen.load) to continue"
        )


def _release(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split("+")[0].split(".")[:3] if p.isdigit())


def _event_types() -> tuple[type, type, type]:
    """AutoGen's ``GroupChatRequestPublish``, ``GroupChatStart`` and ``GroupChatTermination`` (private), on a tested
    release only."""
    version = str(autogen_agentchat.__version__)
    if not (_release(TESTED_AUTOGEN[0]) <= _release(version) <= _release(TESTED_AUTOGEN[1])):
        raise UntestedAutoGen(version)
    from autogen_agentchat.teams._group_chat._events import (
        GroupChatRequestPublish,
        GroupChatStart,
        GroupChatTermination,
    )

    return GroupChatRequestPublish, GroupChatStart, GroupChatTermination


class TurnSnapshots(DefaultInterventionHandler):
    """Snapshot ``team`` between every two turns while it runs.

    Usage::

        turns = TurnSnapshots(repo)
        team = RoundRobinGroupChat(agents, runtime=turns.runtime())  # autogen-core's public hook
        turns.attach(team)
        turns.runtime().start()
        await team.run(task="...")
        await turns.runtime().stop_when_idle()
        turns.snapshots  # one Snapshot per turn boundary, oldest first

    (``TurnSnapshots(repo).attach(team)`` on a team with its embedded runtime works too.)

    Args:
        repo: where the snapshots go.
        branch: commit to this branch (default: the branch HEAD points at).
        message: snapshot message; ``{n}`` is the boundary number, ``{speakers}`` the next speakers.
    """

    def __init__(self, repo: Repo, *, branch: str | None = None, message: str = "turn {n}: next {speakers}") -> None:
        if branch is not None:
            _check_branch(branch)
        try:
            message.format(n=0, speakers="")
        except (KeyError, IndexError, ValueError, AttributeError) as exc:
            raise InvalidInput(f"TurnSnapshots message {message!r} is not a valid template ({type(exc).__name__}: "
                               f"{exc}); it may use {{n}} and {{speakers}} only") from None
        self.repo = repo
        self.branch = branch
        self.message = message
        self.snapshots: list[Snapshot] = []
        #: the failure that stopped the run (a :class:`TurnSnapshotFailed`), or None
        self.error: TurnSnapshotFailed | None = None
        self._team: Any = None
        self._topics: dict[str, str] = {}
        self._asked: list[str] = []  # the rest of the speakers of the last boundary (a GraphFlow fan-out)
        self._request_type, self._start_type, self._end_type = _event_types()  # fails loudly on an untested AutoGen
        self._undelivered: list[dict[str, Any]] = []  # the task the manager sent the participants (see on_publish)
        self._runtime: SingleThreadedAgentRuntime | None = None

    def runtime(self) -> SingleThreadedAgentRuntime:
        """A runtime with this handler installed the public way; pass it to the team as ``runtime=``.

        The caller starts it (``runtime.start()``) before ``team.run()`` and stops it after, as AutoGen
        asks for any runtime passed to a team. The same runtime is returned on every call.
        """
        if self._runtime is None:
            self._runtime = SingleThreadedAgentRuntime(intervention_handlers=[self])
        return self._runtime

    def attach(self, team: Any) -> TurnSnapshots:
        """Hook into ``team``'s runtime (its embedded one, or one passed as ``runtime=``)."""
        if kind_of(team) != "team" or not hasattr(team, "_participant_topic_types"):
            raise InvalidInput(f"TurnSnapshots needs an AutoGen group chat team, not {type(team).__name__}")
        runtime = getattr(team, "_runtime", None)
        if not isinstance(runtime, SingleThreadedAgentRuntime):
            raise InvalidInput("TurnSnapshots needs the team to run on a SingleThreadedAgentRuntime")
        refuse_callables(_agents(team))  # (now, not at the first turn: a GraphFlow edge's function is not stored)
        if runtime is not self._runtime:  # an embedded runtime: no public way to add a handler after construction
            handlers = runtime._intervention_handlers
            if handlers is None:
                runtime._intervention_handlers = [self]
            elif self not in handlers:
                handlers.append(self)
        self._team = team
        self._topics = dict(zip(team._participant_topic_types, team._participant_names, strict=True))
        return self

    async def on_publish(self, message: Any, *, message_context: MessageContext) -> Any:
        topic = message_context.topic_id
        if isinstance(message, self._end_type):  # the run ends: nothing of its last boundary is still to come
            self._asked, self._undelivered = [], []
        elif isinstance(message, self._start_type) and topic is not None and message.messages \
                and topic.type == getattr(self._team, "_group_topic_type", None):
            # The manager sends the task to the participants and asks the first speaker at once: the runtime
            # delivers the task after this loop has shown us the request, so the first boundary's snapshot must
            # put it in their buffers itself (autogen-agentchat 0.7.0 - 0.7.5 BaseGroupChatManager.handle_start).
            self._undelivered = [to_plain(m.dump()) for m in message.messages]
        elif isinstance(message, self._request_type) and topic is not None and topic.type in self._topics:
            speaker = self._topics[topic.type]
            if speaker in self._asked:  # another speaker of the boundary just snapshotted, which may be speaking
                self._asked.remove(speaker)
                return message if self.error is None else await self._stop_run(self.error, topic.source, notify=False)
            n = len(self.snapshots)
            try:
                speakers = await self._speakers(speaker)
                self._asked = speakers[1:]
                layers = await capture_layers(self._team, _between_turns={"next_speakers": speakers})
                _deliver(layers["state"]["state"], self._undelivered)
                self._undelivered = []
                _rewind_selection(layers["state"]["state"], speakers, list(self._topics.values()))
                text = self.message.format(n=n, speakers=", ".join(speakers))
                self.snapshots.append(_commit(self.repo, self._team, layers, text, branch=self.branch))
            except Exception as exc:  # noqa: BLE001 - raised here, the run would hang (see _stop_run)
                self.error = TurnSnapshotFailed(n, speaker, exc)
                return await self._stop_run(self.error, topic.source)
        return message

    async def _speakers(self, speaker: str) -> list[str]:
        """Every speaker the manager has just asked, ``speaker`` first: a GraphFlow manager asks all the nodes of a
        fan-out at once, and publishes every request before the runtime delivers (or shows us) the first one, so
        its ``_active_speakers`` holds them all here (autogen-agentchat 0.7.0 - 0.7.5 ``BaseGroupChatManager``)."""
        team = self._team
        manager = await team._runtime.try_get_underlying_agent_instance(
            AgentId(team._group_chat_manager_topic_type, team._team_id))
        active = [str(s) for s in getattr(manager, "_active_speakers", [])]
        return [speaker, *(s for s in active if s != speaker)] if speaker in active else [speaker]

    async def _stop_run(self, error: TurnSnapshotFailed, team_id: str, *, notify: bool = True) -> Any:
        """End the team's run with ``error``, the way AutoGen ends it when a participant fails; return what
        to deliver to the speaker instead of the request.

        An exception raised from ``on_publish`` (or a ``DropMessage`` returned) makes AutoGen 0.7's runtime skip
        the message without marking it done in its queue, so ``stop_when_idle()`` - which ``team.run()`` awaits
        on the way out - never returns: the run hung forever. Instead the manager is sent AutoGen's
        ``GroupChatError`` (``run()`` raises it) and the speaker gets an empty ``GroupChatStart``, which its
        container handles as a no-op: the speaker does not speak.
        """
        from autogen_agentchat.teams._group_chat._events import GroupChatError, GroupChatStart, SerializableException

        if notify:  # (once per boundary: the other speakers of a failed one are only kept from speaking)
            manager_topic = self._team._group_chat_manager_topic_type
            await self._team._runtime.publish_message(
                GroupChatError(error=SerializableException(error_type=type(error).__name__, error_message=str(error))),
                topic_id=TopicId(type=manager_topic, source=team_id),
            )
        return GroupChatStart(messages=None)


def _deliver(state: dict[str, Any], messages: list[dict[str, Any]]) -> None:
    """Append ``messages`` to the buffer of each participant that has not received them yet (by message id)."""
    ids = {m.get("id") for m in messages}
    for participant in state.get("agent_states", {}).values():
        buffer = participant.get("message_buffer") if isinstance(participant, dict) else None
        if isinstance(buffer, list) and not any(isinstance(m, dict) and m.get("id") in ids for m in buffer):
            buffer.extend(dict(m) for m in messages)


def _rewind_selection(state: dict[str, Any], speakers: list[str], names: list[str]) -> None:
    """Put the manager's selection cursor back to just before ``speakers`` were selected."""
    for manager in state.get("agent_states", {}).values():
        if not isinstance(manager, dict) or "message_thread" not in manager or rewind(manager, speakers):
            continue
        kind = manager.get("type")
        if kind == "RoundRobinManagerState":
            manager["next_speaker_index"] = names.index(speakers[0])
        elif kind == "SelectorManagerState":
            sources = [m.get("source") for m in manager["message_thread"]]
            manager["previous_speaker"] = next((s for s in reversed(sources) if s in names), None)
