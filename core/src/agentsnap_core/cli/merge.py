"""``agentsnap merge``: three-way merge on the command line (exit 0 clean, 1 conflicts, 2 errors)."""

from __future__ import annotations

import difflib
import json
from typing import Any

import click

from agentsnap_core.cli.app import JSON_VERSION, emit, json_opt, open_repo, register, short
from agentsnap_core.errors import InvalidInput
from agentsnap_core.operations import merge as merge_mod
from agentsnap_core.repository.diffing import is_binary


def _model_options(values: tuple[str, ...]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in values:
        key, sep, raw = item.partition("=")
        if not sep:
            raise InvalidInput(f"--model takes KEY=VALUE (e.g. method=ties, density=0.5), not {item!r}")
        try:
            value: Any = json.loads(raw)
        except ValueError:
            value = raw
        out[{"lambda": "lambda_"}.get(key, key)] = value
    return out


@click.command("merge")
@click.argument("spec", required=False)
@click.option("--strategy", type=click.Choice(merge_mod.STRATEGIES), default="auto", show_default=True,
              help="auto: stop on conflicts; ours/theirs: settle every conflict to that side.")
@click.option("-m", "--message", default=None, help="Message of the merge snapshot.")
@click.option("--summarize", is_flag=True, help="Fold their trace tail into one note (agentsnap_summarize_branch hook).")
@click.option("--model", "model_opts", multiple=True, metavar="KEY=VALUE",
              help="Model-layer merge option, e.g. method=dare_ties, density=0.5, seed=0 (repeatable).")
@click.option("--no-ff", is_flag=True, help="Make a merge snapshot even when a fast-forward is possible.")
@click.option("--continue", "cont", is_flag=True, help="Finish a conflicted merge after resolving it.")
@click.option("--abort", is_flag=True, help="Undo a conflicted merge, restoring the tree exactly as it was.")
@click.option("--status", "show_status", is_flag=True, help="Show the merge in progress and its conflicts.")
@json_opt
@click.pass_context
def merge(ctx: click.Context, spec: str | None, strategy: str, message: str | None, summarize: bool,
          model_opts: tuple[str, ...], no_ff: bool, cont: bool, abort: bool, show_status: bool, as_json: bool) -> None:
    """Merge branch or snapshot SPEC into HEAD, layer by layer, against their common ancestor.

    Exit status: 0 merged (or nothing to do), 1 conflicts written into the working tree
    (resolve, then `agentsnap merge --continue`, or `agentsnap merge --abort`), 2 error.
    """
    modes = sum(bool(x) for x in (cont, abort, show_status))
    if modes > 1 or (modes and spec):
        raise InvalidInput("give SPEC, or one of --continue, --abort, --status")
    repo = open_repo(ctx)
    if abort:
        res = merge_mod.merge_abort(repo)
        if as_json:
            emit({"v": JSON_VERSION, **res})
        else:
            click.echo(f"merge aborted; the working tree is back at {short(res['head'])}"
                       + (f"; what it held is kept: agentsnap restore {short(res['undo'])}" if res.get("undo") else ""))
        return
    if show_status:
        state = merge_mod.merge_state(repo)
        if as_json:
            emit({"v": JSON_VERSION, "in_progress": state is not None, **(state or {})})
            return
        if state is None:
            click.echo("no merge in progress")
            return
        click.echo(f"merging {short(state['theirs'])} into {short(state['ours'])} (base {short(state['base'])})")
        _echo_conflicts(state["conflicts"])
        return
    if cont:
        result = merge_mod.merge_continue(repo, message=message)
    else:
        if not spec:
            raise InvalidInput("name the branch or snapshot to merge (agentsnap merge BRANCH)")
        result = merge_mod.merge(repo, spec, strategy=strategy, message=message, summarizer=True if summarize else None,
                                 model=_model_options(model_opts), no_ff=no_ff)
    if as_json:
        emit({"v": JSON_VERSION, **result.as_dict()})
    else:
        _echo_result(result)
    if not result.clean:
        ctx.exit(1)


def _echo_result(result: merge_mod.MergeResult) -> None:
    for note in result.notes:
        click.echo(f"note: {note}")
    for c in result.resolved:
        click.echo(f"resolved ({c['resolved']}): {c['layer']} {c.get('kind')} {c.get('path')}")
    if result.status == "up-to-date":
        click.echo("already up to date")
    elif result.status == "fast-forward":
        click.echo(f"fast-forward to {short(result.snapshot)}")
    elif result.status == "merged":
        click.echo(f"merged {short(result.theirs)} into {short(result.ours)}: snapshot {short(result.snapshot)} "
                   f"(base {short(result.base)})")
    else:
        _echo_conflicts(result.conflicts)
        click.echo("merge stopped on conflicts: fix them, then run 'agentsnap merge --continue' "
                   "(or 'agentsnap merge --abort')")


def _echo_conflicts(conflicts: list[dict[str, Any]]) -> None:
    for c in conflicts:
        click.echo(f"CONFLICT ({c.get('kind')}) {c.get('layer')}: {c.get('path')}: {c.get('message', '')}")


def show_conflict(ctx: click.Context, path: str, as_json: bool) -> None:
    """``agentsnap diff --conflict PATH``: base, ours and theirs of a conflicted file side by side."""
    repo = open_repo(ctx)
    rel = repo._norm_path(path)
    view = merge_mod.conflict_view(repo, rel)
    if as_json:
        emit({"v": JSON_VERSION, **{k: _jsonable(v) for k, v in view.items()}})
        return
    state = merge_mod.merge_state(repo) or {}
    labels = state.get("labels") or ["ours", "theirs"]
    for c in view["conflicts"]:
        click.echo(f"CONFLICT ({c.get('kind')}): {c.get('message', '')}")
    base = view["base"]
    for side, label in (("ours", labels[0]), ("theirs", labels[1])):
        other = view[side]
        if any(x is not None and is_binary(x) for x in (base, other)):
            click.echo(f"Binary file {rel}: base and {side} ({label}) differ\n")
            continue
        lines = difflib.unified_diff(
            (base or b"").decode("utf-8", "replace").splitlines(keepends=True),
            (other or b"").decode("utf-8", "replace").splitlines(keepends=True),
            fromfile=f"base/{rel}" if base is not None else "/dev/null",
            tofile=f"{side}/{rel} ({label})" if other is not None else "/dev/null",
        )
        text = "".join(x if x.endswith("\n") else x + "\n" for x in lines)
        click.echo(text or f"--- base/{rel}\n+++ {side}/{rel} ({label})\n(no change)\n", nl=False)


def _jsonable(v: Any) -> Any:
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    return v


register(merge)
