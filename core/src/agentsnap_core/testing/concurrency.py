"""A shared concurrency workload: many processes snapshotting, forking and moving refs on one store.

``run_workload`` starts ``workers`` processes (spawned, so each has its own connections); each does
``ops`` seeded random operations and returns every ref update that succeeded. ``check_workload``
then proves nothing was lost: for every ref the reflog holds exactly the successful updates, each
entry's old value is the previous entry's new one (the updates are linearized), the contended
branch's first-parent chain holds every snapshot that won its compare-and-swap, and ``verify`` is
clean. Used by the store tests (local and PostgreSQL+S3) and by the reliability suite.
"""

from __future__ import annotations

import multiprocessing
import random
import time
from collections import Counter
from pathlib import Path
from typing import Any

from agentsnap_core.errors import RefConflict
from agentsnap_core.stores.base import RefUpdate

SHARED = "refs/heads/shared"
COUNTER = "refs/heads/counter"
SETUP = "concurrency: setup"


def _open(root: str, store_url: str | None, worker: int) -> Any:
    from agentsnap_core.repository.repo import Repo

    if store_url is None:
        return Repo.open(root)  # every worker on the same directory store
    return Repo.init(Path(root) / f"w{worker}", store_url=store_url)  # one checkout each, one shared store


def _worker(root: str, store_url: str | None, worker: int, ops: int, seed: int, start_at: float) -> dict[str, Any]:
    rng = random.Random(seed * 1000 + worker)
    repo = _open(root, store_url, worker)
    done: list[tuple[str, str | None, str]] = []
    counts: Counter[str] = Counter()
    own = f"refs/heads/w{worker}"
    last: str | None = None
    time.sleep(max(0.0, start_at - time.time()))
    try:
        for step in range(ops):
            op = rng.choice(["shared", "shared", "own", "fork", "counter"])
            state = {"worker": worker, "step": step, "noise": rng.randbytes(rng.randint(0, 2048))}
            if op in ("shared", "own"):
                ref = SHARED if op == "shared" else own
                for _attempt in range(1000):
                    try:
                        snap = repo.snapshot(f"w{worker} s{step}", agent=f"w{worker}", layers={"state": state},
                                             trace=[{"id": f"{worker}-{step}", "role": "user", "content": op}],
                                             capture_world=False, ref=ref)  # fmt: skip
                        break
                    except RefConflict:
                        counts["conflicts"] += 1
                else:  # pragma: no cover
                    raise RuntimeError("no progress after 1000 attempts")
                done.append((ref, (snap.parents or [None])[0], snap.id))
                last = snap.id
            elif op == "fork":
                base = last or repo.refs.get_ref(SHARED)
                made = repo.fork(base, 1, prefix=f"w{worker}-fork")
                done += [(f"refs/heads/{m['branch']}", None, m["id"]) for m in made]
            else:
                target = last or repo.refs.get_ref(SHARED)
                for _attempt in range(1000):
                    current = repo.refs.get_ref(COUNTER)
                    try:
                        repo.update_refs([RefUpdate(COUNTER, target, current)], f"counter: w{worker} s{step}")
                        break
                    except RefConflict:
                        counts["conflicts"] += 1
                done.append((COUNTER, current, target))
            counts[op] += 1
    finally:
        repo.close()
    return {"worker": worker, "updates": done, "counts": dict(counts)}


def run_workload(root: str | Path, store_url: str | None, workers: int, ops: int, seed: int = 0) -> dict[str, Any]:
    """Run the workload; ``root`` is a repository (local) or a directory for per-worker checkouts."""
    root = str(root)
    setup = _open(root, store_url, -1)
    try:
        base = setup.snapshot("base", capture_world=False, trace=[], ref=SHARED)
        setup.update_refs([RefUpdate(COUNTER, base.id, None)], SETUP)
    finally:
        setup.close()
    ctx = multiprocessing.get_context("spawn")
    started = time.time()
    with ctx.Pool(workers) as pool:
        results = pool.starmap(
            _worker, [(root, store_url, w, ops, seed, time.time() + 1.5 + 0.1 * workers) for w in range(workers)]
        )
    elapsed = time.time() - started
    counts: Counter[str] = Counter()
    for r in results:
        counts.update(r["counts"])
    return {"base": base.id, "results": results, "counts": dict(counts), "seconds": elapsed}


def check_workload(repo: Any, report: dict[str, Any]) -> dict[str, Any]:
    """Assert that every successful update is in the reflog, linearized, and the store verifies."""
    successes: dict[str, Counter[tuple[str | None, str]]] = {}
    for r in report["results"]:
        for name, old, new in r["updates"]:
            successes.setdefault(name, Counter())[(old, new)] += 1
    lost = phantom = 0
    for name, wanted in successes.items():
        log = [e for e in reversed(repo.refs.reflog(name)) if e.message != SETUP]  # oldest first
        if name == SHARED:
            log = log[1:]  # the base snapshot
        got = Counter((e.old, e.new) for e in log)
        lost += sum((wanted - got).values())
        phantom += sum((got - wanted).values())
        if name in (SHARED, COUNTER):
            for prev, cur in zip(log, log[1:], strict=False):
                assert cur.old == prev.new, f"{name}: reflog #{cur.seq} does not follow #{prev.seq}"
        assert log and repo.refs.get_ref(name) == log[-1].new, f"{name} is not where its reflog ends"
    chain = 0
    oid = repo.refs.get_ref(SHARED)
    while oid and oid != report["base"]:
        chain += 1
        oid = repo.manifest(oid)["parents"][0]
    shared_wins = sum(successes.get(SHARED, Counter()).values())
    verify = repo.verify()
    summary = {
        "updates": sum(sum(c.values()) for c in successes.values()),
        "lost": lost,
        "phantom": phantom,
        "shared_chain": chain,
        "shared_wins": shared_wins,
        "verify_ok": verify["ok"],
        "problems": verify["problems"][:5],
        **report["counts"],
        "seconds": round(report["seconds"], 1),
    }
    return summary
