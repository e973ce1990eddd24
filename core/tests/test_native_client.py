"""``agentsnap resident install-client``: the native client (cli/native_client.c, compiled here with cc) in place of
the ``agentsnap`` script hands commands to the resident process without starting Python, and runs the script's
own code whenever it does not. What a command prints (bytes), reads and returns must not depend on which of the
two ran it. Timing lives in benchmarks/cli_bench.py; these tests check behaviour, never speed."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = [
    pytest.mark.skipif(os.name != "posix" or not hasattr(os, "fork"), reason="the resident process forks (POSIX)"),
    pytest.mark.skipif(not shutil.which(os.environ.get("CC") or "cc") and os.environ.get("CI") != "true",
                       reason="no C compiler (cc) to build the native client (under CI=true this fails instead)"),
]

#: a fresh Python (the script, or the native client's fallback) runs this at its start; a resident child does not
SITE = "import os\nif os.environ.get('MARK'):\n    open(os.environ['MARK'], 'a').write('python\\n')\n"


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> dict[str, Path]:
    """This installation's script copied aside, and a copy replaced by the native client (``install-client --at``)."""
    d = tmp_path_factory.mktemp("bin")
    original = Path(sys.executable).with_name("agentsnap")
    (d / "script").mkdir()
    (d / "native").mkdir()
    shutil.copy2(original, d / "script" / "agentsnap")
    shutil.copy2(original, d / "native" / "agentsnap")
    proc = subprocess.run([str(d / "script" / "agentsnap"), "resident", "install-client", "--at",
                           str(d / "native" / "agentsnap")], capture_output=True, text=True, timeout=300,
                          env={k: v for k, v in os.environ.items() if k != "AGENTSNAP_RESIDENT"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (d / "native" / "agentsnap").read_bytes()[:4] == b"\x7fELF"
    site = d / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SITE)
    return {"script": d / "script" / "agentsnap", "native": d / "native" / "agentsnap", "site": site}


@pytest.fixture
def env(tmp_path: Path, installed):
    e = dict(os.environ, AGENTSNAP_RESIDENT_DIR=str(tmp_path / "run"), AGENTSNAP_RESIDENT_IDLE="120",
             PYTHONPATH=str(installed["site"]), MARK=str(tmp_path / "pythons"))
    e.pop("AGENTSNAP_RESIDENT", None)
    yield e
    subprocess.run([str(installed["script"]), "resident", "stop"], env=e, capture_output=True, timeout=60)


def pythons(e: dict[str, str]) -> int:
    """How many Python interpreters started since the last call (each fresh one runs sitecustomize)."""
    mark = Path(e["MARK"])
    n = len(mark.read_text().split()) if mark.exists() else 0
    mark.unlink(missing_ok=True)
    return n


def run(exe: Path, cwd: Path, e: dict[str, str], *args: str, resident: bool, **kw) -> tuple[int, bytes, bytes]:
    proc = subprocess.run([str(exe), *args], cwd=cwd, env=dict(e, AGENTSNAP_RESIDENT="1" if resident else "0"),
                          capture_output=True, timeout=120, **kw)
    return proc.returncode, proc.stdout, proc.stderr


def start(installed, e: dict[str, str]) -> int:
    proc = subprocess.run([str(installed["script"]), "resident", "start", "--json"], env=e, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    pythons(e)
    return int(json.loads(proc.stdout)["pid"])


def test_the_native_client_prints_and_exits_as_the_script_does_and_starts_no_python(tmp_path, env, installed):
    work = tmp_path / "work"
    work.mkdir()
    assert run(installed["script"], work, env, "init", resident=False)[0] == 0
    (work / "a.txt").write_text("a\n")
    (work / "caf\u00e9 \u2603.txt").write_text("snow\n")
    assert run(installed["script"], work, env, "snapshot", "-m", "first \u00e9", resident=False)[0] == 0
    (work / "b.txt").write_text("b\n")
    (work / "sub").mkdir()
    (work / os.fsdecode(b"raw-\xff.txt")).write_text("not utf-8 in its name\n")
    start(installed, env)
    cases = [["status"], ["status", "--json"], ["log"], ["restore", "no-such-snapshot"], ["diff", "HEAD"],
             ["show", "HEAD"], ["no-such-verb"], ["-C", "..", "status"], ["--version"], ["status", "--\u00e9"]]
    for locale in ({"LC_ALL": "C"}, {"LC_ALL": "C.UTF-8"}, {"PYTHONIOENCODING": "latin-1:replace", "LC_ALL": "C.UTF-8"}):
        e = dict(env, **locale)
        for args in cases:
            cwd = work / "sub" if args[0] == "-C" else work
            expected = run(installed["script"], cwd, e, *args, resident=False)
            pythons(e)
            served = run(installed["native"], cwd, e, *args, resident=True)
            assert served == expected, (locale, args)
            # --version is the script's (a fresh Python); every other command line ran in a resident child
            assert pythons(e) == (1 if args == ["--version"] else 0), (locale, args)
            assert run(installed["native"], cwd, e, *args, resident=False) == expected, (locale, args)
            assert pythons(e) == 1  # without AGENTSNAP_RESIDENT=1: the script's code, in this installation's Python
    code, out, err = run(installed["native"], work, env, "restore", "HEAD", "--json", resident=True)
    assert (code, err) == (0, b"") and json.loads(out)["changes"]["deleted"] == ["b.txt", os.fsdecode(b"raw-\xff.txt"),
                                                                                 "sub"]
    assert not (work / "b.txt").exists() and pythons(env) == 0  # it ran, in the caller's directory
    # a closed standard input is the caller's too
    proc = subprocess.run([str(installed["native"]), "status"], cwd=work, env=dict(env, AGENTSNAP_RESIDENT="1"),
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "On branch main" in proc.stdout and pythons(env) == 0


def test_without_a_resident_process_the_native_client_runs_the_script_which_starts_one(tmp_path, env, installed):
    work = tmp_path / "work"
    work.mkdir()
    assert run(installed["script"], work, env, "init", resident=False)[0] == 0
    code, out, _err = run(installed["native"], work, env, "status", resident=True)
    assert code == 0 and b"On branch main" in out
    assert pythons(env) >= 1  # the script ran it (and started a resident process, detached)
    for _ in range(200):
        if any((tmp_path / "run").glob("*.sock")):
            break
        time.sleep(0.1)
    time.sleep(0.5)
    pythons(env)
    code, out, _err = run(installed["native"], work, env, "status", resident=True)
    assert code == 0 and b"On branch main" in out and pythons(env) == 0
    # a folder others may enter is never used: the script says so, as it does without the native client
    os.chmod(tmp_path / "run", 0o755)
    try:
        expected = run(installed["script"], work, env, "status", resident=True)
        assert run(installed["native"], work, env, "status", resident=True) == expected
        assert b"AGENTSNAP_RESIDENT=1 ignored" in expected[2]
    finally:
        os.chmod(tmp_path / "run", 0o700)


def test_ctrl_c_and_a_killed_command_through_the_native_client(tmp_path, env, installed):
    work = tmp_path / "work"
    work.mkdir()
    assert run(installed["script"], work, env, "init", resident=False)[0] == 0
    server = start(installed, env)

    def serving_ui(exe: Path, resident: str) -> subprocess.Popen[str]:
        proc = subprocess.Popen([str(exe), "ui", "--no-open"], cwd=work, env=dict(env, AGENTSNAP_RESIDENT=resident),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert proc.stdout is not None and "http://127.0.0.1:" in proc.stdout.readline()
        assert proc.stderr is not None and "press Ctrl-C" in proc.stderr.readline()
        time.sleep(0.5)  # into its serving loop, which ends on Ctrl-C
        return proc

    here = serving_ui(installed["script"], "0")
    here.send_signal(signal.SIGINT)
    out_here, _ = here.communicate(timeout=60)
    proc = serving_ui(installed["native"], "1")
    children = Path(f"/proc/{server}/task/{server}/children").read_text().split()
    assert len(children) == 1  # served by a resident child
    proc.send_signal(signal.SIGINT)  # Ctrl-C at the client reaches the command, which ends as it does unserved
    out, _ = proc.communicate(timeout=60)
    assert (proc.returncode, out) == (here.returncode, out_here)
    proc = serving_ui(installed["native"], "1")
    child = int(Path(f"/proc/{server}/task/{server}/children").read_text().split()[0])
    os.kill(child, signal.SIGKILL)
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGKILL and "killed by signal 9" in err


def test_install_refuses_what_is_not_an_agentsnap_script_and_remove_puts_the_script_back(tmp_path, env, installed):
    other = tmp_path / "other"
    other.write_text("#!/bin/sh\necho mine\n")
    os.chmod(other, 0o755)
    code, out, err = run(installed["script"], tmp_path, env, "resident", "install-client", "--at", str(other),
                         resident=False)
    assert code == 2 and b"is not the agentsnap script of this installation" in err and b"Traceback" not in err
    assert other.read_text() == "#!/bin/sh\necho mine\n"
    copy = tmp_path / "bin" / "agentsnap"
    copy.parent.mkdir()
    shutil.copy2(installed["script"], copy)
    code, out, err = run(installed["script"], tmp_path, dict(env, CC="no-such-compiler"), "resident",
                         "install-client", "--at", str(copy), resident=False)
    assert code != 0 and b"no C compiler" in err and b"nothing changed" in err and b"Traceback" not in err
    assert copy.read_bytes() == installed["script"].read_bytes()
    shutil.copy2(installed["native"], copy)
    code, out, err = run(installed["script"], tmp_path, env, "resident", "status", "--json", "--at", str(copy),
                         resident=False)
    assert json.loads(out)["client"] == "native"
    code, out, err = run(installed["script"], tmp_path, env, "resident", "remove-client", "--at", str(copy),
                         resident=False)
    assert code == 0 and b"Python script put back" in out
    assert copy.read_bytes()[:2] == b"#!" and os.access(copy, os.X_OK)
    assert run(copy, tmp_path, env, "--version", resident=False) == run(installed["script"], tmp_path, env,
                                                                        "--version", resident=False)
    code, out, err = run(installed["script"], tmp_path, env, "resident", "remove-client", "--at", str(copy),
                         resident=False)
    assert code == 0 and b"no native client" in out
