"""Try 12 fixes of a failing test at once and keep the best - offline, in a temp dir.

A tiny package has a wrong leap-year rule and a failing test. ``agentsnap fanout -n 12`` forks the
snapshot 12 ways; fork *i* applies candidate fix *i* (``AGENTSNAP_FORK_INDEX``), the score is the
number of tests that pass, and ``--merge best`` merges the winner back into ``main``.

    python examples/fanout_patches.py [--keep] [--backend ray --address HOST:PORT]
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

BUGGY = "    return year % 4 == 0\n"
FIXES = [
    "    return year % 4 == 0 and year % 100 != 0\n",
    "    return year % 400 == 0\n",
    "    return year % 4 == 0 or year % 400 == 0\n",
    "    return year % 2 == 0\n",
    "    return (year % 4 == 0 and year % 100 != 0) or year % 400 == 0\n",  # the right rule
    "    return year % 100 != 0\n",
    "    return False\n",
    "    return True\n",
    "    return year % 4 == 0 and year % 400 != 0\n",
    "    return year % 4 == 1\n",
    "    return not year % 4\n",
    BUGGY,
]
TESTS = """from leap import is_leap

def test_2024():
    assert is_leap(2024)

def test_2023():
    assert not is_leap(2023)

def test_1900():
    assert not is_leap(1900)

def test_2000():
    assert is_leap(2000)

def test_2100():
    assert not is_leap(2100)
"""
APPLY = """import os, pathlib
fix = pathlib.Path("fixes", os.environ["AGENTSNAP_FORK_INDEX"] + ".txt").read_text()
src = pathlib.Path("leap", "__init__.py")
src.write_text(src.read_text().replace(BUGGY, fix))
""".replace("BUGGY", repr(BUGGY))
COUNT_PASSED = """import subprocess, sys
out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"],
                     capture_output=True, text=True).stdout
print(sum(int(w) for w, nxt in zip(out.split(), out.split()[1:]) if nxt.startswith("passed")))
"""


def agentsnap(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([sys.executable, "-m", "agentsnap_core", *args], cwd=cwd, text=True, capture_output=True)
    print(f"$ agentsnap {' '.join(args)}\n{proc.stdout}{proc.stderr}", end="")
    if proc.returncode != 0:
        raise SystemExit(f"agentsnap {args[0]} exited with {proc.returncode}")
    return proc


def main(argv: list[str]) -> None:
    keep = "--keep" in argv
    extra = [a for a in argv if a != "--keep"]
    os.environ["PYTHONDONTWRITEBYTECODE"] = "1"  # no __pycache__ in the forks' trees
    top = Path(tempfile.mkdtemp(prefix="agentsnap-fanout-demo-"))
    work = top / "leap-pkg"
    try:
        (work / "leap").mkdir(parents=True)
        (work / "leap" / "__init__.py").write_text('"""Calendars."""\n\n\ndef is_leap(year):\n' + BUGGY)
        (work / "tests").mkdir()
        (work / "tests" / "test_leap.py").write_text(TESTS)
        (work / "fixes").mkdir()
        for i, fix in enumerate(FIXES, start=1):
            (work / "fixes" / f"{i}.txt").write_text(fix)
        (work / "apply_fix.py").write_text(APPLY)
        (work / "count_passed.py").write_text(COUNT_PASSED)
        agentsnap(work, "init")
        agentsnap(work, "snapshot", "-m", "two tests fail")
        agentsnap(work, "fanout", "-n", str(len(FIXES)), "--run", f"{sys.executable} apply_fix.py",
                  "--score", f"{sys.executable} count_passed.py", "--merge", "best", *extra)
        print("leap/__init__.py on main now:\n" + (work / "leap" / "__init__.py").read_text())
        tests = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"], cwd=work,
                               capture_output=True, text=True)
        print(tests.stdout.strip().splitlines()[-1])
        if tests.returncode != 0:
            raise SystemExit("the merged fix does not pass its tests")
        agentsnap(work, "log", "-n", "2")
    finally:
        if keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(top, ignore_errors=True)


if __name__ == "__main__":
    main(sys.argv[1:])
