"""``agentsnap-claude-code``: install the plugin by hand, run its hooks, rewind a session headlessly."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import Any

import click
from agentsnap_core import Repo
from agentsnap_core.errors import AgentSnapError, InvalidInput

from . import install as installer
from .config import load_settings, make_matcher
from .gate import project_root_for
from .hooks import EVENTS, run_hook, undo_command
from .points import pick, points
from .projectstore import open_project_repo
from .transcript import claude_config_dir, encode_project_dir, fork_lines, is_transcript_trace, write_forked_session


class _Group(click.Group):
    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (AgentSnapError, ValueError, FileExistsError) as exc:
            click.echo(f"agentsnap-claude-code: error: {exc}", err=True)
            ctx.exit(2)


def _emit(data: Any) -> None:
    click.echo(json.dumps(data, sort_keys=True, default=str))


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """agentsnap for Claude Code: snapshots of the project tree and the conversation."""


@main.command()
@click.argument("event", required=False, type=click.Choice(EVENTS))
def hook(event: str | None) -> None:
    """Run a hook: reads Claude Code's JSON from stdin; always exits 0."""
    result = run_hook(sys.stdin.read(), event)
    if result.stdout:
        click.echo(result.stdout)
    if result.stderr:
        click.echo(result.stderr, err=True)
    sys.exit(result.exit_code)


@main.command()
@click.argument("command")
@click.option("--cwd", default=None, help="Directory used to decide whether mv/cp/> overwrite a file.")
@click.option("--json", "as_json", is_flag=True)
def check(command: str, cwd: str | None, as_json: bool) -> None:
    """Say whether COMMAND counts as destructive (exit 1 when it does)."""
    findings = make_matcher(load_settings(cwd), cwd).findings(command)
    if as_json:
        _emit({"destructive": bool(findings), "findings": [f.as_dict() for f in findings]})
    else:
        for f in findings:
            click.echo(str(f))
        click.echo("destructive" if findings else "harmless")
    sys.exit(1 if findings else 0)


@main.command()
@click.option("--user", is_flag=True, help="Install into ~/.claude (or $CLAUDE_CONFIG_DIR).")
@click.option("--project", type=click.Path(file_okay=False), help="Install into DIR/.claude.")
@click.option("--json", "as_json", is_flag=True)
def install(user: bool, project: str | None, as_json: bool) -> None:
    """Copy the slash commands and add the hooks to settings.json (idempotent)."""
    res = installer.install(user=user, project=project)
    if as_json:
        _emit(res)
    else:
        click.echo(f"commands {' '.join(res['commands'])} -> {res['commands_dir']}")
        click.echo(f"hooks -> {res['settings']}")


@main.command()
@click.option("--user", is_flag=True)
@click.option("--project", type=click.Path(file_okay=False))
@click.option("--json", "as_json", is_flag=True)
def uninstall(user: bool, project: str | None, as_json: bool) -> None:
    """Remove the commands and hooks that install added."""
    res = installer.uninstall(user=user, project=project)
    if as_json:
        _emit(res)
    else:
        click.echo(f"removed {len(res['removed_commands'])} commands and the agentsnap hooks from {res['settings']}")


@main.command("install-client")
@click.option("--at", "at", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="The agentsnap-claude-code-hook script to replace (default: this installation's).")
@click.option("--remove", is_flag=True, help="Put the Python script back instead.")
@click.option("--json", "as_json", is_flag=True)
def install_client(at: Path | None, remove: bool, as_json: bool) -> None:
    """Put a native hook client (compiled here with cc) in place of agentsnap-claude-code-hook.

    It hands each hook call to the warm helper without starting Python, and gives the call to the Python
    hook (the same code, the same answers) whenever the helper does not answer; --remove puts the script
    back (so does reinstalling agentsnap-claude-code)."""
    from agentsnap_core.cli import native

    client = installer.hook_client()
    script = at.resolve() if at is not None else native.script(client)
    if script is None:
        raise InvalidInput("cannot find this installation's agentsnap-claude-code-hook script: name it with --at PATH")
    if remove:
        done = (f"Python hook script put back at {script}" if native.remove(script, client)
                else f"no native hook client at {script}: nothing changed")
    else:
        native.install(script, client)
        done = f"native hook client installed at {script}"
    if as_json:
        _emit({"client": native.kind(script, client), "script": str(script)})
    else:
        click.echo(done)


@main.command("plugin-dir")
def plugin_dir() -> None:
    """Print the plugin directory (for `claude --plugin-dir`)."""
    click.echo(str(installer.plugin_root()))


def _project_repo(directory: str | None) -> Repo:
    """The plugin's store of the project at ``directory`` (default: here), created by no command but the hooks."""
    cwd = str(Path(directory or ".").resolve())
    return open_project_repo(cwd, load_settings(project_root_for(cwd)), create=False)


def _point_options(f: Any) -> Any:
    for opt in reversed(
        [
            click.option("--last-destructive", is_flag=True, help="The snapshot taken before the session's last destructive tool call."),
            click.option("--before-call", type=click.IntRange(min=1), default=None, help="The snapshot taken before tool call N of the session."),
            click.option("--before-prompt", type=click.IntRange(min=1), default=None, help="The state before the session's prompt N."),
            click.option("--session", "session", default=None, help="Session id (default: the newest session with snapshots)."),
        ]
    ):
        f = opt(f)
    return f


def _pick(repo: Repo, spec: str | None, last_destructive: bool, before_call: int | None, before_prompt: int | None, session: str | None) -> str:
    chosen = [x for x in (spec, last_destructive or None, before_call, before_prompt) if x is not None]
    if len(chosen) != 1:
        raise InvalidInput("name exactly one point: a snapshot id, --last-destructive, --before-call N or --before-prompt N")
    if spec is not None:
        return repo.get(spec).id
    return pick(repo, last_destructive=last_destructive, call=before_call, prompt=before_prompt, session=session).snapshot.id


@main.command("points")
@click.option("-C", "directory", default=None, type=click.Path(file_okay=False), help="Project directory (default: here).")
@click.option("--session", default=None, help="Session id (default: the newest session with snapshots).")
@click.option("--json", "as_json", is_flag=True)
def points_cmd(directory: str | None, session: str | None, as_json: bool) -> None:
    """List the points a session can be rewound to (oldest first)."""
    with _project_repo(directory) as repo:
        pts = points(repo, session)
        others = sorted({str(p.meta.get("session_id")) for p in points(repo, "*")}) if session and not pts else []
    if as_json:
        _emit([p.as_dict() for p in pts])
        return
    if others:  # (a mistyped id: say so rather than "no snapshots ... yet")
        raise InvalidInput(f"no snapshots of session {session!r} in this project; sessions with snapshots: {', '.join(others)}")
    _echo_points(pts)


def _echo_points(pts: list[Any]) -> None:
    for p in pts:
        click.echo(f"{p.snapshot.id[:12]}  {p.label}")
    if not pts:
        click.echo("no snapshots of a Claude Code session in this project yet")


@main.command("restore")
@click.argument("args", nargs=-1)
@_point_options
@click.option("-C", "directory", default=None, type=click.Path(file_okay=False), help="Project directory (default: here).")
@click.option("--path", "more_paths", multiple=True, help="Restore only these paths (repeatable).")
@click.option("--current-session", default=None, hidden=True,
              help="The session /agentsnap:restore runs in (${CLAUDE_SESSION_ID}): its points, when it has any, not the newest session's.")
@click.option("--json", "as_json", is_flag=True)
def restore_cmd(
    args: tuple[str, ...], last_destructive: bool, before_call: int | None, before_prompt: int | None, session: str | None,
    directory: str | None, more_paths: tuple[str, ...], current_session: str | None, as_json: bool,
) -> None:
    """Put the project's files (or PATHS) back as they were at SPEC or a point; undoable. ARGS: [SPEC] [PATHS]...

    The conversation is left alone (``rewind`` forks it too).
    """
    point_given = last_destructive or before_call is not None or before_prompt is not None
    if session is None and current_session and point_given:
        session = _own_session(directory, current_session, quiet_stdout=True)
    spec, paths = (None, [*args, *more_paths]) if point_given else (args[0] if args else None, [*args[1:], *more_paths])
    with _project_repo(directory) as repo:
        oid = _pick(repo, spec, last_destructive, before_call, before_prompt, session)
        res = repo.restore(oid, paths=list(paths) or None)
        root = repo.root
    if as_json:
        _emit({"id": oid, "restored": res})
        return
    click.echo(f"restored the files of {oid[:12]} in {root}; undo with: {undo_command(res['undo'], root)}")


def _own_session(directory: str | None, current: str, *, quiet_stdout: bool) -> str | None:
    """``current`` when that session has points; else None (the newest session's), with a note saying so: a session
    resumed from a fork, or one that has snapshotted nothing yet. Another session at work in the same project (another
    terminal) has newer points than the one /agentsnap:rewind is typed in, and must not be rewound to instead."""
    try:
        with _project_repo(directory) as repo:
            if points(repo, current):
                return current
    except AgentSnapError:
        return None
    click.echo(f"note: this session ({current}) has no snapshots of its own; using the newest session's points", err=quiet_stdout)
    return None


@main.command()
@click.argument("spec", required=False)
@_point_options
@click.option("-C", "directory", default=None, type=click.Path(file_okay=False), help="Project directory (default: here).")
@click.option("--no-files", is_flag=True, help="Only write the forked transcript; leave the files alone.")
@click.option("--session-id", default=None, help="Session id for the fork (default: a new UUID).")
@click.option("--keep-dangling", is_flag=True, help="Keep a trailing tool call that has no result.")
@click.option("--cwd", "resume_cwd", default=None, type=click.Path(file_okay=False), help="Resume in this directory (e.g. a fork worktree) instead of the session's own.")
@click.option("--in-session", is_flag=True, help="As run by /agentsnap:rewind inside Claude Code: with no point, list the points; after the rewind, name the /resume command.")
@click.option("--current-session", default=None, hidden=True,
              help="The session /agentsnap:rewind runs in (${CLAUDE_SESSION_ID}): its points, when it has any, not the newest session's.")
@click.option("--json", "as_json", is_flag=True)
def rewind(
    spec: str | None, last_destructive: bool, before_call: int | None, before_prompt: int | None, session: str | None, directory: str | None, no_files: bool, session_id: str | None, keep_dangling: bool, resume_cwd: str | None, in_session: bool, current_session: str | None, as_json: bool
) -> None:
    """Restore the files of SPEC (or a point) and fork its conversation for `claude --resume`."""
    if session is None and current_session and spec is None:
        session = _own_session(directory, current_session, quiet_stdout=as_json or not in_session)
    if in_session and spec is None and not last_destructive and before_call is None and before_prompt is None:
        try:
            with _project_repo(directory) as repo:
                pts = points(repo, session)
        except AgentSnapError as exc:
            click.echo(f"nothing to rewind to: {exc}")
            return
        click.echo("Points this session can be rewound to (oldest first):")
        _echo_points(pts)
        click.echo("Rewind with: /agentsnap:rewind <id> | --last-destructive | --before-call N | --before-prompt N")
        return
    with _project_repo(directory) as repo:
        snap = repo.get(_pick(repo, spec, last_destructive, before_call, before_prompt, session))
        entries = repo.read_layer(snap, "trace")
        if not is_transcript_trace(entries):
            raise AgentSnapError(f"snapshot {snap.id[:12]} holds no Claude Code transcript (it was not taken by the plugin's hooks)")
        meta = (snap.manifest.get("meta") or {}).get("claude_code") or {}
        cwd = str(Path(resume_cwd).resolve()) if resume_cwd else str(meta.get("cwd") or repo.root)
        lines, plan = fork_lines(entries, session_id, keep_dangling=keep_dangling)  # validate before any write
        if not lines:
            raise AgentSnapError(f"snapshot {snap.id[:12]} has no valid transcript lines to fork")
        if (claude_config_dir() / "projects" / encode_project_dir(cwd) / f"{plan.session_id}.jsonl").exists():
            raise AgentSnapError(f"session {plan.session_id} already exists; pass another --session-id")
        restored = None if no_files else repo.restore(snap.id)
        report = write_forked_session(entries, cwd, session_id=plan.session_id, rewrite_cwd=bool(resume_cwd), keep_dangling=keep_dangling)
    out = {"id": snap.id, "restored": restored, "session": report.as_dict(), "resume": f"claude --resume {report.session_id}"}
    late = (meta.get("transcript") or {}).get("pending_call_missing")
    if late:  # the hook waited in vain for Claude Code to write the call: the last steps may be missing
        out["warning"] = (f"the transcript was captured before Claude Code had written tool call {late}: "
                          "the forked conversation may lack the steps just before it")
        click.echo(f"warning: {out['warning']}", err=True)
    if as_json:
        _emit(out)
        return
    if restored:
        click.echo(f"restored files of {snap.id[:12]}; undo with: {undo_command(restored['undo'], repo.root)}")
    click.echo(f"forked session {report.session_id} ({report.lines} lines) -> {report.path}")
    if report.dropped_dangling or report.dropped_invalid:
        click.echo(f"dropped {report.dropped_dangling} unanswered tool call line(s), {report.dropped_invalid} invalid line(s)")
    if in_session:
        click.echo(f"switch to the fork in Claude Code with: /resume {report.session_id}   (this conversation stays as it is)")
    click.echo(f"continue with: cd {shlex.quote(cwd)} && claude --resume {report.session_id}")
