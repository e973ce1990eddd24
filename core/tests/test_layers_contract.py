"""The core's layers (format < stores < plugins < layers < repository < operations < interfaces) are enforced by
import-linter's layers contract in core/pyproject.toml, which `nox -s lint` runs. These tests run that contract on a
copy of the package: it holds on the real tree and is broken by one planted upward import (function-local too)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

CORE = Path(__file__).resolve().parents[1]
PACKAGE = CORE / "src" / "agentsnap_core"
LINT_IMPORTS = shutil.which("lint-imports", path=str(Path(sys.executable).parent))


def _lint(copy_root: Path) -> subprocess.CompletedProcess[str]:
    if LINT_IMPORTS is None:
        if os.environ.get("CI") == "true":
            pytest.fail("import-linter is not installed in this session (core[test] installs it)")
        pytest.skip("import-linter is not installed")
    env = {**os.environ, "PYTHONPATH": str(copy_root)}  # the copy comes before the installed package
    return subprocess.run([LINT_IMPORTS, "--config", str(CORE / "pyproject.toml"), "--no-cache"],
                          cwd=copy_root, env=env, capture_output=True, text=True, timeout=300)


@pytest.fixture
def package_copy(tmp_path: Path) -> Path:
    shutil.copytree(PACKAGE, tmp_path / "agentsnap_core", ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path


def test_the_layers_contract_holds_on_the_core(package_copy: Path) -> None:
    result = _lint(package_copy)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 kept, 0 broken" in result.stdout


@pytest.mark.parametrize(
    ("module", "upward"),
    [
        ("format/objects.py", "    from agentsnap_core.repository.repo import Repo  # planted\n"),
        ("stores/local.py", "from agentsnap_core.layers import world  # planted\n"),
        ("repository/repo.py", "from agentsnap_core.cli import main  # planted\n"),
    ],
    ids=["function-local format->repository", "stores->layers", "repository->interfaces"],
)
def test_a_planted_upward_import_breaks_the_contract(package_copy: Path, module: str, upward: str) -> None:
    path = package_copy / "agentsnap_core" / module
    text = path.read_text()
    if upward.startswith("    "):  # inside a function: import-linter counts function-local imports too
        text += "\n\ndef _planted() -> object:\n" + upward + "    return Repo\n"
    else:
        text += "\n" + upward
    path.write_text(text)
    result = _lint(package_copy)
    assert result.returncode != 0, result.stdout
    assert "BROKEN" in result.stdout and "planted" not in result.stderr
    target = upward.split("from ", 1)[1].split(" import")[0]
    assert target in result.stdout  # the report names the upward import


def test_old_flat_module_paths_still_import_the_same_modules() -> None:
    """0.1's flat module names (named in docs and user code) keep working for one release, as the very same module
    objects (so monkeypatching through the old name still reaches the code)."""
    import importlib

    import agentsnap_core

    for old, new in agentsnap_core.MOVED_MODULES.items():
        assert importlib.import_module(f"agentsnap_core.{old}") is importlib.import_module(f"agentsnap_core.{new}"), old
    from agentsnap_core.repo import Repo
    from agentsnap_core.store import ANY

    assert Repo is agentsnap_core.Repo and ANY == "*any*"
    assert callable(agentsnap_core.rollback) and not isinstance(agentsnap_core.rollback, type(agentsnap_core))


def test_old_paths_resolve_in_a_fresh_process() -> None:
    code = ("import agentsnap_core.effects_ledger as a, agentsnap_core.layers.effects_ledger as b; assert a is b; "
            "from agentsnap_core import merge_cli, redact; print(merge_cli.__name__, redact.__name__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["agentsnap_core.cli.merge", "agentsnap_core.layers.redact"]
