"""Snapshot benchmark, side by side in one run: agentsnap vs `git add -A && git commit` vs processfork.

For each tool, on its own copy of the same tree (default: a site-packages directory):
  first      - the first snapshot of the whole tree
  unchanged  - a snapshot with nothing changed
  10 changed - a snapshot after editing 10 files
Each step runs --repeat times on fresh copies (first) or in place (others); the median is shown,
and ratios are agentsnap / peer (lower is better). agentsnap runs at production durability
(one fsync barrier per snapshot); git runs with its defaults.

    python benchmarks/run.py [--tree DIR] [--repeat N] [--no-processfork]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sysconfig
import tempfile
import time
from collections.abc import Callable
from pathlib import Path


def default_tree() -> Path:
    """This interpreter's site-packages (under `nox -s bench`: agentsnap + langgraph + processfork, ~7k files)."""
    return Path(sysconfig.get_paths()["purelib"])


def tree_stats(root: Path) -> tuple[int, int]:
    files = size = 0
    for dp, _dn, fn in os.walk(root):
        for f in fn:
            p = os.path.join(dp, f)
            if os.path.isfile(p) and not os.path.islink(p):
                files += 1
                size += os.path.getsize(p)
    return files, size


def edit_files(root: Path, n: int, round_: int) -> None:
    picked = []
    for dp, _dn, fn in os.walk(root):
        if ".agentsnap" in dp or ".git" in dp or ".pf" in dp:
            continue
        for f in sorted(fn):
            if f.endswith(".py"):
                picked.append(os.path.join(dp, f))
        if len(picked) >= 200:
            break
    for p in picked[:n]:
        with open(p, "a") as fh:
            fh.write(f"\n# benchmark edit {round_}\n")


def timed(fn: Callable[[], object]) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


class Agentsnap:
    name = "agentsnap"

    def __init__(self, root: Path) -> None:
        from agentsnap_core import Repo

        self.repo = Repo.init(root)

    def snapshot(self) -> None:
        self.repo.snapshot("bench")


class Git:
    name = "git"

    def __init__(self, root: Path) -> None:
        self.root = root
        env = {**os.environ, "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@x", "GIT_COMMITTER_NAME": "b", "GIT_COMMITTER_EMAIL": "b@x"}
        self.env = env
        subprocess.run(["git", "init", "-q", str(root)], check=True, env=env)

    def snapshot(self) -> None:
        subprocess.run("git add -A && git commit -q --allow-empty -m bench", shell=True, cwd=self.root, check=True, env=self.env)


class Processfork:
    name = "processfork"

    def __init__(self, root: Path) -> None:
        import processfork

        self.pf = processfork
        self.root = root
        self.store = processfork.PfStore.open(str(root.parent / (root.name + ".pfstore")))
        self.parent: list[str] = []

    def snapshot(self) -> None:
        cid = self.pf.snapshot_filesystem(self.store, "bench", str(self.root), dict(os.environ), [{"role": "user", "content": "hi"}], parents=self.parent or None)
        self.parent = [cid]


def bench_tool(cls: type, src: Path, work: Path, repeat: int) -> dict[str, float]:
    first, unchanged, changed = [], [], []
    for r in range(repeat):
        root = work / f"{cls.name}-{r}"
        shutil.copytree(src, root, symlinks=True)
        time.sleep(0.2)  # let the copy age past racy-clean windows (applies to every tool alike)
        tool = cls(root)
        first.append(timed(tool.snapshot))
        time.sleep(0.2)
        unchanged.append(timed(tool.snapshot))
        edit_files(root, 10, r)
        changed.append(timed(tool.snapshot))
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(root.parent / (root.name + ".pfstore"), ignore_errors=True)
    return {"first": statistics.median(first), "unchanged": statistics.median(unchanged), "10 changed": statistics.median(changed)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tree", type=Path, default=default_tree())
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--pf-repeat", type=int, default=1, help="processfork's first snapshot takes minutes; measure it fewer times")
    ap.add_argument("--no-processfork", action="store_true")
    ap.add_argument("--size-small", type=int, default=100_000,
                    help="store size rows (store_size_bench.py): the stdlib tree and this many small files; -1 skips")
    args = ap.parse_args()
    files, size = tree_stats(args.tree)
    print(f"tree: {args.tree} ({files} files, {size / 1e6:.0f} MB), {os.cpu_count()} cores, repeat {args.repeat}")
    tools: list[type] = [Agentsnap, Git]
    if not args.no_processfork:
        try:
            import processfork  # noqa: F401

            tools.append(Processfork)
        except ImportError:
            print("processfork not installed: pip install processfork==1.0.15 (nox -s bench does)")
    results = {}
    with tempfile.TemporaryDirectory(prefix="agentsnap-bench-") as tmp:
        for cls in tools:
            n = args.pf_repeat if cls is Processfork else args.repeat
            results[cls.name] = bench_tool(cls, args.tree, Path(tmp), n)
            print(f"  measured {cls.name}: " + ", ".join(f"{k} {v * 1000:.0f} ms" for k, v in results[cls.name].items()), flush=True)
    steps = ["first", "unchanged", "10 changed"]
    print()
    print(f"{'step':<12}" + "".join(f"{t.name:>14}" for t in tools) + "".join(f"{'as/' + t.name:>16}" for t in tools[1:]))
    for step in steps:
        row = f"{step:<12}" + "".join(f"{results[t.name][step] * 1000:>11.0f} ms" for t in tools)
        row += "".join(f"{results['agentsnap'][step] / results[t.name][step]:>15.2f}x" for t in tools[1:])
        print(row)
    print("\nratios are agentsnap time / peer time: below 1.00x agentsnap is faster. Targets: first <= 0.5x git, incremental <= 0.8x git.")
    if args.size_small >= 0:  # store size on disk after gc vs .git after git gc, same trees, same run
        import store_size_bench

        print()
        store_size_bench.report([Path(sysconfig.get_paths()["stdlib"])], args.size_small)


if __name__ == "__main__":
    main()
