"""Automatic per-turn snapshots of a running team, without stopping it.

:class:`TurnSnapshots` is an AutoGen *intervention handler* on the team's
``SingleThreadedAgentRuntime``. The runtime calls ``on_publish`` from its message loop, before it
delivers a message, so while the handler runs no agent handler is started. The handler acts on
``GroupChatRequestPublish`` - the manager asking the next speaker to talk: at that moment the
finished turn is in the manager's thread and in every participant's buffer, the turn is counted,
and the next speaker is chosen but has not started. That is the between-turns point.

The manager has already *selected* the next speaker, so the snapshot records it
(``between_turns.next_speakers``) and rewinds the manager's selection cursor to what it was before
the selection, so ``team.run()`` after a restore picks the same speaker:

* RoundRobinGroupChat: ``next_speaker_index`` = index of the recorded speaker (exact);
* Swarm: selection is a pure function of the thread (exact, nothing to rewind);
* SelectorGroupChat: ``previous_speaker`` = the last participant in the thread; the restored team
  asks its selector model again (a deterministic or replayed selector picks the same speaker);
* other managers (MagenticOne, GraphFlow): recorded as is, not rewound.

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
from autogen_core import DefaultInterventionHandler, MessageContext, SingleThreadedAgentRuntime, TopicId

from ._team import _check_branch, _commit, capture_layers, kind_of

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


def _request_publish_type() -> type:
    """AutoGen's ``GroupChatRequestPublish`` (private), on a tested release only."""
    version = str(autogen_agentchat.__version__)
    if not (_release(TESTED_AUTOGEN[0]) <= _release(version) <= _release(TESTED_AUTOGEN[1])):
        raise UntestedAutoGen(version)
    from autogen_agentchat.teams._group_chat._events import GroupChatRequestPublish

    return GroupChatRequestPublish


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
        self._request_type = _request_publish_type()  # fails loudly on an untested AutoGen
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
        if isinstance(message, self._request_type) and topic is not None and topic.type in self._topics:
            speaker = self._topics[topic.type]
            n = len(self.snapshots)
            try:
                layers = await capture_layers(self._team, _between_turns={"next_speakers": [speaker]})
                _rewind_selection(layers["state"]["state"], speaker, list(self._topics.values()))
                text = self.message.format(n=n, speakers=speaker)
                self.snapshots.append(_commit(self.repo, self._team, layers, text, branch=self.branch))
            except Exception as exc:  # noqa: BLE001 - raised here, the run would hang (see _stop_run)
                self.error = TurnSnapshotFailed(n, speaker, exc)
                return await self._stop_run(self.error, topic.source)
        return message

    async def _stop_run(self, error: TurnSnapshotFailed, team_id: str) -> Any:
        """End the team's run with ``error``, the way AutoGen ends it when a participant fails; return what
        to deliver to the speaker instead of the request.

        An exception raised from ``on_publish`` (or a ``DropMessage`` returned) makes AutoGen 0.7's runtime skip
        the message without marking it done in its queue, so ``stop_when_idle()`` - which ``team.run()`` awaits
        on the way out - never returns: the run hung forever. Instead the manager is sent AutoGen's
        ``GroupChatError`` (``run()`` raises it) and the speaker gets an empty ``GroupChatStart``, which its
        container handles as a no-op: the speaker does not speak.
        """
        from autogen_agentchat.teams._group_chat._events import GroupChatError, GroupChatStart, SerializableException

        manager_topic = self._team._group_chat_manager_topic_type
        await self._team._runtime.publish_message(
            GroupChatError(error=SerializableException(error_type=type(error).__name__, error_message=str(error))),
            topic_id=TopicId(type=manager_topic, source=team_id),
        )
        return GroupChatStart(messages=None)


def _rewind_selection(state: dict[str, Any], speaker: str, names: list[str]) -> None:
    """Put the manager's selection cursor back to just before ``speaker`` was selected."""
    for manager in state.get("agent_states", {}).values():
        if not isinstance(manager, dict) or "message_thread" not in manager:
            continue
        kind = manager.get("type")
        if kind == "RoundRobinManagerState":
            manager["next_speaker_index"] = names.index(speaker)
        elif kind == "SelectorManagerState":
            sources = [m.get("source") for m in manager["message_thread"]]
            manager["previous_speaker"] = next((s for s in reversed(sources) if s in names), None)
