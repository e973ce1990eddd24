"""``agentsnap fanout``: run N forks in parallel, score them, rank them, merge the best (docs/FANOUT.md).

Exit status: 0 done (a fork scored; merged when asked), 1 no fork produced a score or the merge stopped
on conflicts (finish it with ``agentsnap merge --continue`` / ``--abort``), 2 error (nothing forked).
"""

from __future__ import annotations

import sys
import time
from typing import Any

import click

from agentsnap_core.cli.app import JSON_VERSION, emit, json_opt, open_repo, register, short
from agentsnap_core.operations import fanout as fanout_mod


class _Live:
    """A rich table of the forks, redrawn as they start and finish (on a TTY only)."""

    def __init__(self, n: int, minimize: bool) -> None:
        from rich.live import Live

        self.n, self.minimize = n, minimize
        self.rows: dict[int, dict[str, Any]] = {i: {"status": "queued"} for i in range(1, n + 1)}
        self.live = Live(self._table(), refresh_per_second=4, redirect_stdout=False, redirect_stderr=False)

    def __enter__(self) -> _Live:
        self.live.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.live.update(self._table())
        self.live.__exit__(*exc)

    def event(self, kind: str, item: Any) -> None:
        if kind == "start":
            self.rows[item] = {"status": "running", "t0": time.monotonic()}
        else:
            self.rows[item.index] = {"status": "resumed" if item.resumed else item.status, "result": item}
        self.live.update(self._table())

    def _table(self) -> Any:
        from rich.table import Table

        done = sum(1 for r in self.rows.values() if "result" in r)
        table = Table(title=f"fan-out: {done}/{self.n} done", title_justify="left")
        for col in ("fork", "status", "score", "time", "note"):
            table.add_column(col, justify="right" if col in ("score", "time") else "left")
        for i, row in sorted(self.rows.items()):
            res = row.get("result")
            if res is not None:
                score = "-" if res.score is None else f"{res.score:g}"
                took = f"{res.seconds:.1f}s"
                note = (res.error or "")[:60]
            else:
                score, note = "", ""
                took = f"{time.monotonic() - row['t0']:.1f}s" if "t0" in row else ""
            style = {"ok": "green", "resumed": "green", "failed": "red", "timeout": "yellow"}.get(row["status"], "")
            table.add_row(str(i), f"[{style}]{row['status']}[/]" if style else row["status"], score, took, note)
        return table


@click.command("fanout")
@click.argument("spec", required=False)
@click.option("-n", "count", type=int, required=True, help="Number of forks.")
@click.option("--run", "run_cmd", required=True, help="Shell command run in each fork's directory.")
@click.option("--score", "score_cmd", default=None,
              help="Shell command printing the fork's score (else AGENTSNAP_SCORE=<n> in the run's output, "
                   "or a number written to $AGENTSNAP_SCORE_FILE).")
@click.option("--parallel", type=int, default=None, help="Forks at a time (default: CPUs; on Ray: all).")
@click.option("--timeout", type=float, default=None, help="Seconds per fork; a fork past it is killed and reported.")
@click.option("--merge", "merge_mode", type=click.Choice(fanout_mod.MERGE_MODES), default="none", show_default=True,
              help="best: merge the winner into HEAD (its deferred effects run once).")
@click.option("--minimize", is_flag=True, help="Lower scores are better.")
@click.option("--backend", type=click.Choice(fanout_mod.BACKENDS), default="local", show_default=True)
@click.option("--address", default=None, help="Ray cluster address (e.g. 10.0.0.5:6379; default: ray.init()).")
@click.option("--seed", type=int, default=0, show_default=True, help="AGENTSNAP_FORK_SEED = SEED + fork index.")
@click.option("--keep", is_flag=True, help="Keep the forks' directories (.agentsnap/fanout/<run>/<i>).")
@click.option("--import", "modules", multiple=True,
              help="Module defining the @effect tools whose deferred calls the merge runs (repeatable).")
@json_opt
@click.pass_context
def fanout(ctx: click.Context, spec: str | None, count: int, run_cmd: str, score_cmd: str | None,
           parallel: int | None, timeout: float | None, merge_mode: str, minimize: bool, backend: str,
           address: str | None, seed: int, keep: bool, modules: tuple[str, ...], as_json: bool) -> None:
    """Fork SPEC (default HEAD) N ways, run --run in each, score, rank; --merge best merges the winner.

    Each fork gets AGENTSNAP_FORK_INDEX (1..N), AGENTSNAP_FORK_SEED and AGENTSNAP_FORK_BRANCH. Running
    the same fan-out again (same base, commands and N) skips the forks that already finished.
    """
    from agentsnap_core.layers.effects import import_tools

    import_tools(list(modules))
    repo = open_repo(ctx)
    kw: dict[str, Any] = dict(spec=spec, score=score_cmd, parallel=parallel, timeout=timeout, merge=merge_mode,
                              minimize=minimize, backend=backend, address=address, seed=seed, keep=keep)
    if as_json:
        res = fanout_mod.fanout(repo, count, run_cmd, **kw)
    elif sys.stdout.isatty():
        with _Live(count, minimize) as live:
            res = fanout_mod.fanout(repo, count, run_cmd, on_event=live.event, **kw)
    else:
        res = fanout_mod.fanout(repo, count, run_cmd, on_event=_print_done, **kw)
    merged = res.merge or {}
    failed = not res.winner or merged.get("status") == "conflict" or bool(merged.get("effects_failed"))
    if as_json:
        emit({"v": JSON_VERSION, **res.to_dict()})
        ctx.exit(1 if failed else 0)
    _print_ranking(res)
    ctx.exit(1 if failed else 0)


def _print_done(kind: str, item: Any) -> None:
    if kind == "done":
        score = "-" if item.score is None else f"{item.score:g}"
        extra = " (finished earlier)" if item.resumed else (f": {item.error}" if item.error else "")
        click.echo(f"fork {item.index} {item.status} score {score}{extra}")


def _print_ranking(res: fanout_mod.FanoutResult) -> None:
    click.echo(f"fan-out {res.run_id[:8]} from {short(res.base)} ({res.backend}, "
               f"{'lower' if res.minimize else 'higher'} is better)")
    click.echo(f"{'rank':>4}  {'fork':>4}  {'status':<8} {'score':>8}  {'time':>7}  branch / snapshot")
    for rank, r in enumerate(res.ranked(), start=1):
        score = "-" if r.score is None else f"{r.score:g}"
        click.echo(f"{rank:>4}  {r.index:>4}  {r.status:<8} {score:>8}  {r.seconds:>6.1f}s  {r.branch} {short(r.snapshot)}"
                   + (f"  ({r.error})" if r.error else ""))
    for note in res.notes:
        click.echo(f"note: {note}")
    win = res.winner
    if win is None:
        click.echo("no fork produced a score")
        return
    click.echo(f"best: {win.branch} (score {win.score:g})")
    m = res.merge
    if not m:
        click.echo(f"merge it with: agentsnap merge {win.branch}")
        return
    if m["status"] == "conflict":
        click.echo(f"merge of {win.branch} stopped on conflicts: {', '.join(sorted({str(c['path']) for c in m['conflicts']}))}"
                   "; resolve them, then 'agentsnap merge --continue' (or '--abort')")
        return
    click.echo(f"merged {win.branch}: {m['status']} -> {short(m['snapshot'])}")
    if m.get("effects_applied"):
        click.echo(f"deferred effects applied: {len(m['effects_applied'])}")
    for f in m.get("effects_failed") or []:
        click.echo(f"deferred effect FAILED, not sent: {f['key']} ({f['error']}); retry with "
                   f"'agentsnap effects apply {win.branch} --import MODULE'")
    if m.get("effects_pending"):
        click.echo(f"deferred effects still pending (tool not loaded; pass --import MODULE or run "
                   f"'agentsnap effects apply {win.branch} --import MODULE'): {len(m['effects_pending'])}")


register(fanout)
