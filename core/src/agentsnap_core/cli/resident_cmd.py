"""``agentsnap resident start|stop|status|install-client|remove-client``: the warm process that commands are forked
from (:mod:`agentsnap_core.cli.resident`; used when ``AGENTSNAP_RESIDENT=1``), and the native client that hands
them over without starting Python (:mod:`agentsnap_core.cli.native`)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import click

import agentsnap_core.cli.resident as resident
from agentsnap_core.cli import native
from agentsnap_core.cli.app import JSON_VERSION, emit, register
from agentsnap_core.errors import InvalidInput


@click.command("resident")
@click.argument("action", type=click.Choice(["start", "stop", "status", "install-client", "remove-client"]),
                default="status")
@click.option("--at", "at", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="install-client/remove-client: the agentsnap script to replace (default: this installation's).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output (docs/CLI.md).")
@click.pass_context
def resident_command(ctx: click.Context, action: str, at: Path | None, as_json: bool) -> None:
    """Start, stop or show the resident process (commands run from it with AGENTSNAP_RESIDENT=1).

    install-client puts a native client (compiled here with cc) in place of the agentsnap script: it hands each
    command to the resident process without starting Python, and runs the script's own code whenever it does
    not; remove-client puts the script back (so does reinstalling agentsnap)."""
    script = at.resolve() if at is not None else native.script()
    if action in ("install-client", "remove-client"):
        if script is None:
            raise InvalidInput("cannot find this installation's agentsnap script: name it with --at PATH")
        if action == "install-client":
            native.install(script)
            done = f"native client installed at {script}"
        else:
            done = (f"Python script put back at {script}" if native.remove(script)
                    else f"no native client at {script}: nothing changed")
        if as_json:
            emit({"v": JSON_VERSION, "client": native.kind(script), "script": str(script)})
        else:
            click.echo(done)
        return
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
            "log": log if os.path.exists(log) and os.path.getsize(log) else None,
            "client": native.kind(script) if script is not None else None}
    if as_json:
        emit(data)
    else:
        state = f"running (pid {pid})" if pid is not None else "not running"
        use = "used (AGENTSNAP_RESIDENT=1)" if data["enabled"] else "not used (set AGENTSNAP_RESIDENT=1 to use it)"
        client = ("; native client" if data["client"] == "native" else
                  "; 'agentsnap resident install-client' would hand commands over without starting Python"
                  if data["client"] == "python" and data["enabled"] and os.name == "posix" else "")
        click.echo(f"resident process: {state}; {use}{client}"
                   + (f"; what went wrong: {data['log']}" if data["log"] else ""))
    if action == "start" and pid is None:
        ctx.exit(1)


register(resident_command)
