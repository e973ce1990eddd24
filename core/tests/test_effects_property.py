"""Property test: random schedules of calls, snapshots, restores, forks, merges and crashes between intent
and result never duplicate an irreversible effect, and every in-doubt call is surfaced.

200 schedules by default (CI); ``AGENTSNAP_LONG=1`` runs 1,000. The counts are printed (``pytest -s``).
"""

from __future__ import annotations

import os
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentsnap_core import Repo
from agentsnap_core.layers.effects import EffectDivergence, EffectInDoubt, Effects, apply_deferred, effect, resolve
from agentsnap_core.layers.effects_ledger import Ledger
from agentsnap_core.testing.effects import Outbox
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_effects import effects_key_home  # noqa: F401  (autouse: a private key dir per test)

EXAMPLES = 1000 if os.environ.get("AGENTSNAP_LONG") else 200


class SimulatedCrash(BaseException):
    """The process dies between the intent and the result (not an Exception: nothing is recorded)."""


_call = st.tuples(st.just("call"), st.integers(1, 2), st.booleans())  # calls in this step, regenerated args?
ops = st.one_of(
    _call,
    _call,
    _call,
    st.tuples(st.just("snapshot")),
    st.tuples(st.just("restore"), st.integers(0, 50)),
    st.tuples(st.just("fork"), st.integers(0, 50), st.integers(1, 3)),
    st.tuples(st.just("fork_and_run"), st.integers(0, 50), st.integers(1, 3)),  # fork, switch to a fork, run a step
    st.tuples(st.just("switch"), st.integers(0, 50)),
    st.tuples(st.just("merge"), st.integers(0, 50)),
    st.tuples(st.just("crash"), st.sampled_from(["before", "after"])),
    st.tuples(st.just("resolve")),
    st.tuples(st.just("reopen")),
)


@dataclass
class World:
    """The system under test plus the oracle's knowledge."""

    repo: Repo
    outbox: Outbox
    branch: str = "main"
    steps: dict[str, int] = field(default_factory=lambda: {"main": 0})
    snapshots: list[tuple[str, int]] = field(default_factory=list)  #: (id, agent step)
    branches: list[str] = field(default_factory=lambda: ["main"])
    crash: str | None = None
    in_doubt: dict[str, bool] = field(default_factory=dict)  #: key -> did the email go out before the crash
    stats: Counter[str] = field(default_factory=Counter)
    fx: Effects | None = None
    last_wrote: bool = False  #: whether the last crashed call had sent its email

    def session(self) -> Effects:
        if self.fx is None:
            self.fx = Effects(self.repo, self.branch, on_divergence="replay")
        return self.fx

    def send(self, to: str, body: str) -> dict[str, Any]:
        mode, self.crash = self.crash, None
        self.last_wrote = mode == "after"
        if mode == "before":
            raise SimulatedCrash()
        out = self.outbox.send(to, body)
        if mode == "after":
            raise SimulatedCrash()
        return out

    def crashed_key(self) -> str:
        """The key whose intent the crash left without a result (read back from the ledger)."""
        led = Ledger.for_repo(self.repo).sync()
        return next(r["key"] for r in reversed(led.rows()) if r["status"] in ("in-doubt", "intent"))


def run_schedule(world: World, schedule: list[tuple[Any, ...]]) -> None:
    for op in schedule:
        name = op[0]
        if name == "call":
            fx = world.session()
            tool = effect(world.send, name="send_email", session=fx)
            step = world.steps[world.branch]
            try:
                with fx.step(step):
                    for ordinal in range(op[1]):
                        tool("bob@example.com", f"{step}#{ordinal}" + ("!" if op[2] else ""))
                world.steps[world.branch] = step + 1
                world.stats["steps"] += 1
            except SimulatedCrash:
                world.in_doubt[world.crashed_key()] = world.last_wrote
                world.stats["crashes"] += 1
                world.fx = None  # the process died: a new one takes over
            except EffectInDoubt as exc:
                assert exc.key in world.in_doubt, f"in doubt without a crash: {exc.key}"
                world.stats["in_doubt_surfaced"] += 1
            except EffectDivergence:  # pragma: no cover - policy is replay
                raise
        elif name == "snapshot":
            snap = world.repo.snapshot("s", ref=f"refs/heads/{world.branch}", capture_world=False,
                                       layers={"state": {"step": world.steps[world.branch]}})
            world.snapshots.append((snap.id, world.steps[world.branch]))
        elif name == "restore" and world.snapshots:
            _sid, step = world.snapshots[op[1] % len(world.snapshots)]
            world.steps[world.branch] = step  # the agent is back at that step; the ledger is not
            world.stats["restores"] += 1
        elif name in ("fork", "fork_and_run"):
            if not world.snapshots or name == "fork_and_run":
                run_schedule(world, [("snapshot",)])
            sid, step = world.snapshots[op[1] % len(world.snapshots)]
            made = [f["branch"] for f in world.repo.fork(sid, op[2])]
            for b in made:
                world.branches.append(b)
                world.steps[b] = step
            world.stats["forks"] += op[2]
            if name == "fork_and_run":
                world.branch, world.fx = made[-1], None
                run_schedule(world, [("call", 1, False)])
        elif name == "switch":
            world.branch = world.branches[op[1] % len(world.branches)]
            world.fx = None
        elif name == "merge" and len(world.branches) > 1:
            b = world.branches[1:][op[1] % (len(world.branches) - 1)]
            try:
                rep = apply_deferred(world.repo, b, tools={"send_email": world.send})
                world.stats["applied"] += len(rep["applied"])
                world.stats["merge_conflicts_flagged"] += len(rep["conflicts"])
                for k in rep["in_doubt"]:
                    assert k in world.in_doubt, f"in doubt without a crash: {k}"
                    world.stats["in_doubt_surfaced"] += 1
            except SimulatedCrash:
                world.in_doubt[world.crashed_key()] = world.last_wrote
                world.stats["crashes"] += 1
        elif name == "crash":
            world.crash = op[1]
        elif name == "resolve":
            for key, wrote in list(world.in_doubt.items()):
                resolve(world.repo, key, "done" if wrote else "retry")  # the user checks the outbox: the truth
                del world.in_doubt[key]
                world.stats["resolved"] += 1
            world.fx = None
        elif name == "reopen":
            world.fx = None


def check(world: World) -> None:
    emails = [e["body"].rstrip("!") for e in world.outbox.emails()]
    dupes = [b for b, n in Counter(emails).items() if n > 1]
    assert not dupes, f"duplicate irreversible effects: {dupes}"
    rows = {r["key"]: r["status"] for r in Ledger.for_repo(world.repo).sync().rows()}
    for key in world.in_doubt:
        assert rows.get(key) == "in-doubt", f"{key} crashed mid-call but the ledger says {rows.get(key)}"
    assert world.repo.verify()["ok"]
    world.stats["emails"] += len(emails)


def test_random_schedules_never_duplicate_an_irreversible_effect_and_surface_every_in_doubt_call() -> None:
    totals: Counter[str] = Counter()

    # (derandomized as the other fuzz tests, except under AGENTSNAP_LONG: the coverage asserted below - crashes and
    # in-doubt calls surfaced among the schedules - failed by chance with random draws: once in six runs here)
    @settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=not os.environ.get("AGENTSNAP_LONG"),
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(st.lists(ops, min_size=4, max_size=40))
    def one(schedule: list[tuple[Any, ...]]) -> None:
        with tempfile.TemporaryDirectory(prefix="fx-prop-") as d:
            repo = Repo.init(Path(d) / "w")
            world = World(repo, Outbox(Path(d) / "outbox.jsonl"))
            try:
                run_schedule(world, schedule)
                check(world)
            finally:
                repo.close()
        totals.update(world.stats)
        totals["schedules"] += 1
        totals["in_doubt_open_at_end"] += len(world.in_doubt)

    one()
    print(f"\neffects property: {dict(sorted(totals.items()))}")
    assert totals["schedules"] >= EXAMPLES * 0.9
    assert totals["crashes"] > 0 and totals["in_doubt_surfaced"] > 0 and totals["applied"] > 0
