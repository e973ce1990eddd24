"""Run LangGraph's own test suite against PFSaver: download the pinned sdist, extract its tests, run them.

    python adapters/langgraph/own_tests/run.py WORKDIR [--store embedded|postgres|both] [--pfsaver-only] [pytest args...]

``--pfsaver-only`` runs only the tests parametrized by a checkpointer (those that exercise PFSaver).

Needs the packages of the ``langgraph_own`` nox session (the sdist's ``test`` dependency group). Exit status:
pytest's (the first non-zero one when both stores run).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
LANGGRAPH = "1.2.22"


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: run.py WORKDIR [--store embedded|postgres|both] [--pfsaver-only] [pytest args...]", file=sys.stderr)
        return 2
    work = Path(argv[0]).resolve()
    rest = argv[1:]
    stores = ["embedded", "postgres"]
    only = "--pfsaver-only" in rest
    rest = [a for a in rest if a != "--pfsaver-only"]
    if rest[:1] == ["--store"]:
        choice = rest[1] if len(rest) > 1 else ""
        if choice not in ("embedded", "postgres", "both"):
            print(f"--store must be embedded, postgres or both, not {choice!r}", file=sys.stderr)
            return 2
        stores = stores if choice == "both" else [choice]
        rest = rest[2:]
    work.mkdir(parents=True, exist_ok=True)
    src = work / f"langgraph-{LANGGRAPH}"
    if not (src / "tests" / "conftest.py").exists():
        sdist = work / f"langgraph-{LANGGRAPH}.tar.gz"
        if not sdist.exists():
            subprocess.run(
                [sys.executable, "-m", "pip", "download", f"langgraph=={LANGGRAPH}", "--no-binary", ":all:", "--no-deps",
                 "-d", str(work)],
                check=True,
            )
        with tarfile.open(sdist) as tar:
            members = [m for m in tar.getmembers() if m.name.startswith(f"langgraph-{LANGGRAPH}/")
                       and (m.name.split("/")[1] in ("tests", "pyproject.toml"))]
            tar.extractall(work, members=members, filter="data")
    env = dict(os.environ, NO_DOCKER="true", PYTHONPATH=os.pathsep.join([str(HERE), str(src)]),
               PFSAVER_ONLY="1" if only else "0")
    status = 0
    for store in stores:
        env["PFSAVER_STORE"] = store
        print(f"== LangGraph {LANGGRAPH} tests on PFSaver, {store} store", flush=True)
        targets = [] if any(a.startswith("tests") for a in rest) else ["tests"]  # or the modules given
        cmd = [sys.executable, "-m", "pytest", "-p", "pfsaver_own", "-q", "-p", "no:cacheprovider", *targets, *rest]
        rc = subprocess.run(cmd, cwd=src, env=env).returncode
        status = status or rc
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
