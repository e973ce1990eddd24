"""The CLI loads a verb's module only when that verb runs: `--version`, `status`, `snapshot` do not pay for the
fan-out, remotes, the UI server or the asyncio Python API (issue 19). Timing lives in benchmarks/cli_bench.py;
these tests check what is imported, which does not depend on the machine's speed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import click
from agentsnap_core import cli

HEAVY = ["agentsnap_core.operations.fanout", "agentsnap_core.operations.remote", "agentsnap_core.ui", "agentsnap_core.client",
         "agentsnap_core.operations.merge", "asyncio"]


def imported_after(args: list[str], cwd: Path) -> set[str]:
    code = (
        "import sys, json\n"
        "from agentsnap_core.cli import main\n"
        f"try:\n    main({args!r})\nexcept SystemExit:\n    pass\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return set(json.loads(proc.stdout.splitlines()[-1]))


def test_version_and_status_import_no_verb_module(tmp_path: Path) -> None:
    subprocess.run([sys.executable, "-m", "agentsnap_core", "init"], cwd=tmp_path, check=True, capture_output=True)
    (tmp_path / "a.txt").write_text("a\n")
    for args in (["--version"], ["status"], ["snapshot", "-m", "s"]):
        loaded = imported_after(args, tmp_path)
        assert not loaded & set(HEAVY), (args, sorted(loaded & set(HEAVY)))
        assert not {f"agentsnap_core.{m}" for m in cli.LAZY_VERBS.values()} & loaded, args


def test_status_and_a_small_snapshot_start_no_thread_pool(tmp_path: Path) -> None:
    """``concurrent.futures`` (with the ``logging`` it imports) costs ~8 ms of every command's start: the store's
    pack writer starts its pool only for a pack of more than one block, the scan and hash pools only for big trees."""
    subprocess.run([sys.executable, "-m", "agentsnap_core", "init"], cwd=tmp_path, check=True, capture_output=True)
    for i in range(10):
        (tmp_path / f"f{i}.txt").write_text(f"file {i}\n")
    for args in (["status"], ["snapshot", "-m", "s"], ["status"]):
        loaded = imported_after(args, tmp_path)
        assert "concurrent.futures" not in loaded and "logging" not in loaded, args


def test_a_lazy_verb_runs_and_help_lists_every_verb(tmp_path: Path) -> None:
    loaded = imported_after(["du"], tmp_path)  # no store: a one-line error, but the verb's module was loaded
    assert "agentsnap_core.cli.retention" in loaded and "agentsnap_core.cli.fanout" not in loaded
    proc = subprocess.run([sys.executable, "-m", "agentsnap_core", "--help"], capture_output=True, text=True, check=True)
    for verb in cli.LAZY_VERBS:
        assert f"\n  {verb} " in proc.stdout, verb


def test_every_registered_verb_is_eager_or_in_the_lazy_map() -> None:
    """A verb module that registers a command not named in LAZY_VERBS would be unreachable by name."""
    before = set(cli.main.commands)
    names = set(cli.main.list_commands(click.Context(cli.main)))  # imports every lazy module
    added = names - before
    assert added <= set(cli.LAZY_VERBS), f"verbs registered by lazy modules but missing from LAZY_VERBS: {added - set(cli.LAZY_VERBS)}"
    assert set(cli.LAZY_VERBS) <= names, f"LAZY_VERBS names no such verb: {set(cli.LAZY_VERBS) - names}"


def test_version_answers_without_loading_click_or_the_application() -> None:
    """`agentsnap --version` (the console script enters through cli.run) loads neither click nor the repository: its
    start-up is the interpreter's plus a few small modules (benchmarks/cli_bench.py measures it)."""
    code = ("import sys, json\nfrom agentsnap_core.cli import run\nrun(['--version'])\n"
            "print(json.dumps(sorted(m for m in sys.modules if m.startswith(('click', 'agentsnap_core', 'typing')))))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    first, last = proc.stdout.splitlines()[0], proc.stdout.splitlines()[-1]
    assert first == f"agentsnap, version {cli.__version__}"
    assert set(json.loads(last)) <= {"agentsnap_core", "agentsnap_core.cli", "typing"}, last
    assert "click" not in json.loads(last)


def test_the_console_script_enters_through_run() -> None:
    import importlib.metadata

    (script,) = [ep for ep in importlib.metadata.entry_points(group="console_scripts") if ep.name == "agentsnap"]
    assert script.value == "agentsnap_core.cli:run"
