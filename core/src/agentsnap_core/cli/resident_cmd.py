"""``agentsnap resident start|stop|status``: the warm process that commands are forked from
(:mod:`agentsnap_core.cli.resident`; used when ``AGENTSNAP_RESIDENT=1``)."""

from __future__ import annotations

import os
import signal
import time

import click

import agentsnap_core.cli.resident as resident
from agentsnap_core.cli.app import JSON_VERSION, emit, register


@click.command("resident")
@click.argument("action", type=click.Choice(["start", "stop", "status"]), default="status")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output (docs/CLI.md).")
@click.pass_context
def resident_command(ctx: click.Context, action: str, as_json: bool) -> None:
    """Start, stop or show the resident process (commands run from it with AGENTSNAP_RESIDENT=1)."""
    pid = resident.pid()
    if action == "start" and pid is None:
        resident.spawn()
        for _ in range(100):  # up to 10 s: it imports the command stack first
            time.sleep(0.1)
            pid = resident.pid()
            if pid is not None and os.path.exists(os.path.join(resident.run_dir(), resident.socket_name())):
                break
    elif action == "stop" and pid is not None:
        os.kill(pid, signal.SIGTERM)
        for _ in range(50):
            time.sleep(0.1)
            if resident.pid() is None:
                break
        pid = resident.pid()
    log = resident.log_path()
    data = {"v": JSON_VERSION, "running": pid is not None, "pid": pid, "enabled": resident.enabled(),
            "socket": os.path.join(resident.run_dir(), resident.socket_name()),
            "log": log if os.path.exists(log) and os.path.getsize(log) else None}
    if as_json:
        emit(data)
    else:
        state = f"running (pid {pid})" if pid is not None else "not running"
        use = "used (AGENTSNAP_RESIDENT=1)" if data["enabled"] else "not used (set AGENTSNAP_RESIDENT=1 to use it)"
        click.echo(f"resident process: {state}; {use}" + (f"; what went wrong: {data['log']}" if data["log"] else ""))
    if action == "start" and pid is None:
        ctx.exit(1)


register(resident_command)
