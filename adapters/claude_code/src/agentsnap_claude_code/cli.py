"""``agentsnap-claude-code``: install the plugin by hand, run its hooks, rewind a session headlessly."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click
from agentsnap_core import Repo
from agentsnap_core.errors import AgentSnapError

from . import install as installer
from .config import load_settings, make_matcher
from .hooks import EVENTS, run_hook
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
        _emit({"destructive": bool(findings), "findings": [f.__dict__ for f in findings]})
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


@main.command("plugin-dir")
def plugin_dir() -> None:
    """Print the plugin directory (for `claude --plugin-dir`)."""
    click.echo(str(installer.plugin_root()))


@main.command()
@click.argument("spec")
@click.option("-C", "directory", default=None, type=click.Path(file_okay=False), help="Project directory (default: here).")
@click.option("--no-files", is_flag=True, help="Only write the forked transcript; leave the files alone.")
@click.option("--session-id", default=None, help="Session id for the fork (default: a new UUID).")
@click.option("--keep-dangling", is_flag=True, help="Keep a trailing tool call that has no result.")
@click.option("--cwd", "resume_cwd", default=None, type=click.Path(file_okay=False), help="Resume in this directory (e.g. a fork worktree) instead of the session's own.")
@click.option("--json", "as_json", is_flag=True)
def rewind(
    spec: str, directory: str | None, no_files: bool, session_id: str | None, keep_dangling: bool, resume_cwd: str | None, as_json: bool
) -> None:
    """Headless rewind: restore the files of SPEC and fork its conversation for `claude --resume`."""
    with Repo.open(directory) as repo:
        snap = repo.get(spec)
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
    if as_json:
        _emit(out)
        return
    if restored:
        click.echo(f"restored files of {snap.id[:12]}; undo with: agentsnap restore {restored['undo'][:12]}")
    click.echo(f"forked session {report.session_id} ({report.lines} lines) -> {report.path}")
    if report.dropped_dangling or report.dropped_invalid:
        click.echo(f"dropped {report.dropped_dangling} unanswered tool call line(s), {report.dropped_invalid} invalid line(s)")
    click.echo(f"continue with: cd {cwd} && claude --resume {report.session_id}")
