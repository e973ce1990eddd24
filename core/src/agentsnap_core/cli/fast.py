"""Click-free answers for the commonest command lines (issue 19: a process's start-up is much of what a verb
costs, and click plus the application module are a good part of it). :func:`agentsnap_core.cli.run` calls
:func:`answer` first; it takes only the exact forms it knows and returns None for anything else, which click then
parses:

    [-C DIR] status [--json]
    [-C DIR] snapshot [-m MSG | --message MSG] [--json]
    [-C DIR] restore SPEC [--json]
    [-C DIR] fork [SPEC] [-n N] [--prefix P] [--json]

What it prints comes from :mod:`agentsnap_core.cli.common`, as the click verbs' output does, and errors end the
same way (one line, exit status 2), so both paths give the same bytes and exit status (test_cli_fast.py).
"""

from __future__ import annotations

import codecs
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agentsnap_core.repository.repo import Repo

Lines = list[tuple[str, bool]]


def answer(args: list[str]) -> int | None:
    """The exit status of ``agentsnap <args>`` when this module answers it, else None (nothing done)."""
    directory = None
    if len(args) >= 3 and args[0] == "-C":
        directory, args = args[1], args[2:]
        if not directory or not os.path.isdir(directory):  # click checks (or ignores) it: its path
            return None
    if not args or not (_plain(sys.stdout) and _plain(sys.stderr)):
        return None
    as_json = args[-1] == "--json"
    verb, rest = args[0], args[1:-1] if as_json else args[1:]
    if any(a.startswith("-") and a not in ("-m", "--message", "-n", "--prefix") for a in rest):
        return None  # another option, --help, '--', a value that looks like an option: click's job
    work = _parse(verb, rest, as_json)
    return None if work is None else _run(directory, work)


def _parse(verb: str, rest: list[str], as_json: bool) -> Callable[[Repo], Lines] | None:
    from agentsnap_core.cli.common import (
        fork_lines,
        progress,
        refuse_snapshot_during_merge,
        restore_lines,
        snapshot_lines,
        status_lines,
        status_of,
    )

    if verb == "status" and not rest:
        return lambda repo: status_lines(status_of(repo), as_json)
    opts = _options(rest)
    if opts is None:
        return None
    named, positional = opts
    if verb == "snapshot" and not positional and set(named) <= {"-m", "--message"} and len(named) <= 1:
        message = next(iter(named.values()), "")

        def snapshot(repo: Repo) -> Lines:
            refuse_snapshot_during_merge(repo)
            with progress(repo, "snapshot", not as_json):
                snap = repo.snapshot(message)
            return snapshot_lines(snap, as_json, repo)

        return snapshot
    if verb == "restore" and not named and len(positional) == 1:
        spec = positional[0]

        def restore(repo: Repo) -> Lines:
            refuse_snapshot_during_merge(repo, "restore")
            with progress(repo, "restore", not as_json):
                res = repo.restore(spec)
            return restore_lines(res, as_json)

        return restore
    if verb == "fork" and set(named) <= {"-n", "--prefix"} and len(positional) <= 1:
        count, prefix = named.get("-n", "2"), named.get("--prefix", "attempt")
        if not (count.isascii() and count.isdigit()):
            return None  # click's own message for a bad count
        at = positional[0] if positional else None

        def fork(repo: Repo) -> Lines:
            with progress(repo, "fork", not as_json):
                out = repo.fork(at, int(count), prefix=prefix)
            return fork_lines(out, as_json)

        return fork
    return None


def _options(rest: list[str]) -> tuple[dict[str, str], list[str]] | None:
    """``{option: value}`` and the positional arguments; None when an option repeats or lacks its value."""
    named: dict[str, str] = {}
    positional: list[str] = []
    i = 0
    while i < len(rest):
        a = rest[i]
        if a.startswith("-"):
            if a in named or i + 1 >= len(rest) or rest[i + 1].startswith("-"):
                return None
            named[a] = rest[i + 1]
            i += 2
        else:
            positional.append(a)
            i += 1
    if "-m" in named and "--message" in named:
        return None
    return named, positional


def _plain(stream: object) -> bool:
    """A stream click would write to as it is (it re-wraps ASCII streams; then let click do it)."""
    encoding = getattr(stream, "encoding", None)
    try:
        return isinstance(encoding, str) and bool(encoding) and codecs.lookup(encoding).name != "ascii"
    except LookupError:
        return False


def _run(directory: str | None, work: Callable[[Repo], Lines]) -> int:
    """Open the store as the click application does, run ``work``, print its lines; errors as ``_Group.invoke``."""
    import sqlite3

    from agentsnap_core.cli.common import (
        _REMOTE_CLIENT_MODULES,
        CLI_LOCK_WAIT,
        OPENED,
        environment_error_line,
        interrupted_line,
        open_notes,
    )
    from agentsnap_core.errors import AgentSnapError, Terminated
    from agentsnap_core.repository.repo import Repo

    try:
        repo = Repo.open(directory)
        OPENED.append(repo)  # (what an interrupt says it made)
        for note in open_notes(repo):  # (a store made before git init ran above it; a lost index)
            print(note, file=sys.stderr)
        try:
            if not os.environ.get("AGENTSNAP_LOCK_WAIT"):
                repo.lock_wait = CLI_LOCK_WAIT  # a hook's snapshot beside the user's: the second waits, then runs
            lines = work(repo)
        finally:
            repo.close()
    except AgentSnapError as exc:
        return _error(str(exc))
    except KeyboardInterrupt as exc:
        _echo(interrupted_line(), err=True)
        return 143 if isinstance(exc, Terminated) else 130
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
