"""`nox -s dist` installs what this checkout builds, never an earlier build that uv kept in its cache.

uv caches a wheel found through `--find-links` by its name and version: after `agentsnap_core-0.1.0-py3-none-any.whl`
is rebuilt from other sources at the same path, a plain `uv pip install --find-links` installs the cached earlier
build. The CI runner keeps its uv cache between runs, so its `dist` session installed a core from before the layered
restructure (`agentsnap_core.defaults`, store format 1), whose README example then failed on the store this run made.
These tests build a tiny package twice under one name and version, with a cache of their own (`UV_CACHE_DIR`).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from dist_check import installed_not_built_here, uv_install  # noqa: E402

PYPROJECT = """[project]
name = "agentsnap-uvprobe"
version = "0.1.0"
[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"
[tool.hatch.build.targets.wheel]
packages = ["src/agentsnap_uvprobe"]
"""


@pytest.fixture
def probe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    monkeypatch.setenv("UV_CACHE_DIR", str(tmp_path / "uv-cache"))
    src = tmp_path / "src-tree"
    (src / "src" / "agentsnap_uvprobe").mkdir(parents=True)
    (src / "pyproject.toml").write_text(PYPROJECT)
    return {"src": src, "out": tmp_path / "wheels", "tmp": tmp_path}


def build(probe: dict[str, Path], build_id: str) -> None:
    (probe["src"] / "src" / "agentsnap_uvprobe" / "__init__.py").write_text(f"BUILD = {build_id!r}\n")
    for whl in probe["out"].glob("*.whl"):
        whl.unlink()
    subprocess.run(["uv", "build", "--quiet", "--wheel", "--out-dir", str(probe["out"]), str(probe["src"])], check=True)


def venv(probe: dict[str, Path], name: str) -> str:
    subprocess.run(["uv", "venv", "--quiet", "--python", sys.executable, str(probe["tmp"] / name)], check=True)
    return str(probe["tmp"] / name / "bin" / "python")


def installed_build(py: str) -> str:
    return subprocess.run([py, "-c", "import agentsnap_uvprobe as m; print(m.BUILD)"], capture_output=True,
                          text=True, check=True).stdout.strip()


def test_a_rebuilt_wheel_of_the_same_version_is_installed_not_the_cached_earlier_build(probe: dict[str, Path]) -> None:
    out = probe["out"]
    build(probe, "earlier")
    assert uv_install(venv(probe, "v1"), out, ["--find-links", str(out), "agentsnap-uvprobe"]).returncode == 0
    build(probe, "this checkout")
    py = venv(probe, "v2")
    assert uv_install(py, out, ["--find-links", str(out), "agentsnap-uvprobe"]).returncode == 0
    assert installed_build(py) == "this checkout"
    assert installed_not_built_here(py, out) == []


def test_installed_files_that_are_not_the_wheel_built_here_are_named(probe: dict[str, Path]) -> None:
    """What uv without a refresh does (a plain install after the rebuild), found by the check that follows it."""
    out = probe["out"]
    build(probe, "earlier")
    py = venv(probe, "v1")
    assert subprocess.run(["uv", "pip", "install", "--quiet", "--offline", "--python", py, "--find-links", str(out),
                           "agentsnap-uvprobe"]).returncode == 0
    build(probe, "this checkout")
    (problem,) = installed_not_built_here(py, out)
    assert "agentsnap-uvprobe 0.1.0: 1 installed files differ from agentsnap_uvprobe-0.1.0-py2.py3-none-any.whl built here" in problem
    assert "agentsnap_uvprobe/__init__.py" in problem
