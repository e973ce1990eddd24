"""The ``agentsnap`` command line. Every verb takes ``--json``; shapes are documented in docs/CLI.md.

This module is what the console script loads, so it stays small: ``agentsnap --version`` answers from here, the
commonest forms of status, snapshot, restore and fork from :mod:`agentsnap_core.cli.fast` (no click), and every
other command loads the click application (:mod:`agentsnap_core.cli.app`, the core verbs) and, only when its verb
runs, the verb's own module (``LAZY_VERBS``). The application's names (``main``, ``register``, ``emit``...)
are importable from here as before.
"""

from __future__ import annotations

import os
import sys

from agentsnap_core import __version__

#: verbs cli/fast.py may answer (other command lines never import it)
_FAST_VERBS = frozenset({"status", "snapshot", "restore", "fork"})


def _terminated(signum: int, frame: object) -> None:
    from agentsnap_core.errors import Terminated

    raise Terminated()


def run(argv: list[str] | None = None, *, resident: bool = True) -> None:
    """The console script ``agentsnap`` (``resident=False``: never hand the command to the resident process).

    SIGTERM is handled as Ctrl-C (:class:`~agentsnap_core.errors.Terminated`, exit 143): killed outright, a restore
    left its half-written temp file in the user's tree and said nothing."""
    import _signal  # (the C module: ``signal`` imports enum, a cost every command would pay at start)

    if _signal.getsignal(_signal.SIGTERM) == _signal.SIG_DFL:
        _signal.signal(_signal.SIGTERM, _terminated)
    try:
        _run(sys.argv[1:] if argv is None else argv, resident)
    except BrokenPipeError as exc:
        from agentsnap_core.cli.common import end_quietly_on_closed_output, output_closed

        if not output_closed(exc):
            raise
        raise SystemExit(end_quietly_on_closed_output()) from None  # `agentsnap status | head`: not an error


def _run(args: list[str], resident: bool) -> None:
    if args == ["--version"]:  # the same line click's version option prints, without loading click
        sys.stdout.write(f"agentsnap, version {__version__}\n")
        return
    if resident and os.environ.get("AGENTSNAP_RESIDENT") == "1" and args[:1] != ["resident"]:
        from agentsnap_core.cli.resident import call  # a child of the warm process runs it (cli/resident.py)

        code = call(args)
        if code is not None:
            raise SystemExit(code)
    if _FAST_VERBS.intersection(args[:3]):  # the commonest command lines are answered without click (cli/fast.py)
        from agentsnap_core.cli.fast import answer

        code = answer(args)
        if code is not None:
            raise SystemExit(code)  # as click's standalone mode ends
    from agentsnap_core.cli.app import main

    main(args)


def __getattr__(name: str) -> object:
    if name.startswith("__"):
        raise AttributeError(name)
    import importlib  # not `from agentsnap_core.cli.app import app`: that would ask this very function for `app`

    app = importlib.import_module("agentsnap_core.cli.app")
    return app if name == "app" else getattr(app, name)
