"""Per-hook cost of the Claude Code plugin, as ratios to its peers measured in the same run.

* harmless call (PreToolUse of `ls -la src && git status`): the plugin's hook command (hooks.json: `sh agentsnap-hook`, then
  `python -S plugin/hooks/agentsnap_quick.py`) vs the bare interpreter start `python3 -c pass`;
* `make test` (on the quick script's list since the helper change) vs the same;
* a harmless call the quick script does not know (`docker compose ps`): answered by the plugin's warm helper
  process, and without it (the full stdlib matcher in the hook's own Python) vs the same;
* snapshotting call (PreToolUse of `rm -rf build` after one file changed): the same hook vs
  `git add -A && git commit` of the same change in a copy of the project; once with the plugin's warm helper
  process (agentsnap_claude_code.daemon, started by the first call that needed it, as in a session) and once
  without it (AGENTSNAP_HOOK_DAEMON=0: the in-process path every call takes when no helper answers).
* the snapshotting rows are also shown against git at the hook's durability (`-c core.fsync=committed`: git 2.36+
  fsyncs no object and no ref by default; a snapshot returns with its pack, index row and ref on disk), on its own
  copy of the project: peer "git+fsync";
* rows "native client": the same hook with the native hook client (`agentsnap-claude-code install-client`, built
  here with cc into a copy of the script, first on PATH): every call goes to the helper without starting Python.

Wall time and CPU time (user + system of the child processes), median of --runs. The helper is not a child
of the benchmark: its CPU time (with its children's) is read from /proc/<pid>/stat (clock ticks, 10 ms) and its mean per call is
added to the hook's median CPU (rows served by it say "+ helper"). Run inside the
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
#: git at the hook's durability: what a commit writes is fsynced before it returns (git 2.36+; see cli_bench.py)
GIT_FSYNC = "git -c core.fsync=committed -c core.fsyncMethod=fsync"
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


def _helper_ticks(pid: int | None) -> int:
    """utime + stime of the helper process and of its finished children (git) in clock ticks (0 when there is none)."""
    if pid is None:
        return 0
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()  # fields[0] is field 3 (state)
    except OSError:
        return 0
    return sum(int(f) for f in fields[11:15])  # utime, stime, cutime, cstime


def _helper_pid(run_dir: Path) -> int | None:
    for lock in run_dir.glob("*.sock.lock"):
        text = lock.read_text().strip()
        if text.isdigit() and Path(f"/proc/{text}").exists():
            return int(text)
    return None


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
        run_dir = base / "run"
        env = {**os.environ, "HOME": str(home), "PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}", "CLAUDE_PLUGIN_ROOT": str(PLUGIN),
               "AGENTSNAP_HOOK_RUN_DIR": str(run_dir), "AGENTSNAP_HOOK_IDLE": "300"}
        env.pop("XDG_DATA_HOME", None)
        env.pop("AGENTSNAP_HOOK_DAEMON", None)
        env.pop("PYTHONDONTWRITEBYTECODE", None)  # an installed package has its .pyc files; measure that, not recompiles
        cold = {**env, "AGENTSNAP_HOOK_DAEMON": "0"}
        hook = f'sh "{PLUGIN}/hooks/agentsnap-hook" PreToolUse'
        root = _project(base, args.files)
        peer = base / "peer"
        shutil.copytree(root, peer, symlinks=True)
        peer_fsync = base / "peer-fsync"
        shutil.copytree(root, peer_fsync, symlinks=True)
        _timed(hook, stdin=_payload(root, "rm -rf build", 0), env=env, cwd=root)  # the first snapshot (store creation, .pyc files); starts the helper
        deadline = time.monotonic() + 30
        while (pid := _helper_pid(run_dir)) is None or not any(run_dir.glob("*.sock")):
            if time.monotonic() > deadline:
                sys.exit("the plugin's helper process did not start")
            time.sleep(0.1)
        _timed(hook, stdin=_payload(root, "ls", 0), env=env, cwd=root)
        native_bin = base / "native-bin"
        native_bin.mkdir()
        shutil.copy2(bindir / "agentsnap-claude-code-hook", native_bin / "agentsnap-claude-code-hook")
        built = subprocess.run([str(bindir / "agentsnap-claude-code"), "install-client", "--at",
                                str(native_bin / "agentsnap-claude-code-hook")], capture_output=True, text=True)
        native = {**env, "PATH": f"{native_bin}{os.pathsep}{env['PATH']}"} if built.returncode == 0 else None
        if native is None:
            print(f"the native hook client did not build ({built.stderr.strip()[-300:]}): its rows are left out")
        names = ("harmless hook", "make test hook", "unlisted harmless hook + helper", "unlisted harmless hook, no helper", "python3 -c pass", "snapshotting hook + helper", "snapshotting hook, no helper",
                 "git add -A && git commit", "git+fsync", "harmless hook, native client",
                 "snapshotting hook + helper, native client")
        rows: dict[str, list[tuple[float, float]]] = {k: [] for k in names}
        helper_cpu: dict[str, list[float]] = {k: [] for k in names}

        def timed(name: str, cmd: list[str] | str, *, stdin: str = "", env: dict[str, str], cwd: Path) -> None:
            t0 = _helper_ticks(pid)
            rows[name].append(_timed(cmd, stdin=stdin, env=env, cwd=cwd))
            helper_cpu[name].append((_helper_ticks(pid) - t0) * 1000 / os.sysconf("SC_CLK_TCK"))

        load_before = os.getloadavg()
        for i in range(1, args.runs + 1):
            timed("harmless hook", hook, stdin=_payload(root, "ls -la src && git status", i), env=env, cwd=root)
            timed("make test hook", hook, stdin=_payload(root, "make test", i), env=env, cwd=root)
            timed("unlisted harmless hook + helper", hook, stdin=_payload(root, "docker compose ps", i), env=env, cwd=root)
            timed("unlisted harmless hook, no helper", hook, stdin=_payload(root, "docker compose ps", i), env=cold, cwd=root)
            timed("python3 -c pass", [sys.executable, "-c", "pass"], env=env, cwd=root)
            if native is not None:
                timed("harmless hook, native client", hook, stdin=_payload(root, "ls -la src && git status", i), env=native,
                      cwd=root)
        # the snapshotting calls: all of the helper's in a row, then all of the in-process path's, as in a session
        # (which has the one or the other): an in-process snapshot leaves a stat cache the helper's change journal
        # cannot vouch for, so alternating them would make every helper call walk the whole tree
        for name, hook_env in (("snapshotting hook + helper", env), ("snapshotting hook + helper, native client", native),
                               ("snapshotting hook, no helper", cold)):
            if hook_env is None:
                continue
            for i in range(1, args.runs + 1):
                for tree in (root, peer, peer_fsync):
                    (tree / "src" / "pkg1" / "mod1.py").write_text(f"# changed {i} {name}\n")
                timed(name, hook, stdin=_payload(root, "rm -rf build", i), env=hook_env, cwd=root)
                timed("git add -A && git commit",
                      f"git add -A && git -c user.name=b -c user.email=b@example.com commit -qm 'change {i} {name}'", env=env, cwd=peer)
                timed("git+fsync", f"{GIT_FSYNC} add -A && {GIT_FSYNC} -c user.name=b -c user.email=b@example.com "
                      f"commit -qm 'change {i} {name}'", env=env, cwd=peer_fsync)
        served = _helper_pid(run_dir) == pid
        if pid is not None:
            os.kill(pid, 15)
    med = {k: (statistics.median(w for w, _ in v), statistics.median(c for _, c in v) + statistics.mean(helper_cpu[k]))
           for k, v in rows.items() if v}
    load_after = os.getloadavg()
    print(f"{args.files} files, median of {args.runs} runs (wall ms / CPU ms); load average {load_before[0]:.2f} before, {load_after[0]:.2f} after")
    print(f"helper process {pid} {'served every run' if served else 'WAS REPLACED during the runs'}\n")
    print("| call | plugin hook | peer | wall ratio | CPU ratio |")
    print("|---|---|---|---|---|")
    for mine, peer_name in (("harmless hook", "python3 -c pass"), ("make test hook", "python3 -c pass"),
                            ("unlisted harmless hook + helper", "python3 -c pass"), ("unlisted harmless hook, no helper", "python3 -c pass"),
                            ("snapshotting hook + helper", "git add -A && git commit"), ("snapshotting hook, no helper", "git add -A && git commit"),
                            ("harmless hook, native client", "python3 -c pass"),
                            ("snapshotting hook + helper, native client", "git add -A && git commit"),
                            ("snapshotting hook + helper", "git+fsync"),
                            ("snapshotting hook + helper, native client", "git+fsync")):
        if not rows[mine]:
            continue
        (w, c), (pw, pc) = med[mine], med[peer_name]
        extra = f" (helper {statistics.mean(helper_cpu[mine]):.0f})" if statistics.mean(helper_cpu[mine]) else ""
        print(f"| {mine} vs {peer_name} | {w:.0f} / {c:.0f}{extra} | {pw:.0f} / {pc:.0f} | {w / pw:.2f}x | {c / pc:.2f}x |")

if __name__ == "__main__":
    main()
