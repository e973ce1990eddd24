"""The ``agentsnap`` command line. Every verb takes ``--json``; shapes are documented in docs/CLI.md.

This module is what the console script loads, so it stays small: ``agentsnap --version`` answers from here,
``[-C DIR] status [--json]`` from :mod:`agentsnap_core.cli.fast` (no click), and every other command loads the click application (:mod:`agentsnap_core.cli.app`, the core verbs) and, only when its
verb runs, the verb's own module (``LAZY_VERBS``). The application's names (``main``, ``register``, ``emit``...)
are importable from here as before.
"""

from __future__ import annotations

import sys

from agentsnap_core import __version__


def run(argv: list[str] | None = None) -> None:
    """The console script ``agentsnap``."""
    args = sys.argv[1:] if argv is None else argv
    if args == ["--version"]:  # the same line click's version option prints, without loading click
        sys.stdout.write(f"agentsnap, version {__version__}\n")
        return
    if args and args[-1] in ("status", "--json"):  # read-only verbs answered without click (cli/fast.py)
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
