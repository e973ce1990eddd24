"""``agentsnap config``: read and change the store's settings (:mod:`agentsnap_core.repository.settings`)."""

from __future__ import annotations

import click

from agentsnap_core.cli.app import JSON_VERSION, emit, open_repo, register
from agentsnap_core.errors import InvalidInput
from agentsnap_core.repository import settings


@click.command("config")
@click.argument("key", required=False)
@click.argument("value", required=False)
@click.option("--unset", is_flag=True, help="Put KEY back to its default.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output (docs/CLI.md).")
@click.pass_context
def config_command(ctx: click.Context, key: str | None, value: str | None, unset: bool, as_json: bool) -> None:
    """Show the store's settings, show KEY, or set KEY to VALUE (e.g. `agentsnap config world.include_git true`).

    \b
    world.include_git      capture .git directories too (default false)
    world.include_secrets  capture .env and key files too (default false)
    world.ignore           gitignore patterns kept in the store (one per line)
    world.vault            keep left-out secret files encrypted locally (default on)
    du.warn_bytes          'agentsnap du' warns above this store size
    """
    if unset and (key is None or value is not None):
        raise InvalidInput("--unset takes a KEY and no VALUE")
    repo = open_repo(ctx)
    if key is None:
        rows = {k: {"value": settings.current(repo, k), "default": s.default, "help": s.help}
                for k, s in settings.SETTINGS.items()}
        if as_json:
            emit({"v": JSON_VERSION, "settings": rows})
            return
        for k, row in rows.items():
            shown = row["value"] if row["value"] is not None else f"{row['default'] or '(none)'} (default)"
            click.echo(f"{k} = {_one_line(shown)}")
        return
    if value is None and not unset:
        if key not in settings.SETTINGS and key not in settings.MANAGED:
            settings.check(key, "")  # the refusal naming the settings
        stored = settings.current(repo, key)
        default = settings.SETTINGS[key].default if key in settings.SETTINGS else None
        if as_json:
            emit({"v": JSON_VERSION, "key": key, "value": stored, "default": default})
        else:
            click.echo(stored if stored is not None else (default or ""))
        return
    now = settings.change(repo, key, None if unset else value)
    if as_json:
        emit({"v": JSON_VERSION, "key": key, "value": now})
    else:
        click.echo(f"{key} = {_one_line(now) or '(none)'}" + (" (default)" if unset else ""))
        if key == "world.include_git" and now == "true":
            click.echo("the next snapshot captures .git directories; a restore of an earlier snapshot (taken without "
                       "them) leaves them as they are", err=True)
        if key == "world.include_secrets" and now == "true":  # (was said nowhere: .env then travels with every push)
            click.echo("the next snapshots capture credential files (.env, private keys) as plain files, and a push "
                       "sends them to the remote; run 'agentsnap scan' before 'agentsnap push'", err=True)


def _one_line(value: str) -> str:
    return value.replace("\n", " | ")


register(config_command)
