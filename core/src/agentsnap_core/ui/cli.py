"""``agentsnap ui [--port N] [--no-open]``: serve the web view until Ctrl-C."""

from __future__ import annotations

import errno
import webbrowser

import click

from agentsnap_core.cli.app import JSON_VERSION, emit, json_opt, open_repo, register
from agentsnap_core.errors import AgentSnapError


@click.command("ui")
@click.option("--port", type=click.IntRange(0, 65535), default=0, show_default=True, help="Port on 127.0.0.1 (0: any free one).")
@click.option("--no-open", is_flag=True, help="Only print the URL; do not open a browser.")
@click.option("--verbose", is_flag=True, help="Log every request to stderr.")
@json_opt
@click.pass_context
def ui(ctx: click.Context, port: int, no_open: bool, verbose: bool, as_json: bool) -> None:
    """Browse snapshots, forks and diffs in a local web page (read-only; the URL carries a secret token)."""
    from agentsnap_core.ui.server import make_server

    repo = open_repo(ctx)
    try:
        server = make_server(repo, port=port, quiet=not verbose)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise AgentSnapError(f"port {port} on 127.0.0.1 is in use; pick another with --port, or 0 for any") from None
        raise AgentSnapError(f"cannot serve on 127.0.0.1:{port}: {exc.strerror or exc}") from None
    if as_json:  # one line a script can read the URL from, before serving
        emit({"v": JSON_VERSION, "url": server.url, "store": str(repo.store_dir)})
    else:
        click.echo(f"agentsnap ui: {server.url}")
    click.echo(f"serving {repo.store_dir} read-only; press Ctrl-C to stop", err=True)
    if not no_open:
        webbrowser.open(server.url)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


register(ui)
