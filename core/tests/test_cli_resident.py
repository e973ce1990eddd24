"""``AGENTSNAP_RESIDENT=1``: commands forked from the warm resident process (cli/resident.py) behave as the same
commands run the ordinary way - output, exit status, working directory, environment - and every way the resident
process can be missing or out of date falls back to running the command in the script. Timing lives in
benchmarks/cli_bench.py; these tests check behaviour (what ran where), never speed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="the resident process forks (POSIX only)")

#: the script's entry point, then where the command ran: a command run here loads the CLI (click's or the fast one)
SCRIPT = ("import sys\nfrom agentsnap_core.cli import run\ntry:\n    run(sys.argv[1:])\nfinally:\n"
          "    here = {'agentsnap_core.cli.app', 'agentsnap_core.cli.fast'} & set(sys.modules)\n"
          "    print('served-here' if here else 'served-resident', file=sys.stderr)\n")


@pytest.fixture
def env(tmp_path: Path):
    e = dict(os.environ, AGENTSNAP_RESIDENT_DIR=str(tmp_path / "run"), AGENTSNAP_RESIDENT_IDLE="120")
    e.pop("AGENTSNAP_RESIDENT", None)
    yield e
    subprocess.run([sys.executable, "-m", "agentsnap_core", "resident", "stop"], env=e, capture_output=True, timeout=60)
    pid = _pid(e)
    if pid is not None:
        os.kill(pid, signal.SIGKILL)


def _pid(e: dict[str, str]) -> int | None:
    proc = subprocess.run([sys.executable, "-m", "agentsnap_core", "resident", "status", "--json"], env=e,
                          capture_output=True, text=True, timeout=60)
    return json.loads(proc.stdout)["pid"]


def agentsnap(cwd: Path, e: dict[str, str], *args: str, resident: bool, stdin: str = "") -> tuple[int, str, str, str]:
    """Run the script's entry point; (exit status, stdout, stderr without the marker line, where it was served)."""
    run_env = dict(e, AGENTSNAP_RESIDENT="1" if resident else "0")
    proc = subprocess.run([sys.executable, "-c", SCRIPT, *args], cwd=cwd, env=run_env, input=stdin,
                          capture_output=True, text=True, timeout=120)
    err, _, where = proc.stderr.rstrip("\n").rpartition("\n")
    if not where.startswith("served-"):
        err, where = proc.stderr, "?"
    return proc.returncode, proc.stdout, err + ("\n" if err else ""), where


def start(e: dict[str, str]) -> int:
    proc = subprocess.run([sys.executable, "-m", "agentsnap_core", "resident", "start"], env=e, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    pid = _pid(e)
    assert pid is not None
    return pid


def test_commands_served_by_the_resident_process_print_and_exit_as_the_script_does(tmp_path, env):
    work = tmp_path / "work"
    work.mkdir()
    subprocess.run([sys.executable, "-m", "agentsnap_core", "init"], cwd=work, check=True, capture_output=True)
    (work / "a.txt").write_text("a\n")
    start(env)
    code, out, err, where = agentsnap(work, env, "snapshot", "-m", "first", resident=True)
    assert (code, err, where) == (0, "", "served-resident") and len(out.strip()) == 64
    (work / "b.txt").write_text("b\n")
    (work / "sub").mkdir()
    for args in (["status"], ["status", "--json"], ["log"], ["restore", "no-such-snapshot"], ["diff", "HEAD"],
                 ["show", "HEAD"], ["no-such-verb"], ["-C", "..", "status"]):
        cwd = work / "sub" if args[0] == "-C" else work
        here = agentsnap(cwd, env, *args, resident=False)
        warm = agentsnap(cwd, env, *args, resident=True)
        assert here[3] == "served-here" and warm[3] == "served-resident", args
        assert warm[:3] == here[:3], args
    code, out, err, where = agentsnap(work, env, "restore", "HEAD", "--json", resident=True)
    assert (code, err, where) == (0, "", "served-resident")
    assert json.loads(out)["changes"]["deleted"] == ["b.txt", "sub"]
    assert not (work / "b.txt").exists()  # the restore ran, in the caller's directory


def test_the_command_gets_the_callers_environment_and_streams(tmp_path, env):
    work = tmp_path / "work"
    work.mkdir()
    subprocess.run([sys.executable, "-m", "agentsnap_core", "init"], cwd=work, check=True, capture_output=True)
    start(env)
    for allow in ("none", "agentsnap_core.plugins.defaults"):  # the plugins a command loads follow its environment
        e = dict(env, AGENTSNAP_PLUGINS=allow)
        here, warm = (agentsnap(work, e, "plugins", "--json", resident=flag) for flag in (False, True))
        assert (here[3], warm[3]) == ("served-here", "served-resident") and warm[:3] == here[:3]
    assert agentsnap(work, env, "plugins", "--json", resident=True)[:3] == agentsnap(work, env, "plugins", "--json",
                                                                                    resident=False)[:3]
    # a closed standard input is the caller's too: nothing hangs, the command sees end of file
    proc = subprocess.run([sys.executable, "-c", SCRIPT, "status"], cwd=work, env=dict(env, AGENTSNAP_RESIDENT="1"),
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "served-resident" in proc.stderr and "On branch main" in proc.stdout


def test_without_a_resident_process_the_script_runs_the_command_and_starts_one(tmp_path, env):
    work = tmp_path / "work"
    work.mkdir()
    subprocess.run([sys.executable, "-m", "agentsnap_core", "init"], cwd=work, check=True, capture_output=True)
    assert _pid(env) is None
    code, out, _err, where = agentsnap(work, env, "status", resident=True)
    assert (code, where) == (0, "served-here") and "On branch main" in out
    for _ in range(200):  # the script started one, detached, for the next command
        if _pid(env) is not None and (tmp_path / "run").exists() and any((tmp_path / "run").glob("*.sock")):
            break
        time.sleep(0.1)
    assert agentsnap(work, env, "status", resident=True)[3] == "served-resident"


def test_a_folder_others_may_enter_is_not_used_and_each_command_says_so(tmp_path, env):
    work = tmp_path / "work"
    work.mkdir()
    subprocess.run([sys.executable, "-m", "agentsnap_core", "init"], cwd=work, check=True, capture_output=True)
    (tmp_path / "run").mkdir(mode=0o755)
    os.chmod(tmp_path / "run", 0o755)
    code, out, err, where = agentsnap(work, env, "status", resident=True)
    assert (code, where) == (0, "served-here") and "On branch main" in out
    assert "AGENTSNAP_RESIDENT=1 ignored" in err and str(tmp_path / "run") in err
    assert list((tmp_path / "run").iterdir()) == []  # nothing started or bound there


def test_a_resident_process_whose_code_changed_on_disk_is_not_used(tmp_path, env):
    work = tmp_path / "work"
    work.mkdir()
    subprocess.run([sys.executable, "-m", "agentsnap_core", "init"], cwd=work, check=True, capture_output=True)
    pid = start(env)
    import agentsnap_core.cli.fast as fast

    source = Path(fast.__file__)
    before = source.stat()
    os.utime(source, ns=(before.st_atime_ns, before.st_mtime_ns + 1_000_000_000))  # as a reinstall or an edit does
    try:
        code, out, _err, where = agentsnap(work, env, "status", resident=True)
    finally:
        os.utime(source, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert (code, where) == (0, "served-here") and "On branch main" in out
    for _ in range(100):
        if _pid(env) != pid:
            break
        time.sleep(0.1)
    assert _pid(env) != pid  # it said so and exited


def test_a_killed_command_and_ctrl_c_are_reported_as_a_shell_would(tmp_path, env):
    work = tmp_path / "work"
    work.mkdir()
    subprocess.run([sys.executable, "-m", "agentsnap_core", "init"], cwd=work, check=True, capture_output=True)
    server = start(env)

    def serving_ui(resident: str = "1") -> tuple[subprocess.Popen[str], int]:
        proc = subprocess.Popen([sys.executable, "-c", SCRIPT, "ui", "--no-open"], cwd=work,
                                env=dict(env, AGENTSNAP_RESIDENT=resident), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        assert proc.stdout is not None
        assert "http://127.0.0.1:" in proc.stdout.readline()  # the child serves, its output on the caller's pipe
        assert proc.stderr is not None and "press Ctrl-C" in proc.stderr.readline()
        time.sleep(0.5)  # into its serving loop, which ends on Ctrl-C
        children = Path(f"/proc/{server}/task/{server}/children").read_text().split()
        assert len(children) == (1 if resident == "1" else 0)
        return proc, int(children[0]) if children else proc.pid

    proc, child = serving_ui()
    os.kill(child, signal.SIGKILL)
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGKILL
    assert "killed by signal 9" in err
    here, _pid_here = serving_ui("0")
    here.send_signal(signal.SIGINT)
    out_here, _err = here.communicate(timeout=60)
    proc, child = serving_ui()
    proc.send_signal(signal.SIGINT)  # Ctrl-C at the script reaches the command, which ends as it does unserved
    out, _err = proc.communicate(timeout=60)
    assert (proc.returncode, out) == (here.returncode, out_here)
    for _ in range(100):
        if not Path(f"/proc/{child}").exists():
            break
        time.sleep(0.1)
    assert not Path(f"/proc/{child}").exists()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the change journal is inotify's (Linux)")
def test_the_resident_process_watches_the_tree_and_its_snapshots_hold_every_change(tmp_path, env):
    """After two commands the resident process watches the working tree (layers/journal.py) and its commands read
    only the directories that changed; what they snapshot and report is what a full walk finds."""
    from agentsnap_core import Repo
    from agentsnap_core.layers import world

    work = tmp_path / "work"
    for i in range(6):
        (work / f"pkg{i}" / "sub").mkdir(parents=True)
        (work / f"pkg{i}" / "sub" / "m.py").write_text(f"# {i}\n")
    subprocess.run([sys.executable, "-m", "agentsnap_core", "init"], cwd=work, check=True, capture_output=True)
    start(env)
    for _ in range(3):
        assert agentsnap(work, env, "snapshot", "-m", "s", resident=True)[0] == 0
    cache_file = next((work / ".agentsnap").rglob("statcache.msgpack"))
    deadline = time.monotonic() + 60  # (the resident process writes the cache it keeps once no call came for a moment)
    while world.StatCache.load(cache_file).listing is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert world.StatCache.load(cache_file).listing is not None, "the journal's token was not kept"
    steps = [
        lambda: (work / "pkg3" / "sub" / "m.py").write_text("# changed, same dir\n"),
        lambda: (work / "pkg1" / "new" / "deep").mkdir(parents=True) or (work / "pkg1" / "new" / "deep" / "n.txt").write_text("n"),
        lambda: (work / "pkg0" / "sub" / "m.py").unlink(),
        lambda: (work / "pkg5" / "sub" / "m.py").chmod(0o755),
        lambda: (work / "pkg2").rename(work / "pkg2_moved"),
        lambda: (work / "pkg4" / ".env").write_text("SECRET=1\n"),
    ]
    for step in steps:
        step()
        code, out, err, where = agentsnap(work, env, "status", "--json", resident=True)
        assert (code, where) == (0, "served-resident")
        assert json.loads(out) == json.loads(agentsnap(work, env, "status", "--json", resident=False)[1])
        assert agentsnap(work, env, "snapshot", "-m", "s", resident=True)[0] == 0
        with Repo.open(work) as repo:
            truth, _, _ = world.capture(work, None, repo._ignore())
            assert repo.load_tree(repo.get("HEAD").layers["world"]["tree"]) == truth


def test_the_script_answers_at_the_commands_exit_line_not_at_the_close_of_the_connection():
    """The child's ``EXIT n`` ends the call at once: the script does not wait for the child's teardown and the
    resident process's close of the connection (here a stand-in that keeps it open for 20 s, then closes it)."""
    import socket
    import threading

    from agentsnap_core.cli import resident

    ours, theirs = socket.socketpair()
    closed = threading.Event()

    def close_later() -> None:
        time.sleep(20)
        closed.set()
        theirs.close()

    threading.Thread(target=close_later, daemon=True).start()
    theirs.sendall(b"PID 4194304\n")
    theirs.sendall(b"EXIT 3\n")
    assert resident._wait(ours) == 3
    assert not closed.is_set()
    ours.close()


def test_the_commands_a_child_runs_import_nothing_the_resident_process_could_have_imported(tmp_path):
    """A child pays for every module it imports itself (nothing is shared back): after the resident process's
    preload, snapshots (a tree past the chunking size, a large file, a secret) and a restore import nothing."""
    work = tmp_path / "work"
    work.mkdir()
    for i in range(2000):  # a tree of ~100 KB: its msgpack is cut into chunks
        (work / f"file_{i:05d}_with_a_long_name.txt").write_text(str(i))
    (work / "big.bin").write_bytes(os.urandom(300_000))
    (work / ".env").write_text("TOKEN=1\n")
    probe = (
        "import os, sys\n"
        "from agentsnap_core.cli import resident, run\n"
        "resident._preload()\n"
        "before = set(sys.modules)\n"
        "for args in (['init'], ['snapshot', '-m', 'a'], ['snapshot', '-m', 'b'], ['restore', 'HEAD~1'], ['status']):\n"
        "    try:\n"
        "        run(args, resident=False)\n"
        "    except SystemExit as exc:\n"
        "        assert not exc.code, (args, exc.code)\n"
        "    if args[-1] == 'a':\n"
        "        open('big.bin', 'ab').write(b'more')\n"
        "print('NEW', ' '.join(sorted(set(sys.modules) - before)))\n"
    )
    proc = subprocess.run([sys.executable, "-c", probe], cwd=work, capture_output=True, text=True, timeout=300,
                          env={k: v for k, v in os.environ.items() if not k.startswith("AGENTSNAP_RESIDENT")})
    assert proc.returncode == 0, proc.stderr
    new = proc.stdout.rpartition("NEW")[2].split()
    assert new == [], f"imported by the commands, not by the preload: {new}"
