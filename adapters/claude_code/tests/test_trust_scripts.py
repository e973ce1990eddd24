"""A command that runs the project's own scripts is judged by what those scripts do.

Agents rarely type ``rm -rf src``; they run ``make clean``, ``npm run reset``, ``bash scripts/cleanup.sh`` or
``./reset.sh``, and the destructive part is inside. The matcher judged only the words typed, so each of these
took no snapshot and the files they deleted had no undo (each test below fails on the code before this change).
The scripts are read from the project (the Makefile's recipes for the goals named, package.json's scripts with
their pre/post scripts, a shell script, a Python script's text) and checked with the same rules.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from agentsnap_claude_code.matcher import Matcher
from agentsnap_core import Repo
from conftest import run_plugin_hook

MAKEFILE = """\
PY ?= python3
BUILD := build
CLEAN_DIRS = src $(BUILD)

.PHONY: all build clean distclean

all: build

build:
\t@echo building into $(BUILD)
\tmkdir -p $(BUILD) && cp -r src/. $(BUILD)/

clean:
\t$(RM) -r $(CLEAN_DIRS)

distclean: clean
\t@echo all clean
"""


def _write(root: Path, rel: str, text: str, mode: int | None = None) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    if mode is not None:
        path.chmod(mode)


@pytest.fixture
def scripted(project: Path) -> Path:
    """The project with the scripts a real one has: a Makefile, package.json scripts, shell and Python scripts."""
    _write(project, "Makefile", MAKEFILE)
    _write(project, "package.json", json.dumps({"name": "demo", "scripts": {
        "lint": "eslint src", "prereset": "echo about to reset", "reset": "node scripts/wipe.js && git clean -fdx",
        "test": "node --test", "format": "prettier --check src"}}))
    _write(project, "scripts/cleanup.sh", "#!/bin/sh\nset -e\nrm -rf src\n", 0o755)
    _write(project, "scripts/hello.sh", "#!/bin/sh\necho hello\nls -la\n", 0o755)
    _write(project, "scripts/wipe.js", "const fs = require('fs');\nfs.rmSync('src', { recursive: true });\n")
    _write(project, "scripts/report.py", "import sys\nprint(open(sys.argv[1]).read())\n")
    _write(project, "scripts/regen.py", "import shutil\nshutil.rmtree('src')\n")
    _write(project, "reset", "#!/usr/bin/env bash\nsource scripts/cleanup.sh\n", 0o755)
    _write(project, "script", "#!/bin/bash\nrm -rf build src\n", 0o755)
    return project


DESTRUCTIVE = [
    ("make clean", "rm"),
    ("make distclean", "rm"),  # through its prerequisite
    ("make -C . clean", "rm"),
    ("npm run reset", "git-clean"),
    ("npm run-script reset", "script-delete"),  # node scripts/wipe.js
    ("yarn reset", "git-clean"),
    ("pnpm run reset", "git-clean"),
    ("bash scripts/cleanup.sh", "rm"),
    ("sh -e scripts/cleanup.sh", "rm"),
    ("./scripts/cleanup.sh", "rm"),
    ("cd scripts && ./cleanup.sh", "rm"),
    ("./reset", "rm"),  # a shebang script that sources another
    ("source scripts/cleanup.sh", "rm"),
    (". scripts/cleanup.sh", "rm"),
    ("python scripts/regen.py", "script-delete"),
    ("python3 -u scripts/regen.py --force", "script-delete"),
    ("uv run python scripts/regen.py", "script-delete"),
    ("node scripts/wipe.js", "script-delete"),
    ("./script", "rm"),  # a project's own executable named like util-linux's script(1)
]

HARMLESS = [
    "make", "make build", "make all", "npm run lint", "npm run format", "npm test", "bash scripts/hello.sh",
    "./scripts/hello.sh", "python scripts/report.py README.md", "make -n clean", "make --dry-run clean",
    "cat scripts/cleanup.sh", "bash scripts/missing.sh", "npm run nosuch",
]


@pytest.mark.parametrize(("command", "rule"), DESTRUCTIVE, ids=[c for c, _ in DESTRUCTIVE])
def test_what_a_script_does_counts(scripted: Path, command: str, rule: str) -> None:
    rules = {f.rule for f in Matcher(cwd=str(scripted)).findings(command)}
    assert rule in rules, f"{command!r} runs a script that deletes files, but matched {rules}"


@pytest.mark.parametrize("command", HARMLESS)
def test_scripts_that_delete_nothing_stay_harmless(scripted: Path, command: str) -> None:
    assert Matcher(cwd=str(scripted)).findings(command) == [], command


def test_a_script_too_large_to_read_is_snapshotted_rather_than_missed(scripted: Path) -> None:
    _write(scripted, "scripts/huge.sh", "echo hi\n" * 200_000)  # 1.6 MB of shell
    assert [f.rule for f in Matcher(cwd=str(scripted)).findings("bash scripts/huge.sh")] == ["unparsed"]


def test_scripts_that_run_each_other_in_a_loop_end(scripted: Path) -> None:
    _write(scripted, "scripts/a.sh", "sh scripts/b.sh\n")
    _write(scripted, "scripts/b.sh", "sh scripts/a.sh\nmake clean\n")
    assert "rm" in {f.rule for f in Matcher(cwd=str(scripted)).findings("sh scripts/a.sh")}
    _write(scripted, "package.json", json.dumps({"scripts": {"a": "npm run b", "b": "npm run a && npm run c", "c": "rm -rf src"}}))
    assert "rm" in {f.rule for f in Matcher(cwd=str(scripted)).findings("npm run a")}


@pytest.mark.parametrize("command", ["make clean", "npm run reset", "bash scripts/cleanup.sh", "./reset"])
def test_the_plugin_hook_snapshots_before_a_script_that_deletes_and_the_undo_brings_the_files_back(
        scripted: Path, transcript: Path, command: str) -> None:
    """Through the plugin's real hook command (hooks.json, JSON on stdin), then the command itself, then the undo the
    hook printed."""
    if command.startswith("npm") and not shutil.which("node"):
        command = "make clean"  # (npm's script runner needs node; the matcher tests above cover npm without it)
    before = {p.relative_to(scripted).as_posix(): p.read_bytes() for p in (scripted / "src").rglob("*") if p.is_file()}
    _, out = run_plugin_hook(scripted, transcript, "PreToolUse", tool_name="Bash", tool_input={"command": command})
    assert out.get("systemMessage", "").startswith("agentsnap: snapshot "), out
    undo = out["systemMessage"].split("undo with: ", 1)[1].split("   ", 1)[0]
    if command == "npm run reset":
        command = "node scripts/wipe.js"  # (git clean -fdx would take the hook's link file; not what is tested here)
    subprocess.run(command, shell=True, cwd=scripted, check=True, capture_output=True)
    assert not (scripted / "src").exists()
    proc = subprocess.run(undo, shell=True, cwd=scripted, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    after = {p.relative_to(scripted).as_posix(): p.read_bytes() for p in (scripted / "src").rglob("*") if p.is_file()}
    assert after == before
    with Repo.open(scripted) as repo:
        assert repo.verify()["ok"]


@pytest.mark.parametrize("command, lost", [
    ("cd {elsewhere} && rm -rf src", "{elsewhere}/src"),
    ('cd "$BUILD_DIR" && rm -rf out', "out (after a cd to a directory that cannot be told)"),
    ("make -C {elsewhere} clean", "{elsewhere}/src"),
])
def test_no_undo_is_promised_for_a_delete_that_runs_in_another_directory(scripted: Path, transcript: Path, tmp_path: Path,
                                                                        command: str, lost: str) -> None:
    """``cd /elsewhere && rm -rf src`` deletes /elsewhere/src, which no snapshot of the project holds; the hook read
    ``src`` as the project's and printed "undo with" (the matcher and the safety check now follow the cd, and a
    script's own folder)."""
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "src").mkdir(parents=True)
    _write(elsewhere, "Makefile", "clean:\n\trm -rf src\n")
    command, lost = command.format(elsewhere=elsewhere), lost.format(elsewhere=elsewhere)
    _, out = run_plugin_hook(scripted, transcript, "PreToolUse", tool_name="Bash", tool_input={"command": command})
    spec = out.get("hookSpecificOutput") or {}
    assert spec.get("permissionDecision") == "ask" and lost in spec.get("permissionDecisionReason", ""), out
    assert "undo with" not in json.dumps(out)


def test_a_delete_after_a_cd_inside_the_project_still_gets_its_undo(scripted: Path, transcript: Path) -> None:
    _, out = run_plugin_hook(scripted, transcript, "PreToolUse", tool_name="Bash", tool_input={"command": "cd src && rm -rf pkg"})
    assert "undo with: agentsnap-claude-code restore " in out.get("systemMessage", ""), out
