"""A fuzzer of CLI arguments: random argv over every verb never gives a traceback (exit 0, 1 or 2 only).

The command line runs in process through click's runner (the same ``main`` the console script calls, its
central error handler included) on a real store with snapshots, a branch, a tag and a trace. The count of
tracebacks found is printed (``nox -s reliability`` shows it) and must be 0. ``AGENTSNAP_LONG=1`` runs 10x more.

Left out of the draw, and why: ``ui`` serves until Ctrl-C, ``fanout`` runs the shell commands it is given.
"""

from __future__ import annotations

import os
import traceback
from pathlib import Path

import click
import pytest
from agentsnap_core import Repo
from agentsnap_core.cli import main
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

LONG = os.environ.get("AGENTSNAP_LONG") == "1"
EXAMPLES = 1500 if LONG else 150
SKIP = {("ui",), ("fanout",)}


def _verbs(cmd: click.Command, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], click.Command]]:
    if isinstance(cmd, click.Group):
        return [v for name, sub in sorted(cmd.commands.items()) for v in _verbs(sub, (*path, name))]
    return [] if path in SKIP else [(path, cmd)]


main.list_commands(click.Context(main))  # loads the verbs the CLI imports only when they run
VERBS = _verbs(main)
#: values a user (or an agent) might pass: refs good and bad, numbers at the edges, odd text; only names
#: inside the test's directory (nothing absolute, no '..'), no URL with a host
VALUES = ["HEAD", "HEAD~1", "HEAD~99", "main", "side", "v1", "nosuch", "0", "-1", "1", "3", "99999999999999999999",
          "", " ", "-", "--", "x" * 300, "sub", "out", "a.txt", "trace", "world", "nosuch-layer", "now", "1e309",
          "{}", "[", "user", "é\u200b", "*", "origin", "file:nosuch", "s3://", "postgresql://"]


@st.composite
def argvs(draw: st.DrawFn) -> list[str]:
    path, cmd = draw(st.sampled_from(VERBS))
    opts = [o for p in cmd.params if isinstance(p, click.Option) for o in p.opts]
    tokens = draw(st.lists(st.one_of(st.sampled_from(VALUES), st.sampled_from(opts or ["--json"]),
                                     st.text(max_size=12).filter(lambda t: "\x00" not in t)), max_size=5))
    return [*path, *tokens]


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("fuzz") / "work"
    with Repo.init(root) as repo:
        (root / "a.txt").write_text("one\n")
        repo.snapshot("one")
        repo.append_message("user", "hello")
        (root / "a.txt").write_text("two\n")
        repo.snapshot("two")
        repo.create_branch("side", None)
        repo.tag("v1", None)
    return root


FOUND: list[str] = []


def test_random_argv_never_gives_a_traceback(store: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    drawn = {" ".join(path) for path, _ in VERBS}
    assert {"push", "merge", "remote add", "effects verify", "prune"} <= drawn, drawn  # lazily loaded verbs included
    monkeypatch.chdir(store)
    monkeypatch.setenv("HOME", str(store.parent / "home"))
    monkeypatch.setenv("AGENTSNAP_RESIDENT_DIR", str(store.parent / "run"))  # `resident start`: one of its own,
    monkeypatch.setenv("AGENTSNAP_RESIDENT_IDLE", "5")  # gone soon after
    runner = CliRunner()
    runs = {"n": 0}

    @settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    @given(argvs())
    def one(argv: list[str]) -> None:
        runs["n"] += 1
        result = runner.invoke(main, argv, catch_exceptions=True)
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            tb = "".join(traceback.format_exception(result.exception))
            FOUND.append(f"agentsnap {' '.join(map(repr, argv))}\n{tb}")
        elif result.exit_code not in (0, 1, 2):
            FOUND.append(f"agentsnap {' '.join(map(repr, argv))}: exit {result.exit_code}")

    one()
    print(f"\nCLI argument fuzzer: {runs['n']} argv over {len(VERBS)} verbs, tracebacks found: {len(FOUND)}")
    assert not FOUND, "\n\n".join(FOUND[:3])
