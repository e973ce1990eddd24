"""Fan-out on a Ray cluster (issue 15): a head node started on 127.0.0.1 by the test, a shared PostgreSQL+S3 store.

Run by ``nox -s fanout_ray`` (which sets ``AGENTSNAP_RAY=1`` and installs Ray); skipped elsewhere. Inside that
session a missing Ray or server fails under ``CI=true`` (``agentsnap_core.testing.servers.need``).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from agentsnap_core import Repo
from agentsnap_core.testing.servers import free_port, need, need_module, watch_owner
from test_fanout import BEST, PATCHES, RUN, SCORE_CMD, changed_bytes, make_package

pytestmark = [
    pytest.mark.ray,
    pytest.mark.skipif(os.environ.get("AGENTSNAP_RAY") != "1", reason="Ray tests run in 'nox -s fanout_ray'"),
]

KEY = "fanout-ray-test-effects-key-0123456789"
#: Ray rewrites a 127.0.0.1 address to the machine's IP unless its single-node switch is set; with it, the driver
#: and the loopback-only head agree on 127.0.0.1 (ray/_private/services.py: resolve_ip_for_localhost, Ray 2.60)
#: Ray 2.60 turns token authentication on for 'ray start'; head and driver share a throwaway token (not ~/.ray)
RAY_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)}
KILLED = 5  #: the fork whose Ray worker is killed midway


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[dict[str, Any]]:
    """A Ray head node on 127.0.0.1 (2 CPUs, 100 MB object store, every port chosen here), stopped by its PID."""
    with pytest.MonkeyPatch.context() as mp:
        for k, v in RAY_ENV.items():  # before Ray is imported: it reads them into module constants
            mp.setenv(k, v)
        yield from _head_node()


def _head_node() -> Iterator[dict[str, Any]]:
    need_module("ray")
    ray_bin = shutil.which("ray", path=os.path.dirname(sys.executable))
    need(ray_bin is not None, "the 'ray' command is missing next to this Python")
    temp = tempfile.mkdtemp(prefix="rayfo-", dir="/tmp")  # short: Ray puts unix sockets under it
    port = free_port()
    low = 20000 + (os.getpid() % 400) * 100
    ports = {"--node-manager-port": free_port(), "--object-manager-port": free_port(),
             "--dashboard-agent-listen-port": free_port(),
             "--dashboard-agent-grpc-port": free_port(), "--metrics-export-port": free_port(),
             "--runtime-env-agent-port": free_port(), "--min-worker-port": low, "--max-worker-port": low + 99}
    env = {**os.environ, "AGENTSNAP_EFFECTS_KEY": KEY, "PYTHONDONTWRITEBYTECODE": "1", "RAY_USAGE_STATS_ENABLED": "0",
           **RAY_ENV}
    log = open(f"{temp}/head.log", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [str(ray_bin), "start", "--head", "--block", "--node-ip-address=127.0.0.1", f"--port={port}", "--num-cpus=2",
         "--num-gpus=0", "--object-store-memory=100000000", "--include-dashboard=false", "--disable-usage-stats",
         f"--temp-dir={temp}", *[f"{k}={v}" for k, v in ports.items()]],
        stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    # if this test process dies before its teardown, a watchdog kills the head node's process group
    watchdog = watch_owner(f"kill -KILL -{proc.pid} 2>/dev/null; rm -rf {temp}")  # dash: no "--"
    address = f"127.0.0.1:{port}"
    deadline = time.monotonic() + 90
    up = False
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            up = "Ray runtime started" in Path(f"{temp}/head.log").read_text(errors="replace")
        except OSError:
            pass
        if up:
            break
        time.sleep(0.5)
    info = {"address": address, "mode": f"head node started with 'ray start --head' at {address} (2 CPUs)"}
    if not up:  # the issue allows ray.init() local mode only when a head node cannot start
        info = {"address": None, "mode": "ray.init() local mode (the head node did not start: see "
                f"{temp}/head.log: {Path(f'{temp}/head.log').read_text(errors='replace')[-300:]!r})"}
    print(f"\nray: {info['mode']}")
    try:
        yield info
    finally:
        _stop(proc, temp)
        watchdog.kill()
        watchdog.wait()
        log.close()
        shutil.rmtree(temp, ignore_errors=True)


def _stop(proc: subprocess.Popen[bytes], temp: str) -> None:
    """Stop the head node we started: its process group, then any of its processes still using our temp dir."""
    import psutil

    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    for p in psutil.process_iter(["pid", "cmdline"]):
        if temp in " ".join(p.info.get("cmdline") or []):
            try:
                p.kill()
            except psutil.Error:
                pass


def cli(cwd: Path, *args: str, **kw: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "agentsnap_core", *args], cwd=cwd, text=True, capture_output=True, **kw)


def s3_objects_bytes(s3_server: Any, combined_url: str) -> int:
    """Bytes of the store's objects in the S3 bucket (the shared store's object half)."""
    s3 = urlsplit(combined_url.split("objects=", 1)[1])
    prefix = s3.path.lstrip("/").rstrip("/") + "/objects/"
    total = 0
    for page in s3_server.client().get_paginator("list_objects_v2").paginate(Bucket=s3.netloc, Prefix=prefix):
        total += sum(o["Size"] for o in page.get("Contents", []))
    return total


def test_ray_twelve_forks_on_a_shared_postgres_s3_store_one_killed_midway(
        ray_cluster: dict[str, Any], combined_url: str, s3_server: Any, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Must show (Ray): the 12-patch fan-out as Ray tasks on a shared PostgreSQL+S3 store (tasks check the base
    out from the store, nothing is copied); fork 5's worker is killed midway: reported, the rest complete;
    the best is merged; the store grows by no more than 0.1x one snapshot plus the forks' changes."""
    monkeypatch.setenv("AGENTSNAP_EFFECTS_KEY", KEY)
    for k, v in RAY_ENV.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    work = make_package(tmp_path / "pkg")
    with Repo.init(work, store_url=combined_url) as repo:
        base = repo.snapshot("base").id
    one_snapshot = s3_objects_bytes(s3_server, combined_url)
    run = f'if [ "$AGENTSNAP_FORK_INDEX" = {KILLED} ]; then kill -9 $PPID; exit 9; fi; {RUN}'
    args = ["fanout", "-n", "12", "--run", run, "--score", SCORE_CMD, "--merge", "best", "--backend", "ray",
            "--timeout", "120", "--json"]
    if ray_cluster["address"]:
        args += ["--address", ray_cluster["address"]]
    proc = cli(work, *args, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    print(f"ray: {ray_cluster['mode']}; {'; '.join(out['notes'])}")
    forks = {f["index"]: f for f in out["forks"]}
    assert out["backend"] == "ray" and sorted(forks) == list(range(1, 13))
    killed = forks[KILLED]
    assert killed["status"] == "failed" and "WorkerCrashedError" in killed["error"]
    print(f"killed fork reported as: {killed['error']}")
    assert all(f["status"] == "ok" for i, f in forks.items() if i != KILLED)
    assert out["winner"] == forks[BEST]["branch"] and forks[BEST]["score"] == 6.0
    assert out["merge"]["status"] == "fast-forward"
    assert PATCHES[BEST - 1] in (work / "calc" / "__init__.py").read_text()

    with Repo.open(work) as repo:
        assert repo.resolve("HEAD") == forks[BEST]["snapshot"]
        # the killed fork's checkout was on this machine: what it held is kept as a failed snapshot
        assert repo.get(killed["snapshot"]).manifest["meta"]["fanout"]["status"] == "failed"
        changes = sum(changed_bytes(repo, base, f["snapshot"]) for f in forks.values() if f["snapshot"])
        assert repo.verify()["ok"]
    total = s3_objects_bytes(s3_server, combined_url)
    print(f"S3 objects: one snapshot {one_snapshot} B, after 11 forks {total} B (+{total - one_snapshot} B), "
          f"forks' changed file bytes {changes} B")
    assert total <= 1.1 * one_snapshot + changes
    assert not list(Path(tempfile.gettempdir()).glob(f"agentsnap-fanout-{out['run'][:8]}-*"))  # checkouts removed

    # re-running the same fan-out only re-runs the killed fork (whose branch is still at the base)
    again = cli(work, "fanout", base, *[a for a in args[1:] if a not in ("--merge", "best")], timeout=240)
    assert again.returncode == 0, again.stderr[-3000:]
    rerun = {f["index"]: f for f in json.loads(again.stdout)["forks"]}
    assert [i for i, f in sorted(rerun.items()) if not f["resumed"]] == [KILLED]
    assert rerun[KILLED]["status"] == "failed"  # the same command kills its worker again: reported again


def test_ray_callable_agent_emails_deferred_in_every_fork_exactly_one_after_merge(
        ray_cluster: dict[str, Any], combined_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The email must-show on Ray: Python callables as Ray tasks on the shared store (one effects ledger in
    PostgreSQL): 0 emails while the forks run, exactly 1 when the winner is merged, the losers' never."""
    import ray
    import test_fanout
    from agentsnap_core.layers.effects_ledger import Ledger
    from agentsnap_core.operations.fanout import fanout, merge_winner
    from agentsnap_core.testing.effects import Outbox

    ray.cloudpickle.register_pickle_by_value(test_fanout)  # the agent and its tool travel to the workers by value
    for k, v in {**RAY_ENV, "AGENTSNAP_EFFECTS_KEY": KEY, "XDG_CONFIG_HOME": str(tmp_path / "config"),
                 test_fanout.OUTBOX_ENV: str(tmp_path / "outbox.jsonl")}.items():
        monkeypatch.setenv(k, v)
    box = Outbox(tmp_path / "outbox.jsonl")
    with Repo.init(tmp_path / "agent", store_url=combined_url) as repo:
        (repo.root / "task.txt").write_text("write to the boss\n")
        repo.snapshot("base")
        res = fanout(repo, 4, test_fanout.mail_agent, backend="ray", address=ray_cluster["address"], timeout=120)
        print(f"ray: {ray_cluster['mode']}; {'; '.join(res.notes)}")
        assert [r.status for r in res.results] == ["ok"] * 4, [r.error for r in res.results]
        assert box.emails() == []
        win = res.winner
        assert win is not None
        merged = merge_winner(repo, res)
        assert len(merged["effects_applied"]) == 1
        assert box.emails() == [{"to": "boss@example.com", "body": f"fork {win.index}: done"}]
        led = Ledger.for_repo(repo).sync()
        losers = {led.lineage_of(r.branch) for r in res.results if r is not win}
        assert sorted(d.status for d in led.deferred.values() if d.lineage in losers) == ["deferred"] * 3
        assert repo.verify()["ok"]


HANG, TIMEOUT = 600, 45  #: seconds: fork 2 hangs well past the timeout, which the others never come near


def sleepy_agent(ctx: Any) -> float:
    """Fork 2 hangs; the others score their index."""
    if ctx.index == 2:
        time.sleep(HANG)
    return float(ctx.index)


def test_ray_timed_out_forks_are_reported_the_rest_complete(
        ray_cluster: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A command past --timeout is killed inside its task; a callable past it is cancelled by the driver.

    Load-independent: fork 2 hangs for far longer (600 s) than the timeout, and the timeout (60 s) is far
    longer than forks 1 and 3 need even on a busy 2-core machine, so no outcome depends on machine speed.
    """
    import ray
    from agentsnap_core.operations.fanout import fanout

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    for k, v in {**RAY_ENV, "AGENTSNAP_EFFECTS_KEY": KEY, "XDG_CONFIG_HOME": str(tmp_path / "config")}.items():
        monkeypatch.setenv(k, v)
    with Repo.init(tmp_path / "agent") as repo:  # a directory store: Ray tasks on this machine use worktrees
        (repo.root / "a.txt").write_text("a\n")
        repo.snapshot("base")
        cmd = f'if [ "$AGENTSNAP_FORK_INDEX" = 2 ]; then sleep {HANG}; fi; echo AGENTSNAP_SCORE=$AGENTSNAP_FORK_INDEX'
        for run in (cmd, sleepy_agent):
            res = fanout(repo, 3, run, backend="ray", address=ray_cluster["address"], timeout=TIMEOUT)
            by = {r.index: r for r in res.results}
            assert by[2].status == "timeout", by[2]
            assert [by[1].status, by[3].status] == ["ok", "ok"] and res.winner is not None and res.winner.index == 3
            assert any("same path" in n for n in res.notes)
            print(f"{'command' if run is cmd else 'callable'} fork 2: {by[2].error}")
