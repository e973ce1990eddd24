"""CLI benchmark, process against process, side by side in one run: `agentsnap` vs git vs restic.

What a CLI user pays, each a whole process (interpreter start and imports included):
  start       `agentsnap --version`                  vs `python3 -c pass`
  status      `agentsnap status` on a small tree      vs `git status` (and vs `python3 -c pass`)
  first / unchanged / 10 changed  `agentsnap snapshot` vs `git add -A && git commit`  vs `restic backup`
  status (big) `agentsnap status` on the tree          vs `git status`
  restore 10  `agentsnap restore <id>` of a snapshot 10 files away vs `git checkout -f <commit>` (restic: `restore --include` n/a)
  fork -n 12  `agentsnap fork -n 12`                  vs twelve `git branch`
  git+fsync   the snapshot and fork steps with git told to fsync what it commits (`-c core.fsync=committed`: by
              default git 2.36+ fsyncs no loose object and no ref, so a commit makes no flush; its trace2 `fsync`
              counters say 0, and 4 with this), on its own copy: git at agentsnap's durability (a snapshot returns
              with its objects, index row and refs on disk)
  store size  the store on disk (du) after `agentsnap gc` vs `.git` after `git gc`, vs the restic repository
The same agentsnap commands are also run with the resident process (`AGENTSNAP_RESIDENT=1`, its own folder; started
once, before the timings): column "resident". Its CPU time adds the resident process's children (the commands), read
from /proc at the kernel's 10 ms tick. Column "native": the same, through the native client (`agentsnap resident
install-client`, built here with cc into a copy of the script), which hands the command over without starting Python.
Bytecode is compiled first (PYTHONDONTWRITEBYTECODE is unset here, as in a real install) and every command is
warmed once; the median of --repeat runs is shown. Ratios are agentsnap / peer: below 1.00x agentsnap is faster.
Beside the wall-clock table, the CPU time (user + system) of the same runs, the command's processes included: on a
machine shared with other work it moves less with the load than the wall clock does.

    python benchmarks/cli_bench.py [--tree DIR] [--repeat N]
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import resource
import shutil
import stat
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

ENV = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE",) and not k.startswith("AGENTSNAP_")}
ENV.update(GIT_AUTHOR_NAME="b", GIT_AUTHOR_EMAIL="b@x", GIT_COMMITTER_NAME="b", GIT_COMMITTER_EMAIL="b@x",
           RESTIC_PASSWORD="bench", RESTIC_CACHE_DIR="")
AGENTSNAP = [str(Path(sys.executable).parent / "agentsnap")]
#: the native client (install_native), when this machine can build it
NATIVE: list[str] = []
#: git at agentsnap's durability: what a commit or branch writes is fsynced before it returns (git 2.36+)
GIT_FSYNC = "git -c core.fsync=committed -c core.fsyncMethod=fsync"


#: CPU seconds (user + system, children included) of each sh() since the last take_cpu()
_CPU: list[float] = []


def take_cpu() -> float:
    """The median CPU time of the runs since the last call (those a wall-clock figure was just taken from)."""
    value = statistics.median(_CPU) if _CPU else float("nan")
    _CPU.clear()
    return value


class Timed(dict):  # type: ignore[type-arg]
    """``step -> wall seconds``; setting a step also keeps the median CPU time of the runs behind it in ``cpu``."""

    def __init__(self) -> None:
        super().__init__()
        self.cpu: dict[str, float] = {}

    def __setitem__(self, step: str, value: float) -> None:
        if step != "store MB":
            self.cpu[step] = take_cpu()
        super().__setitem__(step, value)


#: the resident process's environment and pid, once started (start_resident)
RESIDENT: dict[str, str] = {}
_SERVER: list[int] = []


def start_resident(work: Path) -> None:
    RESIDENT.update(ENV, AGENTSNAP_RESIDENT="1", AGENTSNAP_RESIDENT_DIR=str(work / "resident-run"))
    subprocess.run([*AGENTSNAP, "resident", "start"], env=RESIDENT, check=True, stdout=subprocess.DEVNULL)
    out = subprocess.run([*AGENTSNAP, "resident", "status", "--json"], env=RESIDENT, check=True, capture_output=True,
                         text=True).stdout
    _SERVER.append(int(json.loads(out)["pid"]))


def install_native(work: Path) -> None:
    """The native client in a copy of the script (`agentsnap resident install-client --at`): column "native"."""
    (work / "native-bin").mkdir()
    copy = work / "native-bin" / "agentsnap"
    shutil.copy2(AGENTSNAP[0], copy)
    proc = subprocess.run([*AGENTSNAP, "resident", "install-client", "--at", str(copy)], env=ENV, capture_output=True,
                          text=True)
    if proc.returncode == 0:
        NATIVE.append(str(copy))
    else:
        print(f"native client not built ({proc.stderr.strip()[-300:]}): its column is left empty")


def stop_resident() -> None:
    if RESIDENT:
        subprocess.run([*AGENTSNAP, "resident", "stop"], env=RESIDENT, stdout=subprocess.DEVNULL)


def _server_children_cpu() -> float:
    """CPU seconds of the resident process's reaped children (its commands), at the kernel's tick."""
    try:
        fields = Path(f"/proc/{_SERVER[0]}/stat").read_text().rsplit(")", 1)[1].split()
    except FileNotFoundError:  # its CPU column would be wrong from here on: say why it went instead
        logs = "".join(p.read_text() for p in Path(RESIDENT["AGENTSNAP_RESIDENT_DIR"]).glob("*.log"))
        raise SystemExit(f"the resident process {_SERVER[0]} exited during the benchmark; its log:\n{logs}") from None
    return (int(fields[13]) + int(fields[14])) / os.sysconf("SC_CLK_TCK")  # cutime, cstime


def sh(cmd: list[str] | str, cwd: Path | None = None, resident: bool = False) -> float:
    env = RESIDENT if resident else ENV
    server = _server_children_cpu() if resident else 0.0
    t, c = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)  # (os.times() ticks at 10 ms)
    proc = subprocess.run(cmd, cwd=cwd, env=env, shell=isinstance(cmd, str), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    elapsed = time.perf_counter() - t
    d = resource.getrusage(resource.RUSAGE_CHILDREN)
    if resident:
        time.sleep(0.02)  # the resident process reaps its child just after the reply
        server = _server_children_cpu() - server
    _CPU.append(d.ru_utime - c.ru_utime + d.ru_stime - c.ru_stime + server)
    if proc.returncode not in (0, 1):  # status/diff exit 1 when something changed, as git diff --exit-code
        raise SystemExit(f"benchmark command failed: {cmd}: {proc.stderr.decode()[-500:]}")
    return elapsed


def median(cmd: list[str] | str, cwd: Path | None, repeat: int, warm: bool = True, resident: bool = False) -> float:
    if warm:
        sh(cmd, cwd, resident)
        _CPU.clear()
    return statistics.median(sh(cmd, cwd, resident) for _ in range(repeat))


def du(path: Path) -> int:
    """Bytes on disk under ``path``, each file once as ``du`` counts it: a hard link is not a second copy (the vault
    links a snapshot's entry to its parent's when the secret files did not change; summed per name, the stdlib
    tree's 14 test ``.pem`` files counted ~40 KB per snapshot that the disk holds once)."""
    seen: set[tuple[int, int]] = set()
    total = 0
    for f in path.rglob("*"):
        st = f.lstat()
        if stat.S_ISREG(st.st_mode) and (st.st_dev, st.st_ino) not in seen:
            seen.add((st.st_dev, st.st_ino))
            total += st.st_blocks * 512
    return total


def edit(root: Path, n: int, tag: str) -> None:
    done = 0
    for dp, dn, fn in os.walk(root):
        dn[:] = [d for d in dn if d not in (".agentsnap", ".git")]
        for f in sorted(fn):
            if f.endswith(".py") and done < n:
                with open(os.path.join(dp, f), "a") as fh:
                    fh.write(f"\n# bench {tag}\n")
                done += 1
        if done >= n:
            return


def tree_snapshots(src: Path, work: Path, repeat: int, restic: str | None) -> dict[str, dict[str, float]]:
    res: dict[str, Timed] = {"agentsnap": Timed(), "resident": Timed(), "native": Timed(), "git": Timed(),
                             "git+fsync": Timed(), "restic": Timed()}
    a, g, r, gf = work / "a", work / "g", work / "r", work / "gf"
    for d in (a, g, r, gf):  # the stdlib without its site-packages (what the issue measured: ~7.7k files)
        shutil.copytree(src, d, symlinks=True, ignore=shutil.ignore_patterns("site-packages", "__pycache__"))
    time.sleep(1.1)  # past racy-clean windows for every tool alike
    os.sync()  # the copies' ~400 MB of dirty pages written out first: else the first tool that flushes (agentsnap's
    # snapshot fsyncs its pack; git by default flushes nothing) waits for the kernel to write them (+300 ms measured)
    sh([*AGENTSNAP, "init"], a)
    sh(["git", "init", "-q"], g)
    sh(["git", "init", "-q"], gf)
    _CPU.clear()
    res["agentsnap"]["first"] = sh([*AGENTSNAP, "snapshot", "-m", "first"], a)
    res["git"]["first"] = sh("git add -A && git commit -q -m first", g)
    res["git+fsync"]["first"] = sh(f"{GIT_FSYNC} add -A && {GIT_FSYNC} commit -q -m first", gf)
    if restic:
        sh([restic, "init", "-q", "--repo", str(work / "restic-repo")])
        _CPU.clear()
        res["restic"]["first"] = sh([restic, "backup", "-q", "--repo", str(work / "restic-repo"), "."], r)
    res["agentsnap"]["unchanged"] = median([*AGENTSNAP, "snapshot", "-m", "same"], a, repeat)
    res["resident"]["unchanged"] = median([*AGENTSNAP, "snapshot", "-m", "same"], a, repeat, resident=True)
    if NATIVE:
        res["native"]["unchanged"] = median([*NATIVE, "snapshot", "-m", "same"], a, repeat, resident=True)
    res["git"]["unchanged"] = median("git add -A && git commit -q --allow-empty -m same", g, repeat)
    res["git+fsync"]["unchanged"] = median(f"{GIT_FSYNC} add -A && {GIT_FSYNC} commit -q --allow-empty -m same", gf,
                                           repeat)
    if restic:
        res["restic"]["unchanged"] = median([restic, "backup", "-q", "--repo", str(work / "restic-repo"), "."], r, repeat)
    # The resident process's change journal (docs/CLI.md) engages from the third command on a tree, and a command
    # run without it (the "agentsnap" column, on the same tree just before) leaves a stat cache it cannot vouch for:
    # each resident group below starts with such commands, untimed, as a user who always runs with it has them
    # behind them (the first unchanged snapshot above asked for the watch; its warm-up walked under it).
    for tool, root, cmd in (("agentsnap", a, [*AGENTSNAP, "snapshot", "-m", "ten"]),
                            ("resident", a, [*AGENTSNAP, "snapshot", "-m", "ten"]),
                            ("native", a, [*NATIVE, "snapshot", "-m", "ten"]),
                            ("git", g, "git add -A && git commit -q -m ten"),
                            ("git+fsync", gf, f"{GIT_FSYNC} add -A && {GIT_FSYNC} commit -q -m ten"),
                            ("restic", r, [restic or "", "backup", "-q", "--repo", str(work / "restic-repo"), "."])):
        if tool == "restic" and not restic or tool == "native" and not NATIVE:
            continue
        times = []
        if tool in ("resident", "native"):
            sh(cmd, root, True)  # (the tree is unchanged since the last snapshot: the journal's listing is taken)
            _CPU.clear()
        for i in range(repeat):
            edit(root, 10, f"{tool}{i}")
            times.append(sh(cmd, root, tool in ("resident", "native")))
        res[tool]["10 changed"] = statistics.median(times)
    res["agentsnap"]["status"] = median([*AGENTSNAP, "status"], a, repeat)
    res["resident"]["status"] = median([*AGENTSNAP, "status"], a, repeat, resident=True)
    if NATIVE:
        res["native"]["status"] = median([*NATIVE, "status"], a, repeat, resident=True)
    res["git"]["status"] = median(["git", "status", "--porcelain"], g, repeat)
    # restore of a snapshot 10 files away, back and forth between the same two snapshots, as git checks out
    # HEAD~1 and master in turn. (Not `restore HEAD~1` then `restore main`: a restore moves the branch, as `git reset
    # --hard` does, so `main` then named the snapshot just restored and every other restore changed nothing.)
    sh([*AGENTSNAP, "tag", "bench-older", "HEAD~1"], a)
    sh([*AGENTSNAP, "tag", "bench-newer", "HEAD"], a)
    _CPU.clear()
    res["agentsnap"]["restore 10"] = statistics.median(
        sh([*AGENTSNAP, "restore", "bench-older" if i % 2 == 0 else "bench-newer"], a) for i in range(repeat))
    sh([*AGENTSNAP, "restore", "bench-newer"], a, True)  # (untimed: its undo snapshot takes the journal's listing)
    _CPU.clear()
    res["resident"]["restore 10"] = statistics.median(
        sh([*AGENTSNAP, "restore", "bench-older" if i % 2 == 0 else "bench-newer"], a, True) for i in range(repeat))
    if NATIVE:
        sh([*NATIVE, "restore", "bench-newer"], a, True)
        _CPU.clear()
        res["native"]["restore 10"] = statistics.median(
            sh([*NATIVE, "restore", "bench-older" if i % 2 == 0 else "bench-newer"], a, True) for i in range(repeat))
    sh([*AGENTSNAP, "restore", "bench-newer"], a, True)
    _CPU.clear()
    res["git"]["restore 10"] = statistics.median(
        sh(["git", "checkout", "-q", "-f", "HEAD~1" if i % 2 == 0 else "master"], g) for i in range(repeat))
    sh(["git", "checkout", "-q", "-f", "master"], g)
    _CPU.clear()
    res["agentsnap"]["fork -n 12"] = statistics.median(sh([*AGENTSNAP, "fork", "-n", "12", "--prefix", f"f{i}"], a) for i in range(repeat))
    res["resident"]["fork -n 12"] = statistics.median(
        sh([*AGENTSNAP, "fork", "-n", "12", "--prefix", f"r{i}"], a, True) for i in range(repeat))
    if NATIVE:
        res["native"]["fork -n 12"] = statistics.median(
            sh([*NATIVE, "fork", "-n", "12", "--prefix", f"n{i}"], a, True) for i in range(repeat))
    res["git"]["fork -n 12"] = statistics.median(
        sh(" && ".join(f"git branch f{i}-{k}" for k in range(12)), g) for i in range(repeat))
    res["git+fsync"]["fork -n 12"] = statistics.median(
        sh(" && ".join(f"{GIT_FSYNC} branch f{i}-{k}" for k in range(12)), gf) for i in range(repeat))
    sh(["git", "gc", "-q"], g)
    sh([*AGENTSNAP, "gc"], a)  # like git gc: small objects re-packed tighter (the packs report is in its output)
    res["agentsnap"]["store MB"] = du(a / ".agentsnap") / 1e6
    res["git"]["store MB"] = du(g / ".git") / 1e6
    if restic:
        res["restic"]["store MB"] = du(work / "restic-repo") / 1e6
    return res


def compile_bytecode() -> None:
    """Bytecode, as a real install has: agentsnap's and every installed package's (a module's first import would
    write it into a sys.path folder, which the resident process counts as "a package installed since": stale)."""
    import agentsnap_core

    compileall.compile_dir(Path(agentsnap_core.__file__).parent, quiet=1)
    for folder in sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]:
        compileall.compile_dir(folder, quiet=1, workers=0)


def startup(work: Path, repeat: int) -> Timed:
    small = work / "small"
    small.mkdir()
    for i in range(10):
        (small / f"f{i}.txt").write_text(f"file {i}\n")
    # git first, as in a git project: a store made before `git init` is kept out of git by the next agentsnap
    # command (gitshield.keep_out); until then git refuses to `add -A` its nested-repository marker
    sh(["git", "init", "-q"], small)
    sh([*AGENTSNAP, "init"], small)
    sh([*AGENTSNAP, "snapshot", "-m", "s"], small)
    sh("git add -A && git commit -q -m s", small)
    out = Timed()
    out["python -c pass"] = median([sys.executable, "-c", "pass"], small, repeat)
    out["agentsnap --version"] = median([*AGENTSNAP, "--version"], small, repeat)
    out["agentsnap status (10 files)"] = median([*AGENTSNAP, "status"], small, repeat)
    out["resident status (10 files)"] = median([*AGENTSNAP, "status"], small, repeat, resident=True)
    if NATIVE:
        out["native status (10 files)"] = median([*NATIVE, "status"], small, repeat, resident=True)
    out["git status (10 files)"] = median(["git", "status", "--porcelain"], small, repeat)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tree", type=Path, default=Path(sysconfig.get_paths()["stdlib"]), help="default: the Python stdlib")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    compile_bytecode()
    restic = shutil.which("restic")
    if not restic:
        print("restic not found (apt-get install restic; nox -s bench installs it): its column is left empty")
    load = os.getloadavg()
    print(f"machine: {os.cpu_count()} cores, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    with tempfile.TemporaryDirectory(prefix="agentsnap-cli-bench-") as tmp:
        start_resident(Path(tmp))
        install_native(Path(tmp))
        try:
            s = startup(Path(tmp), args.repeat)
            base = s["python -c pass"]
            print(f"\nCLI start (process, median of {args.repeat})")
            cbase = s.cpu["python -c pass"]
            for k, v in s.items():
                print(f"  {k:<30}{v * 1000:>8.1f} ms  {v / base:>6.2f}x python -c pass   CPU {s.cpu[k] * 1000:>6.1f} ms"
                      f"  {s.cpu[k] / cbase:>6.2f}x")
            print(f"  agentsnap status / git status: {s['agentsnap status (10 files)'] / s['git status (10 files)']:.2f}x"
                  "   (targets: --version and status <= 2.0x python -c pass)")
            nfiles = sum(len(fn) for dp, _dn, fn in os.walk(args.tree) if "site-packages" not in dp and "__pycache__" not in dp)
            print(f"\ntree: {args.tree} ({nfiles} files), process vs process, median of {args.repeat}")
            res = tree_snapshots(args.tree, Path(tmp), args.repeat, restic)
        finally:
            stop_resident()
    steps = ["first", "unchanged", "10 changed", "status", "restore 10", "fork -n 12", "store MB"]
    head = (f"  {'step':<12}{'agentsnap':>12}{'resident':>10}{'native':>10}{'git':>10}{'git+fsync':>10}{'restic':>10}"
            f"{'as/git':>8}{'res/git':>9}{'nat/git':>9}{'nat/g+fs':>9}{'as/restic':>10}")

    def cell(v: float | None, unit: float, width: int = 10) -> str:
        return f"{v * unit:>{width}.1f}" if v is not None else f"{'-':>{width}}"

    def ratio(v: float | None, peer: float | None, width: int) -> str:
        return f"{v / max(peer, 1e-6):>{width - 1}.2f}x" if v is not None and peer else f"{'-':>{width}}"

    def table(values: dict[str, dict[str, float]], names: list[str]) -> None:
        print(head)
        for step in names:
            a, w, n, g, f, r = (values[t].get(step) for t in ("agentsnap", "resident", "native", "git", "git+fsync",
                                                               "restic"))
            unit = 1 if step == "store MB" else 1000
            print(f"  {step:<12}{cell(a, unit, 12)}{cell(w, unit)}{cell(n, unit)}{cell(g, unit)}{cell(f, unit)}"
                  f"{cell(r, unit)}{ratio(a, g, 8)}{ratio(w, g, 9)}{ratio(n, g, 9)}{ratio(n, f, 9)}{ratio(a, r, 10)}")

    table(res, steps)
    print("  (times in ms, store in MB; targets: first <= 0.5x git, unchanged/10 changed <= 0.8x, status <= 1.0x,"
          " restore 10 <= 1.0x, fork -n 12 <= 1.0x, store <= 1.0x git after gc)")
    print("\n  CPU time (user + system, the command's processes included), median of the same runs:")
    table({t: v.cpu for t, v in res.items()}, steps[:-1])
    load = os.getloadavg()
    print(f"\nload average at the end {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")


if __name__ == "__main__":
    main()
