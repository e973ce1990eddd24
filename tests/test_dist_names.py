"""Dependency confusion: every `agentsnap*` name our packages depend on is a distribution this repository builds.

PyPI's `agentsnap` is an unrelated project (its own `agentsnap` import package, console script and pytest plugin):
a requirement on it, or on any other `agentsnap-*` name we do not build, would install someone else's code.
`nox -s dist` checks the built wheels the same way and installs each adapter alone from our wheels + the index.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from dist_check import dist_name, foreign_requirements, packages, pyproject_requirements  # noqa: E402
from packaging.utils import canonicalize_name  # noqa: E402


def ours() -> set[str]:
    return {canonicalize_name(dist_name(p)) for p in packages()}


def test_every_agentsnap_dependency_is_a_distribution_we_build() -> None:
    reqs = {str(p / "pyproject.toml"): pyproject_requirements(p) for p in packages()}
    assert any("agentsnap-core" in r for lines in reqs.values() for r in lines)  # the adapters do depend on core
    assert foreign_requirements(reqs, ours()) == []


def test_the_check_names_a_requirement_on_the_public_agentsnap_project() -> None:
    planted = {"adapters/x/pyproject.toml": ["agentsnap>=0.1,<0.2", "agentsnap-core[postgres]>=0.1", "agentsnap-nosuch"]}
    problems = foreign_requirements(planted, ours())
    assert len(problems) == 2 and "agentsnap<0.2,>=0.1" in problems[0] and "agentsnap-nosuch" in problems[1]


def test_core_is_not_named_like_the_public_project() -> None:
    assert dist_name(packages()[0]) == "agentsnap-core"
    assert (packages()[0] / "src" / "agentsnap_core" / "__init__.py").exists()
    assert not (packages()[0] / "src" / "agentsnap").exists()  # would be shadowed by / shadow PyPI's agentsnap
