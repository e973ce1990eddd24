"""The 60-second tour: snapshot, edit, fork x3, restore, log - on the embedded store, offline.

Runs the real `agentsnap` CLI in a throw-away directory and prints each command it runs.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path


def sh(*args: str, cwd: Path) -> str:
    print(f"\n$ agentsnap {' '.join(args)}", flush=True)
    proc = subprocess.run([sys.executable, "-m", "agentsnap_core", *args], cwd=cwd, text=True, capture_output=True)
    print((proc.stdout + proc.stderr).rstrip(), flush=True)
    if proc.returncode != 0:
        raise SystemExit(f"demo step failed: agentsnap {' '.join(args)}")
    return proc.stdout.strip()


def main() -> None:
    base = Path(tempfile.mkdtemp(prefix="agentsnap-demo-"))
    work = base / "agent"
    work.mkdir()
    (work / "plan.md").write_text("# plan\n1. read the bug report\n2. write a fix\n")
    (work / "src").mkdir()
    (work / "src" / "app.py").write_text("def add(a, b):\n    return a - b  # bug\n")
    os.chmod(work / "src" / "app.py", 0o755)
    os.symlink("src/app.py", work / "entry.py")
    print(f"# a tiny agent workspace in {work}")

    sh("init", cwd=work)
    sh("trace", "add", "user", "please fix add()", cwd=work)
    first = sh("snapshot", "-m", "before the fix", cwd=work)

    (work / "src" / "app.py").write_text("def add(a, b):\n    return a + b\n")
    (work / "notes.txt").write_text("tried: flip the sign\n")
    (work / "plan.md").unlink()
    sh("trace", "add", "assistant", "flipped the sign in add()", cwd=work)
    sh("status", cwd=work)
    sh("diff", cwd=work)
    sh("snapshot", "-m", "attempt: flip the sign", cwd=work)

    sh("fork", first[:10], "-n", "3", "--worktrees", str(base / "forks"), cwd=work)
    for i in (1, 2, 3):
        (base / "forks" / f"attempt-{i}" / "src" / "app.py").write_text(
            f"def add(a, b):\n    return sum((a, b))  # variant {i}\n"
        )
        sh("snapshot", "-m", f"variant {i}", cwd=base / "forks" / f"attempt-{i}")

    restored = sh("restore", first[:10], cwd=work)
    assert (work / "plan.md").exists() and not (work / "notes.txt").exists(), "restore did not bring the tree back"
    print(f"# plan.md is back, notes.txt is gone ({restored})")
    sh("log", "--all", "--graph", cwd=work)
    sh("verify", cwd=work)
    shutil.rmtree(base)
    print("\ndemo finished: every step above ran against a real store on disk")


if __name__ == "__main__":
    main()
