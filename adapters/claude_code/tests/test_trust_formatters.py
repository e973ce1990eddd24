"""Formatters and the task runners that run them get a snapshot before they rewrite the project.

Met as a user: an agent told "format the code and fix the lint" runs ``python -m black .``, ``pre-commit run -a``
or ``nox -s format``. Every one of them rewrote sources with no snapshot before: the matcher knew ``black .``
but not black run as a module (``python -m black``, the form pip-installed projects document), nor
``pre-commit`` (whose hooks - trailing-whitespace, end-of-file-fixer, black, ruff --fix - rewrite files), nor
the formatters of other languages (``rubocop -a``, ``dotnet format``, ``terraform fmt``, ``mvn spotless:apply``,
...); and the hook's quick path vouched for every ``nox``/``tox`` run as a test run, so ``nox -s blacken`` never
reached the matcher at all; nor did it read what ``just fmt``, ``pdm run format`` or ``hatch run lint:fmt`` run.
The sessions, recipes and scripts a project names are now read from its noxfile / tox.ini / justfile /
pyproject.toml and their commands judged by the same rules (as make recipes and package.json scripts already were).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
from agentsnap_claude_code.matcher import Matcher
from conftest import run_plugin_hook

QUICK = Path(__file__).parents[1] / "plugin" / "hooks" / "agentsnap_quick.py"
_spec = importlib.util.spec_from_file_location("agentsnap_quick_fmt", QUICK)
assert _spec and _spec.loader
quick = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(quick)

FORMATTING = [
    "python -m black .", "python3 -m isort src", "python3.11 -X dev -m ruff format .", "python -m pre_commit run -a",
    "pipx run black .", "pre-commit run --all-files", "pre-commit run -a", "pre-commit", "prek run --all-files",
    "pre-commit autoupdate", "ruff --fix .", "hatch fmt", "nbqa black notebooks", "jupyter nbconvert --inplace --to notebook a.ipynb",
    "jupyter nbconvert --clear-output a.ipynb", "nbstripout a.ipynb", "autoflake -i --remove-all-unused-imports src/app.py",
    "docformatter --in-place src/app.py", "pyupgrade --py311-plus src/app.py", "codespell -w src", "2to3 -w src",
    "cargo fix --allow-dirty", "cargo clippy --fix", "go fix ./...", "rubocop -A", "standardrb --fix", "dotnet format",
    "terraform fmt -recursive", "mix format", "deno fmt", "deno lint --fix", "zig fmt src", "gradle spotlessApply",
    "./gradlew :app:ktlintFormat", "mvn spotless:apply", "mvn com.spotify.fmt:fmt-maven-plugin:format",
    "npx @biomejs/biome check --write .", "biome format --write src", "php-cs-fixer fix src", "swiftformat .",
    "ktlint -F 'src/**/*.kt'", "sqlfluff fix models", "taplo fmt", "markdownlint --fix docs", "stylelint --fix 'src/**/*.css'",
    "djlint --reformat templates", "buf format -w",
]
CHECKING = [
    "python -m black --check .", "python -m pytest -q", "python -m pip list", "pre-commit --version", "pre-commit install",
    "ruff check .", "ruff format --check .", "hatch fmt --check", "cargo fmt --check", "cargo clippy", "rubocop",
    "dotnet format --verify-no-changes", "terraform fmt -check", "mix format --check-formatted", "deno fmt --check",
    "deno lint", "gradle test", "mvn verify", "biome check src", "php-cs-fixer fix --dry-run src", "swiftformat --lint .",
    "codespell src", "sqlfluff lint models", "taplo fmt --check", "jupyter nbconvert --to html a.ipynb", "nbqa mypy src",
]


@pytest.mark.parametrize("command", FORMATTING)
def test_a_formatter_or_fixer_gets_a_snapshot(tmp_path: Path, command: str) -> None:
    assert "formatter" in {f.rule for f in Matcher(cwd=str(tmp_path)).findings(command)}
    assert not quick.harmless_command(command)


@pytest.mark.parametrize("command", CHECKING)
def test_the_same_tools_checking_only_stay_harmless(tmp_path: Path, command: str) -> None:
    assert Matcher(cwd=str(tmp_path)).findings(command) == []


NOXFILE = '''\
import shutil

import nox

nox.options.sessions = ["tests", "lint"]
FILES = ["src", "noxfile.py"]


@nox.session(python=["3.11", "3.12"])
def tests(session):
    session.install("-e", ".")
    session.run("pytest", "-q", *session.posargs)


@nox.session
def lint(session):
    session.run("ruff", "check", *FILES)
    session.run("python", "-m", "black", "--check", *FILES)


@nox.session(name="format", default=False)
def format_(session):
    session.run("python", "-m", "black", *FILES)
    session.notify("lint")


@nox.session(default=False)
def blacken(session):
    _blacken(session)


def _blacken(session):
    session.run("ruff", "format", *FILES)


@nox.session(default=False)
def clean(session):
    shutil.rmtree("build", ignore_errors=True)
'''
TOX_INI = """\
[tox]
env_list = py311, lint

[testenv]
deps = pytest
commands =
    pytest {posargs:tests}

[testenv:lint]
commands = ruff check src
    black --check src

[testenv:fix]
commands =
    ruff check --fix src
    - black src

[testenv:py3{11,12}-docs]
commands = sphinx-build docs build/docs

[testenv:style]
commands = {[testenv:fix]commands}
"""


@pytest.fixture
def runners(tmp_path: Path) -> Path:
    (tmp_path / "noxfile.py").write_text(NOXFILE)
    (tmp_path / "tox.ini").write_text(TOX_INI)
    return tmp_path


@pytest.mark.parametrize(("command", "rule"), [
    ("nox -s format", "formatter"), ("nox --session=format", "formatter"), ("nox -s blacken", "formatter"),
    ("nox -s tests blacken", "formatter"), ("nox -k 'not tests'", "formatter"), ("uv run nox -s format", "formatter"),
    ("python -m nox -e format", "formatter"), ("nox -s clean", "script-delete"), ("tox -e fix", "formatter"),
    ("tox -e py311,fix", "formatter"), ("tox run -e fix", "formatter"), ("tox -e ALL", "formatter"),
    ("tox p -e fix", "formatter"), ("tox -e style", "formatter"),
])
def test_a_session_the_noxfile_or_tox_ini_names_is_judged_by_its_commands(runners: Path, command: str, rule: str) -> None:
    assert rule in {f.rule for f in Matcher(cwd=str(runners)).findings(command)}
    assert not quick.harmless_command(command)


@pytest.mark.parametrize("command", ["nox", "nox -s tests", "nox -s lint", "nox -s 'tests-3.11'", "nox -s 'tests(python=\"3.12\")'",
                                     "nox -l", "tox", "tox -e lint", "tox -e py311", "tox -l", "tox -e py311-docs"])
def test_sessions_that_only_test_or_check_take_no_snapshot(runners: Path, command: str) -> None:
    assert Matcher(cwd=str(runners)).findings(command) == []


def test_a_noxfile_that_does_not_parse_is_snapshotted_rather_than_judged_blind(tmp_path: Path) -> None:
    (tmp_path / "noxfile.py").write_text("def broken(:\n")
    assert {f.rule for f in Matcher(cwd=str(tmp_path)).findings("nox -s tests")} == {"unparsed"}


@pytest.mark.parametrize("command", ["nox -s format", "python -m black .", "pre-commit run --all-files"])
def test_the_plugin_hook_snapshots_before_formatting_and_the_undo_brings_the_sources_back(
        project: Path, transcript: Path, command: str) -> None:
    """Through the plugin's real hook command (hooks.json, JSON on stdin); the formatter's rewrite is done by hand
    (black is not installed here): every source file rewritten, as ``black .`` does to a project of another style."""
    (project / "noxfile.py").write_text(NOXFILE)
    sources = sorted(p for p in (project / "src").rglob("*.py"))
    before = {p: p.read_bytes() for p in sources}
    _, out = run_plugin_hook(project, transcript, "PreToolUse", tool_name="Bash", tool_input={"command": command})
    assert out.get("systemMessage", "").startswith("agentsnap: snapshot "), out  # before: no message, no snapshot
    undo = out["systemMessage"].split("undo with: ", 1)[1].split("   ", 1)[0]
    for p in sources:
        p.write_text(p.read_text().replace("'", '"') + "\n# reformatted\n")
    proc = subprocess.run(undo, shell=True, cwd=project, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert {p: p.read_bytes() for p in sources} == before


JUSTFILE = """\
set shell := ["bash", "-c"]
alias f := fmt

default: test

# run the tests
test:
    cargo test

fmt: lint
    cargo fmt
    @echo done

lint:
    cargo clippy

clean:
    -rm -rf target {{dir}}

gen:
    #!/usr/bin/env python3
    import shutil
    shutil.rmtree("gen")
"""
PYPROJECT = """\
[project]
name = "demo"

[tool.pdm.scripts]
lint = "ruff check ."
format = {cmd = ["black", "."]}
all = {composite = ["lint", "format"]}
test = "pytest"

[tool.hatch.envs.default.scripts]
test = "pytest {args}"
fmt = ["ruff format {args:.}", "ruff check --fix {args:.}"]
all = ["test", "fmt"]

[tool.hatch.envs.lint.scripts]
style = ["ruff check {args:.}", "black --check {args:.}"]
fmt = ["black {args:.}", "style"]
"""


@pytest.fixture
def recipes(tmp_path: Path) -> Path:
    (tmp_path / "justfile").write_text(JUSTFILE)
    (tmp_path / "pyproject.toml").write_text(PYPROJECT)
    return tmp_path


@pytest.mark.parametrize(("command", "rule"), [
    ("just fmt", "formatter"), ("just f", "formatter"), ("just clean", "rm"), ("just gen", "script-delete"),
    ("pdm run format", "formatter"), ("pdm run all", "formatter"), ("hatch run fmt", "formatter"), ("hatch run all", "formatter"),
    ("hatch run lint:fmt", "formatter"), ("hatch run black src", "formatter"),
])
def test_a_just_recipe_or_pyproject_script_is_judged_by_its_commands(recipes: Path, command: str, rule: str) -> None:
    assert rule in {f.rule for f in Matcher(cwd=str(recipes)).findings(command)}


@pytest.mark.parametrize("command", ["just", "just test", "just lint", "just --list", "just -n fmt", "pdm run lint",
                                     "pdm run test", "hatch run test", "hatch run lint:style", "rye run format"])
def test_recipes_and_scripts_that_only_test_or_check_take_no_snapshot(recipes: Path, command: str) -> None:
    assert Matcher(cwd=str(recipes)).findings(command) == []


@pytest.mark.parametrize(("name", "text", "command"), [
    ("pyproject.toml", "[tool.hatch]\nenvs = ['not', 'a', 'table']\n", "hatch run fmt"),
    ("pyproject.toml", "[tool.pdm]\nscripts = 3\n", "pdm run fmt"),
    ("tox.ini", "[tox]\nenv_list = fix\n[testenv:fix]\ncommands\n", "tox -e fix"),
])
def test_a_configuration_of_an_unforeseen_shape_never_breaks_the_hook(tmp_path: Path, name: str, text: str, command: str) -> None:
    (tmp_path / name).write_text(text)
    findings = Matcher(cwd=str(tmp_path)).findings(command)  # never raises
    assert all(f.rule == "unparsed" for f in findings)
