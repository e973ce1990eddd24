"""The CLI's fast paths as a demanding user meets them: the Python script and the native client handing a command
to the resident process (``AGENTSNAP_RESIDENT=1``) must give what the script gives alone, also when a standard
stream is closed, and a Ctrl-C must never leave a command running unseen after the client has gone."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(os.name != "posix" or not hasattr(os, "fork"),
                                reason="the resident process forks (POSIX only)")

needs_cc = pytest.mark.skipif(not shutil.which(os.environ.get("CC") or "cc") and os.environ.get("CI") != "true",
                              reason="no C compiler (cc) to build the native client (under CI=true this fails instead)")
linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/PID/status (Linux)")

#: the console script's code (what the Python client runs)
SCRIPT = "import sys\nfrom agentsnap_core.cli import run\nrun(sys.argv[1:])\n"


@pytest.fixture(scope="module")
def native(tmp_path_factory) -> Path:
    """This installation's script, copied aside and replaced by the native client (``install-client --at``)."""
    d = tmp_path_factory.mktemp("bin")
    shutil.copy2(Path(sys.executable).with_name("agentsnap"), d / "agentsnap")
    proc = subprocess.run([sys.executable, "-c", SCRIPT, "resident", "install-client", "--at", str(d / "agentsnap")],
                          capture_output=True, text=True, timeout=300,
                          env={k: v for k, v in os.environ.items() if k != "AGENTSNAP_RESIDENT"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return d / "agentsnap"


@pytest.fixture
def env(tmp_path: Path):
    e = dict(os.environ, AGENTSNAP_RESIDENT_DIR=str(tmp_path / "run"), AGENTSNAP_RESIDENT_IDLE="120")
    e.pop("AGENTSNAP_RESIDENT", None)
    yield e
    subprocess.run([sys.executable, "-c", SCRIPT, "resident", "stop"], env=e, capture_output=True, timeout=60)


@pytest.fixture
def work(tmp_path: Path) -> Path:
    root = tmp_path / "work"
    root.mkdir()
    (root / "a.txt").write_text("a\n")
    for args in (["init"], ["snapshot", "-m", "first"]):
        subprocess.run([sys.executable, "-c", SCRIPT, *args], cwd=root, check=True, capture_output=True,
                       env=dict(os.environ, AGENTSNAP_RESIDENT="0"))
    (root / "b.txt").write_text("b\n")
    return root


def client(kind: str, native: Path | None) -> list[str]:
    return [str(native)] if kind == "native" else [sys.executable, "-c", SCRIPT]


def snapshots(root: Path) -> int:
    proc = subprocess.run([sys.executable, "-c", SCRIPT, "log", "--json"], cwd=root, capture_output=True, text=True,
                          env=dict(os.environ, AGENTSNAP_RESIDENT="0"), timeout=120)
    return len(json.loads(proc.stdout))


@pytest.mark.parametrize("kind", ["python", pytest.param("native", marks=needs_cc)])
def test_a_closed_standard_output_is_not_the_connection_to_the_resident_process(kind, work, env, request):
    """``agentsnap log >&-`` (a script's output closed) with AGENTSNAP_RESIDENT=1 said "agentsnap: error: lost the
    connection to the remote store ([Errno 32] Broken pipe) ..." (exit 2) on a store with no remote, and
    ``agentsnap status >&-`` printed a BrokenPipeError traceback (exit 1), where the script alone says nothing and
    exits 0: the client's socket took the closed descriptor's number and was handed over as the command's output,
    so the command wrote into the client's own connection. Now a closed standard stream is never handed over: the
    script runs the command, as without the resident process."""
    exe = client(kind, request.getfixturevalue("native") if kind == "native" else None)
    subprocess.run([sys.executable, "-c", SCRIPT, "resident", "start"], env=env, check=True, capture_output=True,
                   timeout=120)
    for args in (["log"], ["status"], ["snapshot", "-m", "x"]):
        results = []
        for resident, command in (("0", [sys.executable, "-c", SCRIPT]), ("1", exe)):
            proc = subprocess.run(["sh", "-c", 'exec "$@" >&-', "sh", *command, *args], cwd=work, capture_output=True,
                                  env=dict(env, AGENTSNAP_RESIDENT=resident), timeout=120)
            results.append((proc.returncode, proc.stderr))
        assert results[1] == results[0] == (0, b""), (args, results)


def _sigint_pending(pid: int) -> bool:
    """True when SIGINT waits, blocked, for process ``pid``; False once it is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    fields = dict(line.split(":\t", 1) for line in status.splitlines() if ":\t" in line)
    if fields.get("State", "").startswith("Z"):
        return False
    return any(int(fields[k], 16) & (1 << (signal.SIGINT - 1)) for k in ("ShdPnd", "SigPnd") if k in fields)


@linux
@pytest.mark.parametrize("taken", [True, False], ids=["child-runs-it", "refused"])
@pytest.mark.parametrize("kind", ["python", pytest.param("native", marks=needs_cc)])
def test_ctrl_c_while_the_command_is_handed_over_reaches_the_command_or_ends_with_nothing_run(
        kind, taken, work, env, tmp_path, request):
    """Ctrl-C after the client sent the command but before the resident process's child said ``PID n`` killed the
    client (the native one by SIGINT, the Python one with a KeyboardInterrupt traceback) while the child went on:
    ``agentsnap snapshot`` (or ``restore``) then finished unseen after the shell said the command was interrupted
    (seen here: the snapshot made, its id printed after the prompt). Now the client holds the signal until the
    child runs and passes it on (the command is interrupted: exit 130), and when nothing was taken it ends by the
    signal without running the command itself."""
    exe = client(kind, request.getfixturevalue("native") if kind == "native" else None)
    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    from agentsnap_core.cli.resident import socket_name

    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)  # a stand-in for the resident process
    srv.bind(str(run / socket_name()))
    srv.listen(1)
    srv.settimeout(120)
    before = snapshots(work)
    proc = subprocess.Popen([*exe, "snapshot", "-m", "interrupted"], cwd=work, env=dict(env, AGENTSNAP_RESIDENT="1"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    stand_in = subprocess.Popen(["sleep", "120"])
    try:
        conn, _ = srv.accept()
        conn.settimeout(120)
        while conn.recv(1 << 16):  # the whole request: a child could run it now
            pass
        proc.send_signal(signal.SIGINT)
        deadline = time.monotonic() + 60
        while proc.poll() is None and not _sigint_pending(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.001)
        assert proc.poll() is None, ("the client died of the Ctrl-C while the command was handed over",
                                     proc.communicate())
        if taken:
            conn.sendall(b"PID %d\n" % stand_in.pid)
            assert stand_in.wait(timeout=60) == -signal.SIGINT  # the Ctrl-C reached the command
            conn.sendall(b"EXIT 130\n")
        conn.close()
        out, err = proc.communicate(timeout=120)
    finally:
        srv.close()
        stand_in.kill()
        if proc.poll() is None:
            proc.kill()
    if taken:
        assert (proc.returncode, out) == (130, b""), err
    else:  # nothing ran, here or there: ended by the signal, as the script is before it starts a command
        assert proc.returncode == -signal.SIGINT, (out, err)
        assert out == b""
    assert snapshots(work) == before


@linux
@needs_cc
def test_ctrl_c_given_while_the_resident_process_is_busy_interrupts_the_command(native, work, env, tmp_path):
    """The same through a real resident process, kept busy by another connection so that the Ctrl-C comes before
    the child runs: the child gets it at its very start. The old client died of it and the snapshot was made
    anyway, unseen; now the command ends interrupted (130, one line), nothing made."""
    subprocess.run([sys.executable, "-c", SCRIPT, "resident", "start"], env=env, check=True, capture_output=True,
                   timeout=120)
    from agentsnap_core.cli.resident import socket_name

    before = snapshots(work)
    busy = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    busy.connect(str(tmp_path / "run" / socket_name()))
    busy.sendall(b"AGSNAPCLI")  # a request not finished: the resident process waits for the rest (up to 10 s)
    proc = subprocess.Popen([str(native), "snapshot", "-m", "interrupted"], cwd=work,
                            env=dict(env, AGENTSNAP_RESIDENT="1"), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 5  # (the old client never blocks the signal: then it is sent after 5 s)
        while time.monotonic() < deadline:
            blocked = [line for line in Path(f"/proc/{proc.pid}/status").read_text().splitlines()
                       if line.startswith("SigBlk:")]
            if blocked and int(blocked[0].split()[1], 16) & (1 << (signal.SIGINT - 1)):
                break
            time.sleep(0.001)
        proc.send_signal(signal.SIGINT)
        busy.close()  # the resident process drops that call and takes the client's
        out, err = proc.communicate(timeout=120)
    finally:
        busy.close()
        if proc.poll() is None:
            proc.kill()
    assert (proc.returncode, out) == (130, b""), err
    assert err == b"agentsnap: interrupted; the store is unchanged past the last completed step\n"
    assert snapshots(work) == before


def test_a_command_whose_pythonpath_names_other_code_is_not_served_by_the_resident_process(work, env, tmp_path):
    """``PYTHONPATH=src agentsnap status`` (a checkout of agentsnap, or a folder of plugins, on the path) with
    AGENTSNAP_RESIDENT=1 was served by a resident process started without it: the command ran the installed code
    and plugins, not those the caller's interpreter would import (same version, same socket), and nothing said
    so. Now the resident process serves only commands whose interpreter settings (PYTHONPATH, PYTHONHOME, ...) are
    its own; the script runs the others itself."""
    import agentsnap_core

    dev = tmp_path / "dev"
    shutil.copytree(Path(agentsnap_core.__file__).parent, dev / "agentsnap_core",
                    ignore=shutil.ignore_patterns("__pycache__"))
    fast = dev / "agentsnap_core" / "cli" / "fast.py"
    text = fast.read_text()
    marker = "def answer(args: list[str]) -> int | None:\n"  # its first line then says it ran
    assert marker in text
    fast.write_text(text.replace(marker, marker + '    sys.stderr.write("the checkout\'s code ran\\n")\n'))
    subprocess.run([sys.executable, "-c", SCRIPT, "resident", "start"], env=env, check=True, capture_output=True,
                   timeout=120)
    path = os.pathsep.join([str(dev), *filter(None, [env.get("PYTHONPATH")])])
    results = []
    for resident in ("0", "1"):
        proc = subprocess.run([sys.executable, "-c", SCRIPT, "status"], cwd=work, capture_output=True, timeout=120,
                              env=dict(env, AGENTSNAP_RESIDENT=resident, PYTHONPATH=path))
        results.append((proc.returncode, proc.stdout, proc.stderr))
    assert results[0][2] == b"the checkout's code ran\n"
    assert results[1] == results[0]


def test_a_snapshot_name_that_is_not_utf8_is_one_line_not_a_traceback(tmp_path: Path) -> None:
    """``agentsnap restore $'\\xff'`` (also fork, log, show) ended in ``UnicodeEncodeError ... surrogates not allowed``
    from the ref store, a traceback and exit 1; now the one-line "unknown snapshot" (exit 2)."""
    env = dict(os.environ, AGENTSNAP_RESIDENT="0")
    for args in (["init"], ["snapshot", "-m", "x"]):
        subprocess.run([sys.executable, "-c", SCRIPT, *args], cwd=tmp_path, check=True, capture_output=True, env=env)
    for verb in ("restore", "fork", "log", "show"):
        proc = subprocess.run([os.fsencode(sys.executable), b"-c", SCRIPT.encode(), verb.encode(), b"\xff"],
                              cwd=tmp_path, capture_output=True, env=env, timeout=120)
        assert proc.returncode == 2 and b"Traceback" not in proc.stderr, (verb, proc.stderr[-300:])
        assert proc.stderr.count(b"\n") == 1 and proc.stderr.startswith(b"agentsnap: error: "), (verb, proc.stderr)


def test_a_snapshot_with_standard_error_closed_is_made(tmp_path: Path) -> None:
    """``agentsnap snapshot -m x 2>&-`` exited 1 and made no snapshot (the progress display asked ``sys.stderr``,
    which is None then, whether it is a terminal); whichever path ran it."""
    env = dict(os.environ, AGENTSNAP_RESIDENT="0")
    subprocess.run([sys.executable, "-c", SCRIPT, "init"], cwd=tmp_path, check=True, capture_output=True, env=env)
    (tmp_path / "a.txt").write_text("a\n")
    proc = subprocess.run([sys.executable, "-c", SCRIPT, "snapshot", "-m", "x"], cwd=tmp_path, stdout=subprocess.PIPE,
                          stderr=subprocess.DEVNULL, env=env, timeout=120, pass_fds=(), close_fds=True,
                          preexec_fn=lambda: os.close(2))
    assert proc.returncode == 0 and len(proc.stdout.strip()) == 64, proc
    log = subprocess.run([sys.executable, "-c", SCRIPT, "log", "--json"], cwd=tmp_path, capture_output=True, env=env,
                         text=True, timeout=120)
    assert [e["message"] for e in json.loads(log.stdout)] == ["x"], log
