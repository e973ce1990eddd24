"""Fan-out: run N forks of an agent in parallel, score them, merge the winner back.

``fanout(repo, 12, run="python agent.py", score="python score.py", merge="best")`` forks 12 branches
from a snapshot (:meth:`Repo.fork`, irreversible effects deferred), materialises each in its own
directory, runs the command (or a Python callable) there with ``AGENTSNAP_FORK_INDEX`` (1..N),
``AGENTSNAP_FORK_SEED`` and ``AGENTSNAP_FORK_BRANCH`` set, snapshots the result on the fork's branch,
scores it and ranks the forks. With ``merge="best"`` the best branch is merged back into HEAD
(:func:`agentsnap_core.operations.merge.merge`), which runs the winner's deferred effects exactly once; the losers'
stay deferred.

Where a score comes from, first match wins:

1. ``score``: a command run in the fork's directory (the last line of its stdout that is a number),
   or a callable ``score(ctx) -> float``;
2. a run callable's return value, when it is a number;
3. a line ``AGENTSNAP_SCORE=<float>`` the run printed (the last one);
4. a number the run wrote to the file named by ``AGENTSNAP_SCORE_FILE`` (outside the fork's tree).

Backends: ``local`` (default: one child process per fork, ``parallel`` at a time; a timed-out fork's
process group is killed) and ``ray`` (each fork a Ray task; with a repository bound to a shared
PostgreSQL+S3 store a task checks the base out straight from the shared store, so nothing is copied
between machines). A failed, killed or timed-out fork is reported, never fatal.

A fan-out is identified by its base snapshot, its command(s) and N (:func:`run_id`); its branches are
``fanout-<id8>-<i>``. Running the same fan-out again skips forks whose result snapshot exists and
re-runs the others from the base.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import multiprocessing
import multiprocessing.connection
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import types
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from agentsnap_core.errors import AgentSnapError, InvalidInput
from agentsnap_core.layers import world
from agentsnap_core.repository.repo import PRIMARY, STORE_DIR, WORKTREE_PATH, Repo, git_held_back_note
from agentsnap_core.stores.base import RefUpdate

__all__ = ["BACKENDS", "FanoutResult", "ForkContext", "ForkResult", "fanout", "merge_winner", "run_id"]

BACKENDS = ("local", "ray")
MERGE_MODES = ("best", "none")
SCORE_LINE = re.compile(r"^\s*AGENTSNAP_SCORE\s*=\s*(\S+)\s*$", re.MULTILINE)
#: how much of a fork's output is kept in its result
OUTPUT_TAIL = 4000
#: extra seconds the local backend grants a command fork past ``timeout`` to snapshot before it is killed
GRACE = 30.0
RunFn = Callable[["ForkContext"], Any]
Event = Callable[[str, "ForkResult | int"], None]


@dataclass
class ForkContext:
    """What a run or score callable gets: where its fork lives and who it is."""

    index: int  #: 1..N, the number in the branch name
    seed: int
    branch: str
    path: Path  #: the fork's working directory (its own checkout)
    repo: Repo  #: the fork's repository (HEAD = its branch): ``Effects(ctx.repo)`` defers irreversible calls
    score_file: Path  #: write a number here to report a score
    output: str = ""  #: the run's output, for a score callable


@dataclass
class ForkResult:
    """One fork's outcome. ``status``: ok, failed or timeout."""

    index: int
    branch: str
    status: str
    score: float | None = None
    snapshot: str | None = None
    seconds: float = 0.0
    returncode: int | None = None
    error: str | None = None
    resumed: bool = False  #: finished in an earlier run of the same fan-out (skipped now)
    output: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class FanoutResult:
    """All forks of one fan-out, the winner and (with ``merge="best"``) what merging it did."""

    run_id: str
    base: str
    backend: str
    results: list[ForkResult]
    minimize: bool = False
    merge: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)

    def ranked(self) -> list[ForkResult]:
        """Scored forks best first (ties: lower index first), then the rest by index."""
        sign = 1.0 if self.minimize else -1.0
        scored = sorted((r for r in self.results if r.status == "ok" and r.score is not None),
                        key=lambda r: (sign * float(r.score), r.index))  # type: ignore[arg-type]
        rest = sorted((r for r in self.results if r not in scored), key=lambda r: r.index)
        return scored + rest

    @property
    def winner(self) -> ForkResult | None:
        top = self.ranked()[:1]
        return top[0] if top and top[0].status == "ok" and top[0].score is not None else None

    def to_dict(self) -> dict[str, Any]:
        win = self.winner
        return {"run": self.run_id, "base": self.base, "backend": self.backend, "minimize": self.minimize,
                "winner": win.branch if win else None, "forks": [r.to_dict() for r in self.ranked()],
                "merge": self.merge, "notes": self.notes}


def run_id(base: str, run: str | RunFn, score: str | RunFn | None, n: int) -> str:
    """The identity of a fan-out: base snapshot + command(s) + N (callables by module and name)."""
    doc = {"base": base, "run": _describe(run), "score": _describe(score), "n": int(n)}
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:16]


def _describe(fn: str | RunFn | None) -> str | None:
    """A command as given; a callable by module, name and a digest of its code (an edited agent is a new run)."""
    if fn is None or isinstance(fn, str):
        return fn
    code = getattr(fn, "__code__", None)
    digest = hashlib.sha256(_const_bytes(code)).hexdigest()[:16] if code is not None else ""
    return f"{getattr(fn, '__module__', '?')}:{getattr(fn, '__qualname__', type(fn).__qualname__)}:{digest}"


def _const_bytes(value: Any) -> bytes:
    """Stable bytes of a code object and its constants (``marshal`` output depends on reference counts)."""
    if isinstance(value, types.CodeType):
        return b"\x01".join([value.co_code, repr(value.co_names).encode(), *map(_const_bytes, value.co_consts)])
    if isinstance(value, (tuple, frozenset)):
        items = [_const_bytes(v) for v in value]
        return b"(" + b",".join(sorted(items) if isinstance(value, frozenset) else items) + b")"
    return repr(value).encode()


# ====================================================================== one fork (runs in any process)
@dataclass
class ForkJob:
    """Everything a worker needs to run one fork (picklable, for child processes and Ray tasks)."""

    run_id: str
    index: int
    seed: int
    branch: str
    base: str
    run: str | RunFn
    score: str | RunFn | None
    store: str  #: the store directory (local) or the shared store URL
    shared: bool
    workdir: str | None  #: where to check the fork out; None = a temporary directory (removed after)
    timeout: float | None
    keep: bool = False


def checkout(job: ForkJob, path: Path) -> Repo:
    """Make ``path`` a checkout of the job's branch holding the base snapshot's tree and trace."""
    if path.exists():
        _rmtree(path)  # a re-run fork starts from the base again
    path.mkdir(parents=True)
    if job.shared:  # a checkout of the shared store: objects and refs stay where they are
        repo = Repo.init(path, store_url=job.store)
        repo.refs.set_head(PRIMARY, f"refs/heads/{job.branch}", None)
    else:  # a linked worktree of the local store
        (path / STORE_DIR).write_text(json.dumps({"store": job.store, "worktree": job.branch}) + "\n")
        place = Path(job.store) / "wt" / job.branch  # where it is (Repo.checked_out_at): once the fork's directory
        place.mkdir(parents=True, exist_ok=True)     # is removed, 'agentsnap branch -d' forgets it, as after fork
        (place / WORKTREE_PATH).write_text(str(path) + "\n")
        repo = Repo(path, Path(job.store), job.branch)
        repo.refs.set_head(job.branch, f"refs/heads/{job.branch}", None)
    base = repo.get(job.base)
    entries, _, held = repo.guard_git_code((base.layers.get("world") or {}).get("tree"), repo.world_entries(base), [])
    world.materialize(repo.objects, path, entries, [], True)
    if held:  # (said, never silent: a fan-out of a snapshot pulled from elsewhere)
        print(f"warning: fork {job.branch}: {git_held_back_note(held, job.base)}", file=sys.stderr)
    repo.set_messages(repo.read_layer(job.base, "trace") or [])
    return repo


def run_fork(job: ForkJob) -> dict[str, Any]:
    """Check the fork out, run it, score it, snapshot it; return a :class:`ForkResult` as a dict."""
    t0 = time.monotonic()
    path, score_file = _paths(job)
    res = ForkResult(job.index, job.branch, "failed")
    repo: Repo | None = None
    try:
        score_file.unlink(missing_ok=True)
        score_file.parent.mkdir(parents=True, exist_ok=True)
        repo = checkout(job, path)
        ctx = ForkContext(job.index, job.seed, job.branch, path, repo, score_file)
        deadline = None if job.timeout is None else t0 + job.timeout
        env = {**os.environ, "AGENTSNAP_FORK_INDEX": str(job.index), "AGENTSNAP_FORK_SEED": str(job.seed),
               "AGENTSNAP_FORK_BRANCH": job.branch, "AGENTSNAP_FANOUT_RUN": job.run_id,
               "AGENTSNAP_SCORE_FILE": str(score_file)}
        env.pop("AGENTSNAP_DIR", None)  # the command finds its own checkout from its working directory
        returned: Any = None
        if isinstance(job.run, str):
            res.returncode, ctx.output, timed_out = _shell(job.run, path, env, deadline)
            res.output = ctx.output[-OUTPUT_TAIL:]
            if timed_out:
                res.status, res.error = "timeout", f"the run did not finish within {job.timeout:g} s; killed"
            elif res.returncode != 0:
                res.error = f"the run exited with status {res.returncode}"
        else:
            returned = job.run(ctx)
        if res.error is None:
            res.score, res.error = _score(job, ctx, returned, env, deadline)
            if res.error is None:
                res.status = "ok"
            elif deadline is not None and time.monotonic() >= deadline:
                res.status = "timeout"
    except Exception as exc:  # a broken fork is reported, not fatal
        res.error = f"{type(exc).__name__}: {exc}"[:2000]
    try:
        if repo is not None:
            res.snapshot = _snapshot_result(repo, job, res).id
    except Exception as exc:
        res.error = (res.error + "; " if res.error else "") + f"snapshot failed: {type(exc).__name__}: {exc}"[:500]
        res.status = "failed"
    finally:
        if repo is not None:
            repo.close()
        if not job.keep:
            _cleanup(job)
    res.seconds = round(time.monotonic() - t0, 3)
    return res.to_dict()


def _paths(job: ForkJob) -> tuple[Path, Path]:
    """``(checkout, score file)`` of a job: its worktree, or a directory in this machine's temp dir named
    after the run and fork (so a re-run replaces what a killed attempt left there)."""
    if job.workdir:
        return Path(job.workdir), Path(job.workdir + ".score")
    top = Path(tempfile.gettempdir()) / f"agentsnap-fanout-{job.run_id[:8]}-{job.index}"
    return top / "work", top / "score"


def _cleanup(job: ForkJob) -> None:
    path, score_file = _paths(job)
    _rmtree(path)
    score_file.unlink(missing_ok=True)
    if not job.workdir and path.parent.is_dir():
        _rmtree(path.parent)


def _shell(cmd: str, cwd: Path, env: dict[str, str], deadline: float | None) -> tuple[int | None, str, bool]:
    """Run ``cmd`` in its own session; on the deadline kill its whole process group."""
    global _STARTING
    _STARTING = True  # a stop asked for until the command's group is known waits for it (_on_stop)
    try:
        proc = subprocess.Popen(cmd, shell=True, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        _COMMANDS.add(proc.pid)
    finally:
        _STARTING = False
        if _STOP_ASKED:
            _stop_now()
    try:
        out, _ = proc.communicate(timeout=None if deadline is None else max(0.0, deadline - time.monotonic()))
        return proc.returncode, out.decode(errors="replace"), False
    except subprocess.TimeoutExpired:
        _killpg(proc.pid)
        try:
            out, _ = proc.communicate(timeout=5)
        except subprocess.TimeoutExpired:  # something that left the group still holds the pipe
            out = b""
        return None, out.decode(errors="replace"), True
    finally:
        _COMMANDS.discard(proc.pid)


def _score(job: ForkJob, ctx: ForkContext, returned: Any, env: dict[str, str],
           deadline: float | None) -> tuple[float | None, str | None]:
    if isinstance(job.score, str):
        code, out, timed_out = _shell(job.score, ctx.path, {**env, "AGENTSNAP_RUN_OUTPUT": ctx.output[-OUTPUT_TAIL:]},
                                      deadline)
        if timed_out:
            return None, "the score command did not finish in time; killed"
        value = _last_number(out)
        if value is None:
            return None, f"the score command printed no number (exit {code})"
        return _as_score(value, "the score command")
    if job.score is not None:
        return _as_score(job.score(ctx), "the score callable")
    if returned is not None:
        return _as_score(returned, "the run callable")
    found = SCORE_LINE.findall(ctx.output)
    if found:
        return _as_score(found[-1], "the AGENTSNAP_SCORE line")
    if ctx.score_file.exists():
        return _as_score(ctx.score_file.read_text().strip(), "the score file")
    return None, "no score: give a score command, print AGENTSNAP_SCORE=<number> or write $AGENTSNAP_SCORE_FILE"


def _as_score(value: Any, what: str) -> tuple[float | None, str | None]:
    try:
        f = float(value)
    except (TypeError, ValueError):
        return None, f"{what} gave {str(value)[:80]!r}, not a number"
    return (f, None) if math.isfinite(f) else (None, f"{what} gave {f}, not a finite number")


def _last_number(text: str) -> float | None:
    """The last line of ``text`` that is a number; nan or inf there (a scorer that failed to compute) is the
    score as given - the caller refuses it - never a way to fall back to an earlier number."""
    for line in reversed(text.strip().splitlines()):
        try:
            return float(line.strip())
        except ValueError:
            continue
    return None


def _snapshot_result(repo: Repo, job: ForkJob, res: ForkResult) -> Any:
    meta = {"fanout": {"run": job.run_id, "index": job.index, "seed": job.seed, "status": res.status,
                       "score": res.score, "error": res.error}}
    what = f"score {res.score:g}" if res.score is not None else res.status
    return repo.snapshot(f"fanout {job.run_id[:8]} fork {job.index}: {what}", agent="fanout", meta=meta)


def _killpg(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _rmtree(path: Path) -> None:
    def writable(fn: Any, p: str, _exc: Any) -> None:  # read-only dirs from a snapshot
        os.chmod(os.path.dirname(p), 0o700)
        os.chmod(p, 0o700) if os.path.isdir(p) else None
        fn(p)

    if path.exists():
        shutil.rmtree(path, onerror=writable)


# ====================================================================== backends
#: process groups of the commands this process is running (a stopped fork stops them too)
_COMMANDS: set[int] = set()
#: a command is being started (its process group not yet in _COMMANDS): a stop waits until it is
_STARTING = False
_STOP_ASKED = False


def _on_stop(_sig: int, _frame: Any) -> None:
    """SIGTERM in a fork's process: kill its commands' process groups and end. Asked while a command is being
    started (under load the command can run before ``Popen`` returns here), it is done as soon as that command's
    group is known: else the command would outlive the fork."""
    global _STOP_ASKED
    if _STARTING:
        _STOP_ASKED = True
        return
    _stop_now()


def _stop_now() -> None:
    for pid in list(_COMMANDS):
        _killpg(pid)
    os._exit(128 + signal.SIGTERM)


def _child(job: ForkJob, conn: Any, parent: int) -> None:
    os.setsid()  # its own process group, out of the terminal's: the parent decides when it stops
    signal.signal(signal.SIGTERM, _on_stop)
    _stop_with(parent)
    try:
        conn.send(run_fork(job))
    finally:
        conn.close()


def _stop_with(parent: int) -> None:
    """Get SIGTERM (:func:`_on_stop`) when the fan-out's process dies, even by SIGKILL (Linux ``PR_SET_PDEATHSIG``):
    its own session keeps it out of the driver's process group, so a killed driver otherwise left every fork
    running its agent, unwatched, to the end."""
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            return
    if os.getppid() != parent:  # it died before that took effect
        _stop_now()


def _run_local(jobs: list[ForkJob], parallel: int, on_result: Callable[[ForkResult], None],
               on_start: Callable[[int], None]) -> None:
    """One child process per fork (``fork`` start method: callables need not be picklable)."""
    mp = multiprocessing.get_context("fork")
    queue = list(jobs)
    running: dict[int, tuple[Any, Any, float, ForkJob]] = {}
    try:
        while queue or running:
            while queue and len(running) < parallel:
                job = queue.pop(0)
                recv, send = mp.Pipe(duplex=False)
                proc = mp.Process(target=_child, args=(job, send, os.getpid()), daemon=False)
                proc.start()
                send.close()
                running[job.index] = (proc, recv, time.monotonic(), job)
                on_start(job.index)
            waits = [r for _, r, _, _ in running.values()] + [p.sentinel for p, _, _, _ in running.values()]
            multiprocessing.connection.wait(waits, timeout=0.25)
            for index, (proc, recv, started, job) in list(running.items()):
                alive = proc.is_alive()  # before reading: a child that exited has sent all it ever will
                result = _receive(recv)
                if result is None and not alive:
                    result = _lost(job, started, _exit_text(proc.exitcode))
                elif result is None and job.timeout is not None:
                    if time.monotonic() - started > job.timeout + (0.0 if callable(job.run) else GRACE):
                        _stop_child(proc)
                        result = _lost(job, started, f"did not finish within {job.timeout:g} s; killed", "timeout")
                if result is None:
                    continue
                proc.join()
                recv.close()
                del running[index]
                on_result(result)
    finally:  # interrupted: no fork outlives the fan-out
        for proc, recv, _, _ in running.values():
            _stop_child(proc)
            recv.close()


def _stop_child(proc: Any) -> None:
    """SIGTERM (the child kills its command's process group), then SIGKILL if it lingers."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        pass
    proc.join(5)
    if proc.is_alive():
        _killpg(proc.pid)
    proc.join()


def _receive(recv: Any) -> ForkResult | None:
    try:
        return ForkResult(**recv.recv()) if recv.poll() else None
    except (EOFError, OSError):
        return None


def _exit_text(code: int | None) -> str:
    if code is not None and code < 0:
        return f"the fork's process was killed by signal {-code} ({signal.Signals(-code).name})"
    return f"the fork's process exited with status {code} before reporting"


def _lost(job: ForkJob, started: float, error: str, status: str = "failed") -> ForkResult:
    """A fork whose worker died or was killed: report it, and snapshot what its tree holds when we can."""
    res = ForkResult(job.index, job.branch, status, error=error, seconds=round(time.monotonic() - started, 3))
    path, _ = _paths(job)  # on this machine (a Ray task on another node left its checkout there)
    if (path / STORE_DIR).exists():
        try:
            with Repo.open(path) as repo:
                res.snapshot = _snapshot_result(repo, job, res).id
        except Exception:  # noqa: BLE001 - the report matters more than the snapshot
            pass
    if not job.keep:
        _cleanup(job)
    return res


def _run_ray(jobs: list[ForkJob], parallel: int, address: str | None, on_result: Callable[[ForkResult], None],
             on_start: Callable[[int], None]) -> list[str]:
    """Each fork a Ray task (no retries: a killed fork is reported); results stream back as they finish."""
    try:
        import ray
    except ImportError:
        raise InvalidInput("the ray backend needs Ray: pip install 'ray>=2.40'") from None
    with contextlib.redirect_stdout(sys.stderr):  # Ray prints worker deaths to stdout: keep stdout for results
        return _ray_loop(ray, jobs, parallel, address, on_result, on_start)


def _ray_loop(ray: Any, jobs: list[ForkJob], parallel: int, address: str | None,
              on_result: Callable[[ForkResult], None], on_start: Callable[[int], None]) -> list[str]:
    notes = []
    started_here = not ray.is_initialized()
    if started_here:
        extra: dict[str, Any] = {} if address else {"include_dashboard": False}  # a new local instance
        try:
            ray.init(address=address, ignore_reinit_error=True, log_to_driver=False, **extra)
        except ConnectionError as exc:
            raise AgentSnapError(f"cannot connect to the Ray cluster at {address}: {exc}") from None
    notes.append(f"ray: {len(ray.nodes())} node(s), {ray.cluster_resources().get('CPU', 0):g} CPU")
    task = ray.remote(num_cpus=1, max_retries=0)(run_fork)
    queue = list(jobs)
    pending: dict[Any, tuple[ForkJob, float]] = {}
    try:
        while queue or pending:
            while queue and len(pending) < parallel:
                job = queue.pop(0)
                pending[task.remote(job)] = (job, time.monotonic())
                on_start(job.index)
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=0.25)
            for ref in ready:
                job, started = pending.pop(ref)
                try:
                    result = ForkResult(**ray.get(ref))
                except ray.exceptions.RayError as exc:
                    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
                    result = _lost(job, started, f"ray: {type(exc).__name__}: {text}"[:500])
                on_result(result)
            for ref, (job, started) in list(pending.items()):
                limit = None if job.timeout is None else job.timeout + (0.0 if callable(job.run) else GRACE)
                if limit is not None and time.monotonic() - started > limit:
                    ray.cancel(ref, force=True)
                    del pending[ref]
                    on_result(_lost(job, started, f"did not finish within {job.timeout:g} s; cancelled", "timeout"))
    finally:
        for ref in pending:  # interrupted: cancel what still runs
            ray.cancel(ref, force=True)
        if started_here:
            ray.shutdown()
    return notes


def _probe(address: str) -> None:
    """Fail fast (Ray itself retries for minutes) when nothing listens at the cluster address."""
    import socket

    host, _, port = address.removeprefix("ray://").rpartition(":")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=5).close()
    except (OSError, ValueError) as exc:
        raise AgentSnapError(f"cannot reach the Ray cluster at {address} ({exc}); start one with 'ray start --head' "
                             "or give its HOST:PORT") from None


# ====================================================================== the fan-out
def fanout(
    repo: Repo,
    n: int,
    run: str | RunFn,
    *,
    spec: str | None = None,
    score: str | RunFn | None = None,
    parallel: int | None = None,
    timeout: float | None = None,
    merge: str = "none",
    minimize: bool = False,
    backend: str = "local",
    address: str | None = None,
    seed: int = 0,
    worktrees: str | os.PathLike[str] | None = None,
    keep: bool = False,
    on_event: Event | None = None,
) -> FanoutResult:
    """Fork ``n`` branches at ``spec`` (default HEAD), run ``run`` in each, score, rank, maybe merge the best.

    Args:
        repo: the repository (its HEAD branch receives the merge).
        n: how many forks (1..10000).
        run: a shell command run in each fork's directory, or a callable ``run(ctx: ForkContext)`` (whose
            return value, when a number, is the score).
        spec: the snapshot to fork from.
        score: a shell command printing a number, or a callable ``score(ctx) -> float``; see the module doc.
        parallel: forks at a time (default: the CPU count locally, ``n`` on Ray).
        timeout: seconds per fork (run + score); a fork past it is killed and reported as ``timeout``.
        merge: ``best`` merges the winner into HEAD (its deferred effects run once), ``none`` only ranks.
        minimize: lower scores are better.
        backend: ``local`` (child processes) or ``ray`` (``address`` of the cluster; None = ``ray.init()``).
        seed: ``AGENTSNAP_FORK_SEED`` is ``seed + index``.
        worktrees: where local forks are checked out (default ``.agentsnap/fanout/<id8>/``).
        keep: keep the forks' directories after their snapshot (default: remove them).
        on_event: ``on_event("start", index)`` / ``on_event("done", ForkResult)`` as forks start and finish.
    """
    if not isinstance(n, int) or n < 1 or n > 10_000:
        raise InvalidInput(f"the fork count must be between 1 and 10000, not {n!r}")
    if backend not in BACKENDS:
        raise InvalidInput(f"unknown backend {backend!r}; use one of {', '.join(BACKENDS)}")
    if merge not in MERGE_MODES:
        raise InvalidInput(f"merge must be one of {', '.join(MERGE_MODES)}, not {merge!r}")
    if not (isinstance(run, str) and run.strip()) and not callable(run):
        raise InvalidInput("give a command (non-empty string) or a callable to run in each fork")
    if score is not None and not (isinstance(score, str) and score.strip()) and not callable(score):
        raise InvalidInput("the score must be a command (non-empty string) or a callable")
    if timeout is not None and not (timeout > 0 and math.isfinite(timeout)):  # (inf: every fork failed, OverflowError)
        raise InvalidInput(f"the timeout must be a positive, finite number of seconds, not {timeout!r} "
                           "(leave it out for no timeout)")
    if parallel is not None and parallel < 1:
        raise InvalidInput(f"--parallel must be at least 1, not {parallel}")
    parallel = parallel or (n if backend == "ray" else max(1, os.cpu_count() or 1))
    if backend == "ray":  # before anything is forked
        import importlib.util

        if importlib.util.find_spec("ray") is None:
            raise InvalidInput("the ray backend needs Ray: pip install 'ray>=2.40'")
        if address and address not in ("auto", "local"):
            _probe(address)
    base = repo.resolve(spec)
    if merge == "best":
        from agentsnap_core.operations.merge import _require_clean, merge_state

        if merge_state(repo) is not None:
            raise AgentSnapError("a merge is in progress here; finish or abort it before a fan-out with merge=best")
        _require_clean(repo)  # fail before any work, not after
    rid = run_id(base, run, score, n)
    prefix = f"fanout-{rid[:8]}"
    names = [f"{prefix}-{i}" for i in range(1, n + 1)]
    have = {name: oid for name, oid in repo.branches().items() if name in names}
    if not have:
        repo.fork(base, n, prefix=prefix)  # irreversible effects on these branches are deferred
        have = {name: base for name in names}
    elif len(have) != n:
        missing = sorted(set(names) - set(have))
        raise AgentSnapError(f"fan-out {rid[:8]} is incomplete (branches {', '.join(missing[:3])} are missing); "
                             f"delete its '{prefix}-*' branches to start it over")
    shared_url = _shared_url(repo)
    note = "ray: the store is a local directory, so every Ray node must see it at the same path" if (
        backend == "ray" and shared_url is None) else ""
    wt_root = Path(worktrees).resolve() if worktrees else repo.store_dir / "fanout" / rid[:8]
    results: dict[int, ForkResult] = {}
    jobs: list[ForkJob] = []
    emit = on_event or (lambda _kind, _item: None)
    for i, name in enumerate(names, start=1):
        tip = have[name]
        if tip != base:
            done = repo.manifest(tip).get("meta", {}).get("fanout") or {}
            if done.get("run") == rid and done.get("status") == "ok" and done.get("index") == i:
                results[i] = ForkResult(i, name, "ok", score=done.get("score"), snapshot=tip, resumed=True)
                emit("done", results[i])
                continue
            repo.update_refs([RefUpdate(f"refs/heads/{name}", base, tip)], f"fanout: re-run {name} from the base")
        use_shared = backend == "ray" and shared_url is not None
        jobs.append(ForkJob(rid, i, seed + i, name, base, run, score,
                            str(shared_url) if use_shared else str(repo.store_dir), use_shared,
                            None if use_shared else str(wt_root / str(i)), timeout, keep))

    def collect(res: ForkResult) -> None:
        results[res.index] = res
        emit("done", res)

    notes = [note] if note else []
    if jobs and backend == "local":
        _run_local(jobs, parallel, collect, lambda i: emit("start", i))
    elif jobs:
        notes += _run_ray(jobs, parallel, address, collect, lambda i: emit("start", i))
    for d in (wt_root, wt_root.parent) if not worktrees else (wt_root,):
        if not keep and d.is_dir() and not any(d.iterdir()):
            d.rmdir()
    out = FanoutResult(rid, base, backend, [results[i] for i in sorted(results)], minimize, None, notes)
    if merge == "best" and out.winner is not None:
        out.merge = merge_winner(repo, out)
    elif merge == "best":
        out.notes.append("no fork produced a score: nothing merged")
    return out


def merge_winner(repo: Repo, result: FanoutResult) -> dict[str, Any]:
    """Merge the best fork into HEAD; its deferred effects run exactly once, the losers' stay deferred."""
    from agentsnap_core.layers.effects_ledger import Ledger
    from agentsnap_core.operations import merge as merge_mod

    win = result.winner
    if win is None:
        raise AgentSnapError("no fork of this fan-out produced a score; nothing to merge")
    res = merge_mod.merge(repo, win.branch, message=f"fanout {result.run_id[:8]}: merge {win.branch} "
                                                     f"(best, score {win.score:g})")
    out = res.as_dict()
    out["branch"] = win.branch
    led = Ledger.for_repo(repo).sync()
    if led.entries:
        lineage = led.lineage_of(win.branch)
        failed = {}  # deferred calls the merge ran and whose tool raised: still deferred, but not "tool not loaded"
        for st in led.keys.values():
            src = (st.intent or {}).get("from")
            if st.status == "failed" and isinstance(src, list) and len(src) == 2 and src[0] == lineage:
                failed[src[1]] = {"key": src[1], "target": st.key, "error": (st.outcome or {}).get("error")}
        waiting = [d.key for d in led.deferred.values() if d.lineage == lineage and d.status == "deferred"]
        out["effects_pending"] = sorted(k for k in waiting if k not in failed)
        out["effects_failed"] = [failed[k] for k in sorted(waiting) if k in failed]
        out["effects_applied"] = sorted(d.key for d in led.deferred.values() if d.lineage == lineage and d.status == "applied")
    return out


def _shared_url(repo: Repo) -> str | None:
    """The (unmasked) URL of the shared store a repository is bound to, or None for a directory store."""
    local = getattr(repo.store, "local", None)
    if local is None:
        return None
    from agentsnap_core.stores import STORE_URL_KEY

    url = local.refs.get_config(STORE_URL_KEY)
    return str(url) if url else None
