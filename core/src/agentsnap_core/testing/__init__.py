"""The conformance kit every adapter runs (see docs/CONFORMANCE.md).

An adapter describes a small deterministic agent as an :class:`AdapterCase`; :func:`check_adapter`
then proves, against a real store:

``handles``              an installed plugin claims the object (``agentsnap_handles``);
``roundtrip``            capture -> store -> restore into a *fresh* object -> equal observation;
``restore_rewinds``      restoring into the *same*, since-advanced object rewinds it (catches no-op restores);
``fork_isolation``       two objects restored from one snapshot diverge without touching each other or the original;
``continue_equivalence`` a restored object continues exactly like an uninterrupted run;
``fresh_process``        a new Python process restores the snapshot and observes the same state;
``store_verify``         the store verifies clean afterwards.

:mod:`agentsnap_core.testing.broken` ships an adapter whose restore silently does nothing; the kit
must fail it (core's own tests check that).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentsnap_core.plugins import get_plugin_manager
from agentsnap_core.repository.repo import Repo

__all__ = ["AdapterCase", "CheckResult", "Report", "check_adapter", "assert_conformance", "registered_plugin"]


@dataclass
class AdapterCase:
    """A deterministic agent for the kit.

    Attributes:
        name: shown in reports.
        make: returns a fresh agent object (the same initial state every time).
        step: advances an agent by one step ``i`` (must change what ``observe`` returns).
        observe: a JSON-serialisable view of everything a restore must bring back.
        factory: ``"module:function"`` returning this case, for the fresh-process check.
        steps: steps taken before the snapshot.
    """

    name: str
    make: Callable[[], Any]
    step: Callable[[Any, int], Any]
    observe: Callable[[Any], Any]
    factory: str | None = None
    steps: int = 2


@dataclass
class CheckResult:
    name: str
    passed: bool
    detail: str = ""


@dataclass
class Report:
    adapter: str
    results: list[CheckResult] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return bool(self.results) and all(r.passed for r in self.results)

    def failed(self) -> list[str]:
        return [r.name for r in self.results if not r.passed]

    def to_dict(self) -> dict[str, Any]:
        return {"adapter": self.adapter, "passed": self.passed, "results": [r.__dict__ for r in self.results]}

    def __str__(self) -> str:
        lines = [f"conformance of {self.adapter}: {'PASSED' if self.passed else 'FAILED'}"]
        lines += [f"  {'ok  ' if r.passed else 'FAIL'} {r.name}{': ' + r.detail if r.detail else ''}" for r in self.results]
        return "\n".join(lines)


def _view(case: AdapterCase, obj: Any) -> str:
    return json.dumps(case.observe(obj), default=repr)  # (order kept: a restore must give dicts back in order)


def check_adapter(case: AdapterCase, workdir: str | os.PathLike[str] | None = None) -> Report:
    """Run every check; never raises for an adapter failure (it is recorded in the report)."""
    report = Report(case.name)
    tmp = None
    if workdir is None:
        tmp = tempfile.TemporaryDirectory(prefix="agentsnap-conformance-")
        workdir = tmp.name
    root = Path(workdir) / "repo"
    repo = Repo.init(root)
    try:
        _run_checks(case, repo, report)
    finally:
        repo.close()
        if tmp is not None:
            tmp.cleanup()
    return report


def _check(report: Report, name: str) -> Callable[[Callable[[], str | None]], None]:
    def run(fn: Callable[[], str | None]) -> None:
        try:
            problem = fn()
        except Exception as exc:  # an adapter bug is a failed check, not a crash of the kit
            problem = f"{type(exc).__name__}: {exc}"
        report.results.append(CheckResult(name, problem is None, problem or ""))

    return run


def _run_checks(case: AdapterCase, repo: Repo, report: Report) -> None:
    pm = get_plugin_manager()
    agent = case.make()
    for i in range(case.steps):
        case.step(agent, i)
    at_snapshot = _view(case, agent)
    state: dict[str, Any] = {}

    @_check(report, "handles")
    def _() -> str | None:
        name = pm.hook.agentsnap_handles(obj=agent)
        return None if name else f"no plugin claims {type(agent).__name__}"

    @_check(report, "roundtrip")
    def _() -> str | None:
        state["snap"] = repo.capture(agent, f"conformance {case.name}")
        fresh = case.make()
        if _view(case, fresh) == at_snapshot:
            return "make() returns an object already equal to the snapshot; the check would prove nothing"
        repo.restore_into(fresh, state["snap"].id)
        got = _view(case, fresh)
        return None if got == at_snapshot else f"restored {got[:200]} != captured {at_snapshot[:200]}"

    snap = state.get("snap")
    if snap is None:
        return

    @_check(report, "restore_rewinds")
    def _() -> str | None:
        case.step(agent, case.steps)
        if _view(case, agent) == at_snapshot:
            return "step() did not change the observed state"
        repo.restore_into(agent, snap.id)
        got = _view(case, agent)
        return None if got == at_snapshot else f"after restore {got[:200]} != snapshot {at_snapshot[:200]}"

    @_check(report, "fork_isolation")
    def _() -> str | None:
        a, b = case.make(), case.make()
        repo.restore_into(a, snap.id)
        repo.restore_into(b, snap.id)
        case.step(a, case.steps)
        if _view(case, b) != at_snapshot:
            return "stepping fork A changed fork B"
        if _view(case, a) == at_snapshot:
            return "fork A did not advance"
        again = case.make()
        repo.restore_into(again, snap.id)
        return None if _view(case, again) == at_snapshot else "the snapshot changed after a fork advanced"

    @_check(report, "continue_equivalence")
    def _() -> str | None:
        straight = case.make()
        for i in range(case.steps + 1):
            case.step(straight, i)
        resumed = case.make()
        repo.restore_into(resumed, snap.id)
        case.step(resumed, case.steps)
        a, b = _view(case, resumed), _view(case, straight)
        return None if a == b else f"resumed {a[:200]} != uninterrupted {b[:200]}"

    @_check(report, "fresh_process")
    def _() -> str | None:
        if not case.factory:
            return "no factory given: set AdapterCase.factory to 'module:function'"
        code = (
            "import json, sys, importlib\n"
            "from agentsnap_core import Repo\n"
            "mod, fn = sys.argv[1].split(':')\n"
            "case = getattr(importlib.import_module(mod), fn)()\n"
            "repo = Repo.open(sys.argv[2])\n"
            "obj = case.make()\n"
            "repo.restore_into(obj, sys.argv[3])\n"
            "print('AGENTSNAP-OBSERVED ' + json.dumps(case.observe(obj), default=repr))\n"
        )
        proc = subprocess.run(
            [sys.executable, "-c", code, case.factory, str(repo.root), snap.id],
            capture_output=True,
            text=True,
            timeout=600,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)},
        )
        if proc.returncode != 0:
            return f"child exited {proc.returncode}: {proc.stderr.strip()[-400:]}"
        line = [x for x in proc.stdout.splitlines() if x.startswith("AGENTSNAP-OBSERVED ")]
        got = line[-1][len("AGENTSNAP-OBSERVED ") :] if line else ""
        return None if got == at_snapshot else f"fresh process saw {got[:200]} != {at_snapshot[:200]}"

    @_check(report, "store_verify")
    def _() -> str | None:
        rep = repo.verify()
        return None if rep["ok"] else f"verify found {rep['problems'][:3]}"


def assert_conformance(case: AdapterCase, workdir: str | os.PathLike[str] | None = None) -> Report:
    """Run the kit and raise ``AssertionError`` with the report when any check fails."""
    report = check_adapter(case, workdir)
    assert report.passed, str(report)
    return report


@contextmanager
def registered_plugin(plugin: object, name: str | None = None) -> Iterator[object]:
    """Register a plugin for the duration of a block (tests); always unregistered afterwards."""
    pm = get_plugin_manager()
    pm.register(plugin, name=name)
    try:
        yield plugin
    finally:
        pm.unregister(plugin)
