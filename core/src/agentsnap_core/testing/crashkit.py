"""Crash injection and power-loss simulation for stores.

A *scenario* prepares a store once (the template), then each *kill point* copies the template,
forks a child that runs the scenario's operation with counted system calls, and SIGKILLs the
child right before its N-th counted call (``os.write``, ``os.fsync``, ``os.replace``,
``os.rename``, ``os.unlink``, ``os.remove``, ``syncfs`` and every ``open``/``mkdir`` for
writing, seen through an audit hook). The parent then checks the store as a user would find it
after the crash: ``verify`` is clean, every ref names a complete snapshot, the last snapshot the
child reported as finished restores byte-identically, and every temp file left behind is
reported by ``verify`` (and removed by ``gc``).

SIGKILL keeps the OS page cache, so a second mode simulates **power loss**: the child streams a
journal of what it wrote, renamed, created and made durable (fsync of a file or a directory,
``syncfs``), and after the kill the parent discards everything not yet durable - files whose
data was not fsynced are truncated to zero bytes, directory entries created or renamed since the
directory's last fsync are removed. SQLite files are left alone: SQLite makes its own commits
durable (``synchronous=FULL``), which is the assumption the store relies on. A store that never
makes its objects durable before a ref names them fails this mode (see :func:`disable_barrier`).

Usage (see ``core/tests/test_crash.py``)::

    report = run_points(scenario, tmp_path, points=40, seed=1, power_loss=True)
    assert report.losses == 0
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import stat
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_SQLITE_SUFFIXES = (".sqlite", ".sqlite-wal", ".sqlite-shm", ".sqlite-journal")
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


class Recorder:
    """Counts write-like calls in a child process, journals them, and kills the child at one of them."""

    def __init__(self, journal: str, watch: str, kill_at: int | None) -> None:
        self.watch = os.path.realpath(watch)
        self.kill_at = kill_at
        self.count = 0
        self._real_write = os.write
        self._fd = os.open(journal, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        self._active = False

    # ------------------------------------------------------------ journal
    def log(self, *event: Any) -> None:
        self._real_write(self._fd, (json.dumps(event) + "\n").encode())

    def note(self, **payload: Any) -> None:
        """Tell the parent something finished (e.g. ``note(step=2, id=snap.id)``)."""
        self.log("n", payload)

    def _watched(self, path: str) -> bool:
        return (path == self.watch or path.startswith(self.watch + "/")) and not path.endswith(_SQLITE_SUFFIXES)

    def _tick(self) -> None:
        if not self._active:
            return
        self.count += 1
        if self.kill_at is not None and self.count >= self.kill_at:
            self.log("k", self.count)
            os.kill(os.getpid(), signal.SIGKILL)

    # ------------------------------------------------------------ patches
    def install(self) -> None:
        """Patch the calls in this (child) process; irreversible, so only ever call it in a child."""
        from agentsnap_core.stores import local as localstore

        rec = self
        real = {n: getattr(os, n) for n in ("write", "fsync", "replace", "rename", "unlink", "remove")}

        def write(fd: int, data: Any) -> int:
            rec._tick()
            return real["write"](fd, data)  # type: ignore[no-any-return]

        def fsync(fd: Any) -> None:
            rec._tick()
            real["fsync"](fd)
            num = fd if isinstance(fd, int) else fd.fileno()
            try:
                path = os.readlink(f"/proc/self/fd/{num}")
            except OSError:
                return
            if rec._watched(path):
                rec.log("s", path)

        def rename_like(name: str) -> Callable[..., None]:
            def call(src: Any, dst: Any, *a: Any, **kw: Any) -> None:
                rec._tick()
                real[name](src, dst, *a, **kw)
                s, d = os.path.realpath(os.path.dirname(os.path.abspath(src))), os.path.abspath(dst)
                s = os.path.join(s, os.path.basename(os.fspath(src)))
                d = os.path.join(os.path.realpath(os.path.dirname(d)), os.path.basename(d))
                if rec._watched(d) or rec._watched(s):
                    rec.log("r", s, d)

            return call

        def unlink_like(name: str) -> Callable[..., None]:
            def call(path: Any, *a: Any, **kw: Any) -> None:
                rec._tick()
                real[name](path, *a, **kw)
                p = os.path.abspath(path)
                p = os.path.join(os.path.realpath(os.path.dirname(p)), os.path.basename(p))
                if rec._watched(p):
                    rec.log("u", p)

            return call

        os.write = write  # type: ignore[assignment]
        os.fsync = fsync  # type: ignore[assignment]
        os.replace = rename_like("replace")  # type: ignore[assignment]
        os.rename = rename_like("rename")  # type: ignore[assignment]
        os.unlink = unlink_like("unlink")  # type: ignore[assignment]
        os.remove = unlink_like("remove")  # type: ignore[assignment]
        real_syncfs = localstore._syncfs
        if real_syncfs is not None:

            def syncfs(fd: int) -> int:
                rec._tick()
                rc = int(real_syncfs(fd))
                if rc == 0:
                    rec.log("S")
                return rc

            localstore._syncfs = syncfs  # type: ignore[assignment]
        sys.addaudithook(self._audit)
        self._active = True

    def _audit(self, event: str, args: tuple[Any, ...]) -> None:
        if not self._active:
            return
        if event == "open":
            path, mode, flags = (list(args) + [None, None, None])[:3]
            if not isinstance(path, (str, bytes, os.PathLike)):
                return
            writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
                isinstance(flags, int) and bool(flags & _WRITE_FLAGS)
            )
            if not writing:
                return
            p = _abs(path)
            if not self._watched(p):
                return
            self._tick()
            self.log("w", p, not os.path.lexists(p))
        elif event == "os.mkdir":
            p = _abs(args[0])
            if self._watched(p) and not os.path.lexists(p):  # makedirs(exist_ok=True) tries existing ones too
                self._tick()
                self.log("m", p)


def _abs(path: Any) -> str:
    p = os.path.abspath(os.fsdecode(path))
    return os.path.join(os.path.realpath(os.path.dirname(p)), os.path.basename(p))


# ---------------------------------------------------------------- power loss


@dataclass
class PowerLoss:
    """Replays a child's journal and discards what was not durable at the crash."""

    data_dirty: set[str] = field(default_factory=set)
    entry_dirty: set[str] = field(default_factory=set)

    def replay(self, events: list[list[Any]]) -> PowerLoss:
        for ev in events:
            tag = ev[0]
            if tag == "w":
                self.data_dirty.add(ev[1])
                if ev[2]:
                    self.entry_dirty.add(ev[1])
            elif tag == "m":
                self.entry_dirty.add(ev[1])
            elif tag == "r":
                src, dst = ev[1], ev[2]
                self.data_dirty.discard(dst)
                if src in self.data_dirty:
                    self.data_dirty.discard(src)
                    self.data_dirty.add(dst)
                self.entry_dirty.discard(src)
                self.entry_dirty.add(dst)
            elif tag == "s":
                path = ev[1]
                self.data_dirty.discard(path)
                self.entry_dirty = {p for p in self.entry_dirty if os.path.dirname(p) != path}
            elif tag == "S":
                self.data_dirty.clear()
                self.entry_dirty.clear()
            elif tag == "u":
                self.data_dirty.discard(ev[1])
                self.entry_dirty.discard(ev[1])
        return self

    def apply(self) -> dict[str, int]:
        """Remove non-durable directory entries, truncate non-durable file data; return counts."""
        removed = truncated = 0
        for p in sorted(self.entry_dirty, key=lambda s: s.count("/")):
            if os.path.lexists(p):
                if os.path.isdir(p) and not os.path.islink(p):
                    _force_rmtree(p)
                else:
                    os.unlink(p)
                removed += 1
        for p in self.data_dirty:
            try:
                st = os.lstat(p)
            except FileNotFoundError:
                continue
            if stat.S_ISREG(st.st_mode) and st.st_size:
                os.chmod(p, st.st_mode | 0o200)
                os.truncate(p, 0)
                os.chmod(p, stat.S_IMODE(st.st_mode))
                truncated += 1
        return {"removed": removed, "truncated": truncated}


def _force_rmtree(path: str) -> None:
    for dirpath, dirnames, _files in os.walk(path):
        for d in dirnames:
            os.chmod(os.path.join(dirpath, d), 0o700)
    shutil.rmtree(path, ignore_errors=True)


# ---------------------------------------------------------------- running a child


@dataclass
class ChildRun:
    killed: bool
    exit_code: int | None
    count: int
    notes: list[dict[str, Any]]
    events: list[list[Any]]
    error: str = ""


def run_child(work: Callable[[Recorder], None], journal: Path, watch: Path, kill_at: int | None) -> ChildRun:
    """Fork, run ``work`` with counted calls, SIGKILL at call ``kill_at`` (None: run to the end)."""
    if journal.exists():
        journal.unlink()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        code = 0
        rec = None
        try:
            rec = Recorder(str(journal), str(watch), kill_at)
            rec.install()
            work(rec)
            rec._active = False
            rec.log("e", rec.count)
        except BaseException:
            code = 3
            if rec is not None:
                rec._active = False
                rec.log("x", traceback.format_exc())
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    events = [json.loads(line) for line in journal.read_text().splitlines() if line.strip()]
    notes = [e[1] for e in events if e[0] == "n"]
    errors = [e[1] for e in events if e[0] == "x"]
    ends = [e[1] for e in events if e[0] in ("e", "k")]
    killed = os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
    exit_code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else None
    return ChildRun(killed, exit_code, ends[-1] if ends else 0, notes, events, errors[0] if errors else "")


# ---------------------------------------------------------------- scenarios and the driver


@dataclass
class Scenario:
    """One operation to crash: ``setup`` builds the template, ``work`` runs in the child, ``check`` judges."""

    name: str
    setup: Callable[[Path], dict[str, Any]]
    work: Callable[[Path, dict[str, Any], Recorder], None]
    check: Callable[[Path, dict[str, Any], list[dict[str, Any]]], list[str]]


@dataclass
class Report:
    scenario: str
    mode: str
    total_calls: int = 0
    points: list[int] = field(default_factory=list)
    killed: int = 0
    finished: int = 0
    stores_verified: int = 0
    losses: int = 0
    failures: list[str] = field(default_factory=list)
    discarded: dict[str, int] = field(default_factory=lambda: {"removed": 0, "truncated": 0})
    litter: int = 0

    def line(self) -> str:
        return (
            f"crash[{self.scenario}/{self.mode}]: {len(self.points)} points of {self.total_calls} calls, "
            f"{self.killed} killed, {self.stores_verified} stores verified, {self.losses} losses, "
            f"litter reported {self.litter}, discarded {self.discarded}"
        )


def choose_points(total: int, n: int, seed: int) -> list[int]:
    """``n`` distinct kill points in ``1..total`` (first and last always), seeded."""
    if total <= n:
        return list(range(1, total + 1))
    rng = random.Random(seed)
    picked = {1, total} | set(rng.sample(range(2, total), n - 2))
    return sorted(picked)


def run_points(
    scenario: Scenario,
    base: Path,
    points: int,
    seed: int,
    *,
    power_loss: bool = False,
    patch_child: Callable[[], None] | None = None,
    stop_after_failures: int | None = None,
) -> Report:
    """Crash ``scenario`` at ``points`` seeded call counts and check the store after each crash."""
    base.mkdir(parents=True, exist_ok=True)
    template = base / "template"
    ctx = scenario.setup(template)
    journal = base / "journal.jsonl"

    def child(target: Path) -> Callable[[Recorder], None]:
        def work(rec: Recorder) -> None:
            if patch_child is not None:
                patch_child()
            scenario.work(target, ctx, rec)

        return work

    mode = "power-loss" if power_loss else "kill"
    report = Report(scenario.name, mode)
    # a dry run counts the calls and proves the scenario itself works
    dry = base / "dry"
    shutil.copytree(template, dry, symlinks=True)
    run = run_child(child(dry), journal, dry, None)
    if run.exit_code != 0:
        raise AssertionError(f"{scenario.name}: the uninterrupted run failed: {run.error}")
    problems = scenario.check(dry, ctx, run.notes)
    if problems:
        raise AssertionError(f"{scenario.name}: the uninterrupted run does not check out: {problems}")
    report.total_calls = run.count
    shutil.rmtree(dry, ignore_errors=True)
    report.points = choose_points(run.count, points, seed)
    for n in report.points:
        target = base / f"p{n}"
        shutil.copytree(template, target, symlinks=True)
        run = run_child(child(target), journal, target, n)
        if run.error:
            report.failures.append(f"point {n}: child failed before the kill: {run.error.splitlines()[-1]}")
        if run.killed:
            report.killed += 1
        else:
            report.finished += 1
        if power_loss:
            done = PowerLoss().replay(run.events).apply()
            for k, v in done.items():
                report.discarded[k] += v
        try:
            problems = scenario.check(target, ctx, run.notes)
        except Exception as exc:  # a check that cannot even open the store is a loss
            problems = [f"{type(exc).__name__}: {exc}"]
        report.stores_verified += 1
        report.litter += ctx.get("_litter", 0)
        if problems:
            report.losses += 1
            report.failures.append(f"point {n}: " + "; ".join(problems)[:400])
            if stop_after_failures is not None and report.losses >= stop_after_failures:
                _force_rmtree(str(target))
                break
        _force_rmtree(str(target))
    return report


def disable_barrier() -> None:
    """Control for the power-loss mode: a store that never makes objects durable before a ref names them."""
    from agentsnap_core.stores.local import LocalObjects

    def barrier(self: LocalObjects) -> None:  # a batch's pack is still written (else nothing is), never fsynced
        if self._buffer:
            self._spill(durable=False)
        with self._lock:
            self._pending_files, self._pending_dirs = [], set()

    LocalObjects.barrier = barrier  # type: ignore[method-assign]


__all__ = ["ChildRun", "PowerLoss", "Recorder", "Report", "Scenario", "choose_points", "disable_barrier",
           "run_child", "run_points"]
