"""Store size on disk, side by side in one run: agentsnap's store after `gc` vs git's `.git` after `git gc`.

For each tree (default: this Python's standard library, and 100k small generated files), on its own copy:
  agentsnap - Repo.init, one snapshot of the whole tree, `gc` (which packs small objects), then `du -sk .agentsnap`
  git       - git init, `git add -A && git commit`, `git gc`, then `du -sk .git`
Sizes are what `du -sk` reports (allocated blocks, so one-file-per-object overhead counts). The ratio is
agentsnap / git (lower is better; the target is <= 1.00x). The store before gc is shown too.

    python benchmarks/store_size_bench.py [--tree DIR ...] [--small N]
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import subprocess
import sysconfig
import tempfile
from pathlib import Path

from agentsnap_core import Repo

WORDS = ("def class return self value import from for in if else while try except with as yield lambda None True "
         "False data result items index name path config agent state message tool call snapshot store").split()


def du_kib(path: Path) -> int:
    return int(subprocess.run(["du", "-sk", str(path)], check=True, capture_output=True, text=True).stdout.split()[0])


def small_files_tree(root: Path, n: int, seed: int = 19) -> Path:
    """``n`` small text files (64 B - 2 KiB, source-like, each distinct) in 1,000 directories."""
    rng = random.Random(seed)
    for i in range(n):
        d = root / f"d{i % 1000:03d}"
        if i < 1000:
            d.mkdir(parents=True, exist_ok=True)
        lines = [f"# file {i}"]
        for _ in range(rng.randint(1, 40)):
            lines.append("    " * rng.randint(0, 3) + " ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 8))))
        (d / f"f{i}.py").write_text("\n".join(lines) + "\n")
    return root


def agentsnap_size(tree: Path, work: Path) -> tuple[int, int]:
    shutil.copytree(tree, work, symlinks=True)
    with Repo.init(work) as repo:
        repo.snapshot("size")
        before = du_kib(repo.store_dir)
        repo.gc(grace_seconds=0)
        assert repo.verify()["ok"]
        return before, du_kib(repo.store_dir)


def git_size(tree: Path, work: Path) -> int:
    shutil.copytree(tree, work, symlinks=True)
    env = {**os.environ, "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@b", "GIT_COMMITTER_NAME": "b",
           "GIT_COMMITTER_EMAIL": "b@b"}
    commit = ["git", "-c", "gc.auto=0", "commit", "-qm", "size"]  # no background auto-gc racing the real one
    for cmd in (["git", "init", "-q"], ["git", "add", "-A"], commit, ["git", "gc", "-q"]):
        done = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True)
        if done.returncode:
            raise SystemExit(f"{' '.join(cmd)} failed in {work}: {done.stderr.strip()}")
    return du_kib(work / ".git")


def measure(tree: Path, tmp: Path) -> dict[str, int]:
    if not (tree / "os.py").exists() or not (tree / "site-packages").exists():
        return _measure(tree, tmp)
    src = tmp / "stdlib"  # the standard library alone (7.7k files, 257 MB for 3.11), not what pip installed
    shutil.copytree(tree, src, symlinks=True, ignore=lambda d, names: ["site-packages"] if Path(d) == tree else [])
    try:
        return _measure(src, tmp)
    finally:
        shutil.rmtree(src, ignore_errors=True)


def _measure(tree: Path, tmp: Path) -> dict[str, int]:
    before, after = agentsnap_size(tree, tmp / "as")
    git = git_size(tree, tmp / "git")
    shutil.rmtree(tmp / "as", ignore_errors=True)
    shutil.rmtree(tmp / "git", ignore_errors=True)
    return {"data": du_kib(tree), "before gc": before, "agentsnap": after, "git": git}


def row(label: str, m: dict[str, int]) -> str:
    return (f"{label:<28}{m['data'] / 1024:>10.1f}{m['before gc'] / 1024:>12.1f}{m['agentsnap'] / 1024:>12.1f}"
            f"{m['git'] / 1024:>10.1f}{m['agentsnap'] / m['git']:>10.2f}x")


def header() -> str:
    return f"{'tree (MiB on disk)':<28}{'data':>10}{'before gc':>12}{'after gc':>12}{'git gc':>10}{'as/git':>11}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tree", type=Path, action="append", help="a tree to measure (default: the standard library)")
    ap.add_argument("--small", type=int, default=100_000, help="generated small files (0: none)")
    args = ap.parse_args()
    report(args.tree or [Path(sysconfig.get_paths()["stdlib"])], args.small)


def report(trees: list[Path], small: int) -> None:
    print(header(), flush=True)
    with tempfile.TemporaryDirectory(prefix="agentsnap-size-") as t:
        tmp = Path(t)
        for tree in trees:
            label = f"{tree.name} stdlib" if (tree / "os.py").exists() else tree.name
            print(row(label[:27], measure(tree, tmp)), flush=True)
        if small:
            gen = small_files_tree(tmp / "small", small)
            print(row(f"{small} small files", measure(gen, tmp)), flush=True)
    print("\nsizes are du -sk (allocated blocks); as/git = agentsnap store after gc / .git after git gc. Target <= 1.00x.")


if __name__ == "__main__":
    main()
