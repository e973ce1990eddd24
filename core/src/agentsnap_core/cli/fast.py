"""Click-free answers for the commonest read-only command lines (issue 19: a process's start-up is most of what
``agentsnap status`` costs). :func:`agentsnap_core.cli.run` calls :func:`answer` first; it takes only the exact
forms it knows (``[-C DIR] status [--json]``) and returns None for anything else, which click then parses. What it
prints comes from :mod:`agentsnap_core.cli.common`, as the click verb's does, and errors end the same way (one line,
exit status 2), so the two paths give the same bytes and exit status (tests/test_cli_fast.py compares them).
"""

from __future__ import annotations

import codecs
import os
import sys


def answer(args: list[str]) -> int | None:
    """The exit status of ``agentsnap <args>`` when this module answers it, else None (nothing done)."""
    directory = None
    if len(args) >= 3 and args[0] == "-C":
        directory, args = args[1], args[2:]
        if not directory or not os.path.isdir(directory):  # click checks (or ignores) it: its path
            return None
    if args not in (["status"], ["status", "--json"]) or not (_plain(sys.stdout) and _plain(sys.stderr)):
        return None
    return _status(directory, as_json=len(args) == 2)


def _plain(stream: object) -> bool:
    """A stream click would write to as it is (it re-wraps ASCII streams; then let click do it)."""
    encoding = getattr(stream, "encoding", None)
    try:
        return isinstance(encoding, str) and bool(encoding) and codecs.lookup(encoding).name != "ascii"
    except LookupError:
        return False


def _status(directory: str | None, as_json: bool) -> int:
    import sqlite3

    from agentsnap_core.cli.common import _REMOTE_CLIENT_MODULES, CLI_LOCK_WAIT, environment_error_line, status_lines
    from agentsnap_core.errors import AgentSnapError
    from agentsnap_core.repository.repo import Repo

    try:
        repo = Repo.open(directory)
        try:
            if not os.environ.get("AGENTSNAP_LOCK_WAIT"):
                repo.lock_wait = CLI_LOCK_WAIT
            lines = status_lines(repo.status(), as_json)
        finally:
            repo.close()
    except AgentSnapError as exc:
        return _error(str(exc))
    except KeyboardInterrupt:
        _echo("agentsnap: interrupted; the store is unchanged past the last completed step", err=True)
        return 130
    except (OSError, sqlite3.Error, MemoryError) as exc:
        return _error(environment_error_line(exc))
    except Exception as exc:
        if type(exc).__module__.partition(".")[0] not in _REMOTE_CLIENT_MODULES:
            raise
        return _error(environment_error_line(exc))
    for line, err in lines:
        _echo(line, err)
    return 0


def _error(text: str) -> int:
    _echo(f"agentsnap: error: {text}", err=True)
    return 2


def _echo(line: str, err: bool = False) -> None:
    """``click.echo(line, err=err)``: click strips ANSI escapes when not writing to a terminal; such a line goes
    through click itself (rare: a file name with an escape in it)."""
    if "\x1b" in line:
        import click

        click.echo(line, err=err)
        return
    stream = sys.stderr if err else sys.stdout
    stream.write(line + "\n")
    stream.flush()
