"""The hook entry points Claude Code runs (wired in ``plugin/hooks/hooks.json``).

Claude Code writes one JSON object to the hook's stdin (``session_id``, ``transcript_path``,
``cwd``, ``hook_event_name``, and for ``PreToolUse`` ``tool_name`` / ``tool_input``). A hook
here never blocks the session: it always exits 0. Only when a *destructive* command is about
to run and the protecting snapshot could not be taken does it answer
``permissionDecision: "ask"`` so the user decides; every other failure is a ``systemMessage``
and a line in the log file.
"""

from __future__ import annotations

import json
import os
import shlex
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from agentsnap_core import Repo, Snapshot
from agentsnap_core.errors import AgentSnapError, RefConflict, TreeBusy
from agentsnap_core.stores.base import RefUpdate

from .config import DEFAULTS, Settings, load_settings, log_path, make_matcher
from .gate import EDIT_TOOLS, is_agentsnap_snapshot, project_root_for
from .matcher import Finding
from .mcptools import snapshot_before, target_of
from .points import positions
from .projectstore import bulky_ignored, close_kept, leave_out, open_project_repo, store_dir_for
from .safety import deletes_store, destroyed
from .transcript import Transcript, read_transcript

EVENTS = ("PreToolUse", "UserPromptSubmit", "Stop")
_T = TypeVar("_T")


@dataclass
class HookResult:
    """What the hook process prints and its exit status."""

    exit_code: int = 0
    stdout: str = ""
    stderr: str = ""


def _json(obj: dict[str, Any]) -> str:
    return json.dumps(obj, ensure_ascii=False)


def _ask(reason: str) -> HookResult:
    return HookResult(
        0,
        _json(
            {
                "hookSpecificOutput": {
                    "hookEventName": "PreToolUse",
                    "permissionDecision": "ask",
                    "permissionDecisionReason": reason,
                }
            }
        ),
    )


def _notice(message: str) -> HookResult:
    return HookResult(0, _json({"systemMessage": message}))


class _Log:
    def __init__(self, settings: Settings) -> None:
        self.path = log_path(settings)

    def write(self, **fields: Any) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "a", encoding="utf-8") as f:
                f.write(json.dumps({"time": time.strftime("%Y-%m-%dT%H:%M:%S"), **fields}, default=str) + "\n")
        except OSError:
            pass  # logging must never break a hook


# ---------------------------------------------------------------------- store and snapshot
def open_repo(cwd: str, settings: Settings) -> Repo:
    """The plugin's store of the project holding ``cwd`` (outside the project; see :mod:`.projectstore`)."""
    return open_project_repo(cwd, settings)


def snapshot_if_changed(
    repo: Repo, message: str, *, trace: list[dict[str, Any]] | None, meta: dict[str, Any], agent: str
) -> tuple[Snapshot, bool]:
    """Snapshot the tree (+ trace); reuse HEAD when neither tree nor trace changed.

    Returns ``(snapshot, created)``. The branch moves by compare-and-swap; a concurrent writer
    makes it retry once.
    """
    for attempt in range(2):
        symref, head = repo.head()
        snap = repo.snapshot(message, agent=agent, trace=trace, meta=meta, move_head=False)
        if head is not None:
            old = repo.get(head)
            if _same(old, snap):
                return old, False
        try:
            if symref:
                repo.update_refs([RefUpdate(symref, snap.id, head)], f"snapshot: {message}"[:200])
            else:
                repo.refs.set_head(repo.worktree, None, snap.id)
            return snap, True
        except RefConflict:
            if attempt:
                raise
    raise AssertionError("unreachable")


def _same(a: Snapshot, b: Snapshot) -> bool:
    la, lb = a.layers, b.layers
    tree = (la.get("world") or {}).get("tree") == (lb.get("world") or {}).get("tree")
    trace = (la.get("trace") or {}).get("content") == (lb.get("trace") or {}).get("content")
    return tree and trace


#: seconds a PreToolUse hook waits for the pending call to reach the transcript. Claude Code writes its transcript
#: behind: on a busy machine the hook of a second call was seen to fire while the file still ended before the first
#: call's result, so the snapshot (and a rewind to it) silently lacked the last steps of the conversation.
TRANSCRIPT_WAIT = 2.0


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return -1


def _has_call(transcript: Transcript, tool_use_id: str) -> bool:
    return any(c.get("id") == tool_use_id for e in transcript.entries for c in e.get("tool_calls") or [])


def _transcript(payload: dict[str, Any], settings: Settings) -> Transcript | None:
    """The session's transcript; before a tool call, read once it holds that call (at most TRANSCRIPT_WAIT
    seconds; if it never does, ``pending_call_missing`` in its summary says the capture may lack the last steps)."""
    path = payload.get("transcript_path")
    if not settings["capture_transcript"] or not isinstance(path, str) or not path:
        return None
    p = Path(path).expanduser()
    if not p.is_file():
        return None
    size = _size(p)  # before the read: a write after it is seen below
    transcript = read_transcript(p)
    call = payload.get("tool_use_id")
    if payload.get("hook_event_name") == "PreToolUse" and isinstance(call, str) and not _has_call(transcript, call):
        deadline = time.monotonic() + TRANSCRIPT_WAIT
        while time.monotonic() < deadline:
            time.sleep(0.02)
            now = _size(p)
            if now == size:  # nothing written since: no need to parse it again
                continue
            size = now
            transcript = read_transcript(p)
            if _has_call(transcript, call):
                break
        else:
            transcript.pending_call_missing = call
    return transcript


def _when_not_busy(attempt: Callable[[], _T], wait: float, log: _Log | None) -> _T:
    """``attempt()``, retried while another process holds the tree's lock, for at most ``wait`` seconds.

    A manual ``agentsnap snapshot`` or a restore of the same tree takes the lock for as long as it runs;
    after ``wait`` the last :class:`TreeBusy` is raised (the caller asks about a destructive command).
    """
    deadline = time.monotonic() + wait
    delay = 0.05
    while True:
        try:
            return attempt()
        except TreeBusy as exc:
            if time.monotonic() + delay > deadline:
                raise TreeBusy(exc.root, f"{exc.holder}; still busy after {wait:g} s" if wait else exc.holder) from None
            if log is not None and delay == 0.05:
                log.write(action="tree-busy", holder=exc.holder, wait=wait)
            time.sleep(delay)
            delay = min(delay * 2, 0.5)


def take_snapshot(
    payload: dict[str, Any], settings: Settings, message: str, extra_meta: dict[str, Any], log: _Log | None = None
) -> tuple[Snapshot, bool, dict[str, Any]]:
    cwd = str(payload.get("cwd") or os.getcwd())
    transcript = _transcript(payload, settings)
    session = str(payload.get("session_id") or "")
    meta = {
        "claude_code": {
            "event": payload.get("hook_event_name"),
            "session_id": session,
            "cwd": cwd,
            **extra_meta,
            **(positions(transcript.entries, extra_meta.get("tool_use_id")) if transcript else {}),
            **({"transcript": transcript.summary()} if transcript else {}),
        }
    }
    try:
        return _take_snapshot(cwd, transcript, settings, message, meta, session, log)
    except BaseException:  # (an error, or the time limit's alarm, mid-way: the next call opens the store afresh)
        close_kept()
        raise


def _take_snapshot(
    cwd: str, transcript: Transcript | None, settings: Settings, message: str, meta: dict[str, Any], session: str,
    log: _Log | None
) -> tuple[Snapshot, bool, dict[str, Any]]:
    with open_repo(cwd, settings) as repo:
        skipped = (bulky_ignored(repo.root, settings["bulky_files"], repo.wt_dir / "statcache.msgpack")
                   if settings["skip_bulky_ignored"] else [])
        leave_out(repo, skipped)
        if skipped:
            meta["claude_code"]["not_captured"] = skipped
        snap, created = _when_not_busy(
            lambda: snapshot_if_changed(
                repo,
                message,
                trace=transcript.entries if transcript else None,
                meta=meta,
                agent=f"claude-code:{session[:8]}" if session else "claude-code",
            ),
            settings["busy_wait"],
            log,
        )
        info = {"root": str(repo.root), "created": created, "call": meta["claude_code"].get("call"), "not_captured": skipped}
        if transcript and transcript.truncated_tail:
            info["truncated_tail"] = True
        if transcript and transcript.pending_call_missing:
            info["pending_call_missing"] = transcript.pending_call_missing
    return snap, created, info


def sync_working_trace(payload: dict[str, Any], settings: Settings) -> int:
    """Make the store's working trace equal the session transcript (before ``agentsnap snapshot``)."""
    transcript = _transcript(payload, settings)
    if transcript is None:
        return 0
    with open_repo(str(payload.get("cwd") or os.getcwd()), settings) as repo:
        repo.set_messages(transcript.entries)
    return len(transcript.entries)


def _left_out_targets(cwd: str, settings: Settings, targets: list[Path], bulky: list[str]) -> list[str]:
    """The paths under ``targets`` the project's snapshots leave out, in words (the bulky folders left out, which
    can be rebuilt and are named by the hook's "NOT captured" note, are not repeated here)."""
    out: list[str] = []
    with open_repo(cwd, settings) as repo:
        for target in targets:
            for rel, why in repo.left_out_within(target, limit=20):
                if any(rel == f.rstrip("/") or rel.startswith(f.rstrip("/") + "/") for f in bulky):
                    continue
                if rel.rsplit("/", 1)[-1] == ".agentsnap":  # the link to the store outside: made again by the undo
                    continue
                out.append(f"{rel} ({why})")
    return list(dict.fromkeys(out))


def _not_captured(cwd: str, settings: Settings, where: Path) -> str | None:
    """Why the project's snapshots would not hold the file at ``where`` (None: they would)."""
    with open_repo(cwd, settings) as repo:
        rel = where.relative_to(os.path.realpath(repo.root)).as_posix()
        for folder in (bulky_ignored(repo.root, settings["bulky_files"], repo.wt_dir / "statcache.msgpack")
                       if settings["skip_bulky_ignored"] else []):
            if rel == folder or rel.startswith(folder.rstrip("/") + "/"):
                return (f"in {folder.rstrip('/')}/, a folder git ignores that holds over {settings['bulky_files']} files, "
                        "left out: set skip_bulky_ignored to false to capture it")
        return repo.left_out(where)


# ---------------------------------------------------------------------- events
def undo_command(snap_id: str, root: str | Path) -> str:
    """The exact command that puts the project's files back as they were in ``snap_id``."""
    return f"agentsnap-claude-code restore {snap_id[:12]} -C {shlex.quote(str(root))}"


def _storable(text: str) -> str:
    """``text`` as the store can keep it: a lone surrogate (JSON input may escape half a pair, ``"\\ud800"``) becomes
    ``?``. Only the record of the call changes, never what runs."""
    return text.encode("utf-8", "replace").decode("utf-8")


def _pre_tool_use(payload: dict[str, Any], settings: Settings, log: _Log) -> HookResult:
    tool = payload.get("tool_name")
    tool_input: dict[str, Any] = payload["tool_input"] if isinstance(payload.get("tool_input"), dict) else {}
    cwd = str(payload.get("cwd") or os.getcwd())
    root = project_root_for(cwd)
    lost: list[str] = []
    if tool == "Bash":
        command = str(tool_input.get("command") or "")
        if is_agentsnap_snapshot(command):
            n = sync_working_trace(payload, settings)
            log.write(event="PreToolUse", action="sync-trace", entries=n)
            return HookResult()
        findings: list[Finding] = make_matcher(settings, cwd).findings(command)
        if not findings:
            return HookResult()
        store = store_dir_for(root, settings)
        doomed = deletes_store(command, cwd, store)
        if doomed is not None:
            log.write(event="PreToolUse", action="ask-store", command=command[:2000], path=str(doomed))
            return _ask(
                f"This command would delete {doomed}, which holds agentsnap's snapshots of this project ({store}): "
                "after it, nothing could be undone. Approve only if you mean to delete them."
            )
        lost, targets = destroyed(findings, cwd, root)
        said = _storable(command)  # (the store keeps UTF-8: half a surrogate pair made the snapshot fail, and ask)
        label = f"before Bash: {said.strip()[:120]}"
        meta = {"tool": "Bash", "command": said[:2000], "findings": [_storable(str(f)) for f in findings],
                "destructive": True}
        destructive = True
    elif tool in EDIT_TOOLS and settings["snapshot_on_edit"]:
        target = tool_input.get("file_path") or tool_input.get("notebook_path")
        if not isinstance(target, str) or not (Path(cwd) / target).is_file():
            return HookResult()  # a new file: nothing to lose
        where = Path(os.path.realpath(Path(cwd) / target))
        if root not in where.parents:  # a snapshot of the project would be listed as a point before this edit,
            log.write(event="PreToolUse", action="outside-project", tool=tool, file=target)  # and bring nothing back
            return _notice(f"agentsnap: {target} is outside the project {root}: no snapshot of it is taken, "
                           f"this {tool} cannot be undone with agentsnap")
        try:
            why = _not_captured(cwd, settings, where)
        except Exception as exc:  # noqa: BLE001 - (no store yet and auto_init off, a broken one: the snapshot says)
            log.write(event="PreToolUse", action="not-captured-failed", tool=tool, error=repr(exc))
            why = None
        if why is not None:  # a snapshot would be listed as the point before this edit and not hold the file
            log.write(event="PreToolUse", action="not-captured", tool=tool, file=target, why=why)
            return _notice(f"agentsnap: {target} is not in this project's snapshots ({why}): no snapshot is taken, "
                           f"this {tool} cannot be undone with agentsnap")
        label = f"before {tool}: {_storable(target)}"
        meta = {"tool": tool, "file": _storable(target)}
        destructive = False
    elif snapshot_before(tool, settings):
        said = _storable(target_of(tool_input))  # (an MCP server may write anywhere it serves: the project is taken)
        label = f"before {tool}: {said[:120]}"
        meta = {"tool": tool, "file": said[:2000], "mcp": True}
        destructive = False
    else:
        return HookResult()
    if isinstance(payload.get("tool_use_id"), str):
        meta["tool_use_id"] = payload["tool_use_id"]
    started = time.perf_counter()
    try:
        snap, created, info = take_snapshot(payload, settings, label, meta, log)
    except Exception as exc:  # noqa: BLE001 - any failure (a timeout included) must turn into ask/notice, never a crash
        log.write(event="PreToolUse", action="snapshot-failed", tool=tool, error=repr(exc), trace=traceback.format_exc()[-2000:])
        if destructive:
            return _ask(
                f"agentsnap could not snapshot the project before this destructive command ({exc}). "
                "Approve only if you accept running it unprotected."
            )
        return _notice(f"agentsnap: no snapshot before {tool} ({exc}); see {log.path}")
    ms = round((time.perf_counter() - started) * 1000, 1)
    log.write(**{**meta, **info, "event": "PreToolUse", "action": "snapshot", "id": snap.id, "ms": ms})
    if destructive and targets:  # what the command deletes inside the project that the snapshot does not hold
        try:
            lost += _left_out_targets(cwd, settings, targets, info.get("not_captured") or [])
        except Exception as exc:  # noqa: BLE001 - cannot tell: ask rather than promise an undo
            log.write(event="PreToolUse", action="left-out-failed", error=repr(exc))
            lost.append(f"what the snapshot leaves out of {', '.join(str(t) for t in targets[:3])} (it could not be told: {exc})")
    if lost:
        return _ask(
            f"agentsnap took snapshot {snap.id[:12]} of {root}, but this command also destroys what it cannot bring back: "
            f"{', '.join(lost[:5])}. Approve only if you accept that this part cannot be undone."
        )
    if destructive:
        where = info.get("call")
        what = f"tool call {where}" if where else "this call"
        skipped = info.get("not_captured") or []
        note = (
            f"; NOT captured (ignored by git, over {settings['bulky_files']} files; rebuild them or set skip_bulky_ignored "
            f"to false): {', '.join(skipped[:5])}{' ...' if len(skipped) > 5 else ''}"
            if skipped
            else ""
        )
        if info.get("pending_call_missing"):
            note += ("; the conversation was captured before Claude Code had written this call: the files are all "
                     "there, a rewind's conversation may lack the steps just before it")
        return _notice(
            f"agentsnap: snapshot {snap.id[:12]} taken before {what} (`{meta['command'][:80]}`); "
            f"undo with: {undo_command(snap.id, info['root'])}   (files and conversation: /agentsnap:rewind {snap.id[:12]}){note}"
        )
    return HookResult()


def _turn(event: str, payload: dict[str, Any], settings: Settings, log: _Log) -> HookResult:
    if settings["turn_snapshots"] not in (event, "both"):
        return HookResult()
    started = time.perf_counter()
    try:
        snap, created, info = take_snapshot(payload, settings, f"turn ({event})", {}, log)
    except Exception as exc:  # noqa: BLE001
        log.write(event=event, action="snapshot-failed", error=repr(exc), trace=traceback.format_exc()[-2000:])
        return _notice(f"agentsnap: per-turn snapshot failed ({exc}); see {log.path}")
    log.write(**{**info, "event": event, "action": "snapshot", "id": snap.id, "ms": round((time.perf_counter() - started) * 1000, 1)})
    return HookResult()


def run_hook(stdin_text: str, event: str | None = None) -> HookResult:
    """Handle one hook invocation; never raises, always exit status 0."""
    try:
        payload = json.loads(stdin_text) if stdin_text.strip() else {}
        if not isinstance(payload, dict):
            raise ValueError("hook input is not a JSON object")
    except ValueError as exc:
        _Log(DEFAULTS).write(event=event, action="bad-input", error=str(exc))
        return _notice(f"agentsnap: ignored hook input that is not valid JSON ({exc})")
    event = str(payload.get("hook_event_name") or event or "")
    cwd = str(payload.get("cwd") or os.getcwd())
    try:
        settings = load_settings(project_root_for(cwd))
        config_error = None
    except (AgentSnapError, ValueError) as exc:
        settings, config_error = DEFAULTS, str(exc)
    log = _Log(settings)
    try:
        if event == "PreToolUse":
            result = _pre_tool_use(payload, settings, log)
        elif event in ("UserPromptSubmit", "Stop"):
            result = _turn(event, payload, settings, log)
        else:
            result = HookResult()
    except Exception as exc:  # noqa: BLE001 - the last line of defence: never block the session
        log.write(event=event, action="crash", error=repr(exc), trace=traceback.format_exc()[-2000:])
        result = _notice(f"agentsnap hook error ({exc}); see {log.path}")
    if config_error:
        log.write(event=event, action="config-error", error=config_error)
        if not result.stdout:
            result = _notice(f"agentsnap: using default settings, {config_error}")
    return result
