"""Test servers never outlive a test process killed by its time budget (SIGKILL: no teardown runs).

A child Python starts a real PostgreSQL and a real SeaweedFS S3 server through
:mod:`agentsnap_core.testing.servers`, reports their PIDs and data directories, and is then killed with
SIGKILL; the servers' watchdog must stop them and remove their files.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from agentsnap_core.testing.servers import need

CHILD = r"""
import json, sys, time
from agentsnap_core.testing.servers import PostgresServer, SeaweedServer, ServerUnavailable
out = {}
for name, cls in (("postgres", PostgresServer), ("s3", SeaweedServer)):
    try:
        server = cls().start()
    except (ServerUnavailable, OSError) as exc:
        out[name] = {"error": str(exc)}
        continue
    pid = server.pid if name == "postgres" else server.proc.pid
    out[name] = {"pid": pid, "base": server.base}
print(json.dumps(out), flush=True)
time.sleep(600)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead: its parent (the watchdog's shell or init) just has not reaped it yet
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0] != "Z"
    except (OSError, IndexError):
        return False


def test_servers_are_stopped_when_the_test_process_is_killed() -> None:
    child = subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        line = child.stdout.readline() if child.stdout else ""
        assert line, "the child printed nothing"
        started = json.loads(line)
    finally:
        child.send_signal(signal.SIGKILL)  # what a budget's timeout does: no finally, no atexit, no fixture teardown
        child.wait()
    for name, info in started.items():
        need("pid" in info, f"{name} server: {info.get('error')}")
    deadline = time.monotonic() + 120  # a bound for a hung watchdog, not a speed requirement
    while time.monotonic() < deadline and any(_alive(i["pid"]) or os.path.exists(i["base"]) for i in started.values()):
        time.sleep(0.5)
    for name, info in started.items():
        assert not _alive(info["pid"]), f"{name} server {info['pid']} outlived its killed test process"
        assert not os.path.exists(info["base"]), f"{name} server files {info['base']} were left behind"
