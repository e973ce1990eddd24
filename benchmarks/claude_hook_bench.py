"""Per-hook cost of the Claude Code plugin, as ratios to its peers measured in the same run.

* harmless call (PreToolUse of `ls -la src && git status`): the plugin's hook command (hooks.json: `sh agentsnap-hook`, then
  `python -S plugin/hooks/agentsnap_quick.py`) vs the bare interpreter start `python3 -c pass`;
* a harmless call the shortcut does not vouch for (`make test`: the full stdlib matcher decides) vs the same;
* snapshotting call (PreToolUse of `rm -rf build` after one file changed): the same hook vs
  `git add -A && git commit` of the same change in a copy of the project.

Wall time and CPU time (user + system of the child processes), median of --runs. Run inside the
claude_code session's venv (its bin/ must hold agentsnap-claude-code-hook):

    .nox/claude_code-plugin/bin/python benchmarks/claude_hook_bench.py [--files 2000] [--runs 15]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PLUGIN = ROOT / "adapters" / "claude_code" / "plugin"


def _timed(cmd: list[str] | str, *, stdin: str = "", env: dict[str, str], cwd: Path) -> tuple[float, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(cmd, input=stdin, text=True, env=env, cwd=cwd, shell=isinstance(cmd, str), check=True, capture_output=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall * 1000, cpu * 1000


def _project(base: Path, files: int) -> Path:
    root = base / "project"
    for i in range(files):
        p = root / "src" / f"pkg{i % 40}" / f"mod{i}.py"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(f"# module {i}\n" + f"def f(x):\n    return x + {i}\n" * 20)
    (root / "build").mkdir()
    (root / "build" / "out.txt").write_text("built\n")
    git = ["git", "-C", str(root), "-c", "user.name=b", "-c", "user.email=b@example.com"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "init"], check=True)
    return root


def _payload(root: Path, command: str, i: int) -> str:
    return json.dumps({"session_id": "bench", "transcript_path": "", "cwd": str(root), "permission_mode": "default",
                       "hook_event_name": "PreToolUse", "tool_name": "Bash", "tool_input": {"command": command}, "tool_use_id": f"toolu_{i}"})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--files", type=int, default=2000)
    ap.add_argument("--runs", type=int, default=15)
    args = ap.parse_args()
    bindir = Path(sys.executable).parent
    if not (bindir / "agentsnap-claude-code-hook").exists():
        sys.exit("run with the claude_code session's python (its bin/ has agentsnap-claude-code-hook)")
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        home = base / "home"
        home.mkdir()
        env = {**os.environ, "HOME": str(home), "PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}", "CLAUDE_PLUGIN_ROOT": str(PLUGIN)}
        env.pop("XDG_DATA_HOME", None)
        env.pop("PYTHONDONTWRITEBYTECODE", None)  # an installed package has its .pyc files; measure that, not recompiles
        hook = f'sh "{PLUGIN}/hooks/agentsnap-hook" PreToolUse'
        root = _project(base, args.files)
        peer = base / "peer"
        shutil.copytree(root, peer, symlinks=True)
        _timed(hook, stdin=_payload(root, "rm -rf build", 0), env=env, cwd=root)  # the first snapshot (store creation, .pyc files)
        _timed(hook, stdin=_payload(root, "ls", 0), env=env, cwd=root)
        rows: dict[str, list[tuple[float, float]]] = {
            "harmless hook": [], "unlisted harmless hook": [], "python3 -c pass": [], "snapshotting hook": [], "git add -A && git commit": []
        }
        load_before = os.getloadavg()
        for i in range(1, args.runs + 1):
            rows["harmless hook"].append(_timed(hook, stdin=_payload(root, "ls -la src && git status", i), env=env, cwd=root))
            rows["unlisted harmless hook"].append(_timed(hook, stdin=_payload(root, "make test", i), env=env, cwd=root))
            rows["python3 -c pass"].append(_timed([sys.executable, "-c", "pass"], env=env, cwd=root))
            for tree in (root, peer):
                (tree / "src" / "pkg1" / "mod1.py").write_text(f"# changed {i}\n")
            rows["snapshotting hook"].append(_timed(hook, stdin=_payload(root, "rm -rf build", i), env=env, cwd=root))
            rows["git add -A && git commit"].append(
                _timed(f"git add -A && git -c user.name=b -c user.email=b@example.com commit -qm 'change {i}'", env=env, cwd=peer)
            )
    med = {k: (statistics.median(w for w, _ in v), statistics.median(c for _, c in v)) for k, v in rows.items()}
    load_after = os.getloadavg()
    print(f"{args.files} files, median of {args.runs} runs (wall ms / CPU ms); load average {load_before[0]:.2f} before, {load_after[0]:.2f} after\n")
    print("| call | plugin hook | peer | wall ratio | CPU ratio |")
    print("|---|---|---|---|---|")
    for mine, peer_name in (("harmless hook", "python3 -c pass"), ("unlisted harmless hook", "python3 -c pass"), ("snapshotting hook", "git add -A && git commit")):
        (w, c), (pw, pc) = med[mine], med[peer_name]
        print(f"| {mine} vs {peer_name} | {w:.0f} / {c:.0f} | {pw:.0f} / {pc:.0f} | {w / pw:.2f}x | {c / pc:.2f}x |")


if __name__ == "__main__":
    main()
