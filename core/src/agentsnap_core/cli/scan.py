"""``agentsnap scan``: report secrets a snapshot would carry to a remote (:mod:`agentsnap_core.operations.scan`).

Exit status: 0 nothing found, 1 secrets found, 2 error.
"""

from __future__ import annotations

import click

from agentsnap_core.cli.app import JSON_VERSION, emit, open_repo, register, short
from agentsnap_core.operations.scan import scan_snapshot


@click.command("scan")
@click.argument("spec", required=False)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output (docs/CLI.md).")
@click.pass_context
def scan_command(ctx: click.Context, spec: str | None, as_json: bool) -> None:
    """Report secrets in snapshot SPEC (default HEAD) before you push it. Exit 1 when any are found."""
    report = scan_snapshot(open_repo(ctx), spec)
    if as_json:
        emit({"v": JSON_VERSION, **report})
    elif not report["count"]:
        click.echo(f"{short(report['id'])}: no secrets found ({report['files_scanned']} text files scanned)")
    else:
        click.echo(f"{short(report['id'])}: {report['count']} possible secret(s); do not push before removing them")
        for f in report["findings"]:
            click.echo(f"  {f['layer']:6} {f['where']}: {f['kind']} {f['preview']}")
    for what in report["not_read"] if not as_json else []:
        click.echo(f"warning: not looked at (could not be read): {what}", err=True)
    if report["count"]:
        ctx.exit(1)


register(scan_command)
