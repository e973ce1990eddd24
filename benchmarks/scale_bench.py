"""Scaling benchmark: does an incremental snapshot cost the same on a 10k-file and a 100k-file tree? (issue 19)

The issue's target: "cost of an incremental snapshot flat from 10k to 100k files apart from the metadata walk, and
that walk ... skipped for untouched directories (an inotify/fanotify monitor like git's fsmonitor)". The resident
process's change journal (docs/CLI.md) skips the walk; this measures what is left. For each size, on generated
small source files (store_size_bench.small_files_tree, in 1,000 directories) and a git copy of the same tree,
process against process as cli_bench.py runs them (bytecode compiled, the resident process started once):
  unchanged   `agentsnap snapshot` (resident)   vs `git add -A && git commit --allow-empty`
  10 changed  the same after editing 10 files
  status      `agentsnap status` (resident)     vs `git status --porcelain`
and prints each tool's 100k / 10k ratio of the same step (1.00x = flat). Column "native": the resident runs again
through the native client (`agentsnap resident install-client`, cli_bench.py's copy), when this machine builds it.

    python benchmarks/scale_bench.py [--sizes 10000,100000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import cli_bench  # noqa: E402  (its process runner, resident process and edit helper)
from cli_bench import AGENTSNAP, NATIVE, edit, install_native, median, sh, start_resident, stop_resident  # noqa: E402
from store_size_bench import small_files_tree  # noqa: E402


def one_size(n: int, work: Path, repeat: int) -> dict[str, dict[str, float]]:
    tree = small_files_tree(work / f"src{n}", n)
    a, g = work / f"a{n}", work / f"g{n}"
    shutil.copytree(tree, a)
    shutil.copytree(tree, g)
    shutil.rmtree(tree)
    out: dict[str, dict[str, float]] = {"resident": {}, "native": {}, "git": {}}
    sh([*AGENTSNAP, "init"], a)
    sh([*AGENTSNAP, "snapshot", "-m", "first"], a, True)
    sh(["git", "init", "-q"], g)
    sh("git add -A && git commit -q -m first", g)
    for _ in range(2):  # the journal serves from the third command on a tree (docs/CLI.md)
        sh([*AGENTSNAP, "snapshot", "-m", "warm"], a, True)
    out["resident"]["unchanged"] = median([*AGENTSNAP, "snapshot", "-m", "same"], a, repeat, resident=True)
    if NATIVE:
        out["native"]["unchanged"] = median([*NATIVE, "snapshot", "-m", "same"], a, repeat, resident=True)
    out["git"]["unchanged"] = median("git add -A && git commit -q --allow-empty -m same", g, repeat)
    for tool, root, cmd in (("resident", a, [*AGENTSNAP, "snapshot", "-m", "ten"]),
                            ("native", a, [*NATIVE, "snapshot", "-m", "ten"]),
                            ("git", g, "git add -A && git commit -q -m ten")):
        if tool == "native" and not NATIVE:
            continue
        times = []
        for i in range(repeat):
            edit(root, 10, f"{tool}{i}")
            times.append(sh(cmd, root, tool != "git"))
        out[tool]["10 changed"] = statistics.median(times)
    out["resident"]["status"] = median([*AGENTSNAP, "status"], a, repeat, resident=True)
    if NATIVE:
        out["native"]["status"] = median([*NATIVE, "status"], a, repeat, resident=True)
    out["git"]["status"] = median(["git", "status", "--porcelain"], g, repeat)
    cli_bench.take_cpu()
    shutil.rmtree(a)
    shutil.rmtree(g)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="10000,100000")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    cli_bench.compile_bytecode()
    sizes = [int(x) for x in args.sizes.split(",")]
    load = os.getloadavg()
    print(f"machine: {os.cpu_count()} cores, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    results = {}
    with tempfile.TemporaryDirectory(prefix="agentsnap-scale-bench-") as tmp:
        start_resident(Path(tmp))
        install_native(Path(tmp))
        try:
            for n in sizes:
                results[n] = one_size(n, Path(tmp), args.repeat)
        finally:
            stop_resident()
    steps = ["unchanged", "10 changed", "status"]
    print(f"\nprocess vs process, median of {args.repeat}, ms (resident: AGENTSNAP_RESIDENT=1 with its change journal)")
    print(f"  {'files':>8} {'step':<12}{'resident':>10}{'native':>10}{'git':>10}{'res/git':>9}{'nat/git':>9}")
    for n in sizes:
        for step in steps:
            r, g = results[n]["resident"][step], results[n]["git"][step]
            nat = results[n]["native"].get(step)
            ncell = f"{nat * 1e3:>10.1f}" if nat else f"{'-':>10}"
            nratio = f"{nat / g:>8.2f}x" if nat else f"{'-':>9}"
            print(f"  {n:>8} {step:<12}{r * 1e3:>10.1f}{ncell}{g * 1e3:>10.1f}{r / g:>8.2f}x{nratio}")
    if len(sizes) >= 2:
        lo, hi = sizes[0], sizes[-1]
        print(f"\n  growth {hi} / {lo} files (1.00x = flat; target: flat apart from the metadata walk)")
        for step in steps:
            growth = {t: results[hi][t][step] / results[lo][t][step] for t in ("resident", "native", "git")
                      if step in results[hi][t]}
            nat = f"   native {growth['native']:>6.2f}x" if "native" in growth else ""
            print(f"  {step:<12} resident {growth['resident']:>6.2f}x{nat}   git {growth['git']:>6.2f}x")
    load = os.getloadavg()
    print(f"\nload average at the end {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")


if __name__ == "__main__":
    main()
