"""Fork an agent 12 ways, let every attempt work, then merge them all back - offline, in a temp dir.

Each attempt runs in its own worktree (``agentsnap fork -n 12 --worktrees``), fills in its own line
of a shared report, writes its own result file, appends to its trace and records a state key.
The merges back into ``main`` are clean except one: attempts 11 and 12 both claim the report's
"winner" line. The demo shows the conflict (exit 1, markers), the three-way view, ``--abort``
restoring the tree byte for byte, and ``--continue`` after resolving it.

    python examples/fanout_merge_demo.py [--keep]
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from agentsnap_core import Repo

N = 12


def sh(cwd: Path, *args: str, expect: int = 0, quiet: bool = False) -> str:
    """Run the real CLI, print what it says, insist on the exit code."""
    proc = subprocess.run([sys.executable, "-m", "agentsnap_core", *args], cwd=cwd, text=True, capture_output=True)
    if not quiet:
        print(f"\n$ agentsnap {' '.join(args)}   # exit {proc.returncode}", flush=True)
        print((proc.stdout + proc.stderr).rstrip(), flush=True)
    if proc.returncode != expect:
        raise SystemExit(f"demo step failed (exit {proc.returncode}, wanted {expect}): agentsnap {' '.join(args)}\n"
                         + proc.stderr)
    return proc.stdout


def fingerprint(root: Path) -> str:
    h = hashlib.sha256()
    for dirpath, dirnames, filenames in sorted(os.walk(root)):
        dirnames[:] = sorted(d for d in dirnames if d != ".agentsnap")
        for name in sorted(filenames):
            p = Path(dirpath) / name
            if ".agentsnap" in p.relative_to(root).parts:
                continue
            h.update(str(p.relative_to(root)).encode() + b"\0" + p.read_bytes() + oct(p.stat().st_mode).encode())
    return h.hexdigest()


def report_line(i: int) -> str:
    # a blank line between entries: edits on adjacent lines conflict, as in git
    return f"- attempt {i}: pending\n\n"


def main() -> None:
    keep = "--keep" in sys.argv
    base = Path(tempfile.mkdtemp(prefix="agentsnap-fanout-"))
    work = base / "agent"
    work.mkdir()
    try:
        (work / "report.md").write_text("# report\nwinner: undecided\n\n" + "".join(report_line(i) for i in range(1, N + 1)))
        repo = Repo.init(work)
        repo.append_message("user", "find the fastest sort for our data; try 12 ideas in parallel")
        repo.snapshot("task", layers={"state": {"task": "sort", "tried": {}}})
        print(f"# workspace {work}")

        sh(work, "fork", "-n", str(N), "--worktrees", str(base / "forks"))
        for i in range(1, N + 1):  # each attempt: an agent working in its own worktree
            wt = base / "forks" / f"attempt-{i}"
            r = Repo.open(wt)
            text = (wt / "report.md").read_text().replace(report_line(i), f"- attempt {i}: {100 + 7 * i} ms\n\n")
            if i in (11, 12):
                text = text.replace("winner: undecided", f"winner: attempt {i}")
            (wt / "report.md").write_text(text)
            (wt / "results").mkdir(exist_ok=True)
            (wt / "results" / f"attempt-{i}.txt").write_text(f"idea {i}: timing {100 + 7 * i} ms\n")
            r.append_message("assistant", f"attempt {i}: measured {100 + 7 * i} ms")
            state = r.read_layer("HEAD", "state")
            state["tried"][f"idea-{i}"] = 100 + 7 * i
            r.snapshot(f"attempt {i} done", layers={"state": state})
            r.close()
        print(f"\n# {N} attempts finished in {base / 'forks'}")

        merged, conflicted = 0, []
        for i in range(1, N + 1):
            out = sh(work, "merge", f"attempt-{i}", expect=1 if i == 12 else 0, quiet=i not in (1, 2, 12))
            if i == 12:
                conflicted.append(i)
                assert "<<<<<<< main" in (work / "report.md").read_text()
                break
            merged += 1
            assert "merged" in out or "fast-forward" in out

        sh(work, "diff", "--conflict", "report.md")
        sh(work, "merge", "--abort")
        assert fingerprint(work) == fingerprint_after_reset(work, repo), "abort must restore the tree exactly"
        sh(work, "merge", "attempt-12", expect=1, quiet=True)
        text = (work / "report.md").read_text()
        lines = text.splitlines(keepends=True)
        start = next(k for k, line in enumerate(lines) if line.startswith("<<<<<<<"))
        end = next(k for k, line in enumerate(lines) if line.startswith(">>>>>>>"))
        lines[start : end + 1] = ["winner: attempt 11 (attempt 12 was close)\n"]
        (work / "report.md").write_text("".join(lines))
        sh(work, "merge", "--continue", "-m", "merge attempt-12 (resolved the winner line)")
        merged += 1

        final = Repo.open(work)
        head = final.get("HEAD")
        report = (work / "report.md").read_text()
        done = sum(f"- attempt {i}: {100 + 7 * i} ms" in report for i in range(1, N + 1))
        results = sorted(p.name for p in (work / "results").iterdir())
        state = final.read_layer(head, "state")
        trace = final.read_layer(head, "trace")
        verify = final.verify()
        sh(work, "log", "--graph", "-n", "8")
        print("\n| check | value |\n|---|---|")
        for k, v in (
            ("attempts merged", f"{merged}/{N}"),
            ("conflicts (resolved by hand)", len(conflicted)),
            ("report lines filled", f"{done}/{N}"),
            ("result files", len(results)),
            ("state keys merged", len(state["tried"])),
            ("trace messages", len(trace)),
            ("HEAD parents", len(head.parents)),
            ("verify", "ok" if verify["ok"] else verify["problems"]),
        ):
            print(f"| {k} | {v} |")
        ok = (merged == N and done == N and len(results) == N and len(state["tried"]) == N
              and len(head.parents) == 2 and verify["ok"])
        final.close()
        repo.close()
        if not ok:
            raise SystemExit("fan-out merge demo: something did not come back")
        print("\nall 12 attempts merged back")
    finally:
        if keep:
            print(f"(kept {base})")
        else:
            shutil.rmtree(base, ignore_errors=True)


def fingerprint_after_reset(work: Path, repo: Repo) -> str:
    """The fingerprint of HEAD's world materialised in a fresh directory (what abort must give back)."""
    dest = work.parent / "check-abort"
    repo.restore("HEAD", to=dest)
    try:
        return fingerprint(dest)
    finally:
        shutil.rmtree(dest, ignore_errors=True)


if __name__ == "__main__":
    main()
