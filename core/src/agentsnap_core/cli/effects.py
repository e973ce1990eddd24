"""``agentsnap effects``: list, resolve, apply and verify the effects ledger (docs/EFFECTS.md)."""

from __future__ import annotations

import json
from typing import Any

import click

from agentsnap_core.cli.app import JSON_VERSION, emit, fmt_time, open_repo, register
from agentsnap_core.errors import AgentSnapError
from agentsnap_core.repository.repo import Repo


class _EffectsGroup(click.Group):
    """``agentsnap effects [ID]`` lists; ``agentsnap effects VERB ...`` runs a verb."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        for n, arg in enumerate(args):
            if arg.startswith("-"):
                continue
            if arg not in self.commands:  # the group's own options are flags, so this is ID
                ctx.meta["effects_spec"] = arg
                args = args[:n] + args[n + 1 :]
            break
        return super().parse_args(ctx, args)


@click.group("effects", cls=_EffectsGroup, invoke_without_command=True)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--raw", is_flag=True, help="Every ledger entry instead of one row per effect.")
@click.pass_context
def effects(ctx: click.Context, as_json: bool, raw: bool) -> None:
    """List effects with their status (intent / done / in-doubt / deferred); ID limits to what snapshot ID saw.

    \b
    agentsnap effects [ID] [--json]           one row per effect
    agentsnap effects resolve KEY --done|--retry
    agentsnap effects apply BRANCH [--into B] [--import MODULE]
    agentsnap effects policy BRANCH allow|block|defer
    agentsnap effects verify
    """
    if ctx.invoked_subcommand is not None:
        return
    from agentsnap_core.layers.effects_ledger import Ledger

    repo = open_repo(ctx)
    led = Ledger.for_repo(repo).sync()
    spec = ctx.meta.get("effects_spec")
    upto = None
    if spec:
        rec = repo.get(spec).layers.get("effects")
        upto = int(rec["count"]) if isinstance(rec, dict) and isinstance(rec.get("count"), int) else 0
    if raw:
        entries = led.entries[:upto] if upto is not None else led.entries
        if as_json:
            emit({"v": JSON_VERSION, "entries": entries})
        else:
            for e in entries:
                click.echo(f"#{e['i']:<5} {e.get('kind', '?'):<8} {e.get('key') or e.get('branch') or e.get('lineage') or ''}")
        return
    rows = led.rows(upto)
    if as_json:
        emit({"v": JSON_VERSION, "count": len(led.entries) if upto is None else upto, "head": led.head(), "effects": rows})
        return
    if not rows:
        click.echo("no effects recorded")
    for r in rows:
        extra = f" -> {r['target']}" if r.get("target") else ""
        err = f"  ({r['error']})" if r.get("error") else ""
        when = fmt_time(r["time"]) if isinstance(r.get("time"), (int, float)) else ""
        click.echo(f"{r['status']:<9} {r['key']}{extra}  {r.get('tool')} [{r.get('class')}] {when}{err}")


@effects.command("resolve")
@click.argument("key")
@click.option("--done", "action", flag_value="done", help="The effect happened; callers get --result.")
@click.option("--retry", "action", flag_value="retry", help="The effect did not happen; the next call runs it.")
@click.option("--result", "result_json", help="The result (JSON) replayed to callers, with --done.")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def resolve_cmd(ctx: click.Context, key: str, action: str | None, result_json: str | None, as_json: bool) -> None:
    """Settle an in-doubt effect KEY."""
    from agentsnap_core.layers.effects import resolve

    if action is None:
        raise AgentSnapError("say --done (it happened) or --retry (it did not)")
    if result_json is not None and action != "done":
        raise AgentSnapError("--result goes with --done (the result callers get back); --retry runs the call again")
    result: Any = None
    if result_json is not None:
        try:
            result = json.loads(result_json)
        except ValueError as exc:
            raise AgentSnapError(f"--result is not valid JSON: {exc}") from None
    out = resolve(open_repo(ctx), key, action, result)
    if as_json:
        emit({"v": JSON_VERSION, **out})
    else:
        click.echo(f"resolved {key}: {action}")


@effects.command("apply")
@click.argument("branch")
@click.option("--into", help="Target branch (default: the branch it was forked from).")
@click.option("--import", "modules", multiple=True, help="Module defining the @effect tools to run (repeatable).")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def apply_cmd(ctx: click.Context, branch: str, into: str | None, modules: tuple[str, ...], as_json: bool) -> None:
    """Promote BRANCH: run its deferred effects for real, exactly once."""
    from agentsnap_core.layers.effects import apply_deferred, import_tools

    import_tools(list(modules))
    repo: Repo = open_repo(ctx)
    rep = apply_deferred(repo, branch, into)
    if as_json:
        emit({"v": JSON_VERSION, **rep})
    else:
        for k in rep["applied"]:
            click.echo(f"applied {k}")
        for k in rep["deferred"]:
            click.echo(f"deferred into {rep['target']}: {k}")
        for c in rep["conflicts"]:
            click.echo(f"not run again: {c['key']} ({c['detail']})")
        for p in rep["pending"]:
            click.echo(f"pending: {p['key']} (tool {p['tool']} not loaded; pass --import MODULE)")
        for k in rep["in_doubt"]:
            click.echo(f"in doubt: {k} (resolve it first)")
        for f in rep["failed"]:
            click.echo(f"FAILED: {f['key']} ({f['error']}); still deferred, apply again to retry")
    if rep["pending"] or rep["in_doubt"] or rep["failed"]:
        ctx.exit(1)


@effects.command("policy")
@click.argument("branch")
@click.argument("policy", type=click.Choice(["allow", "block", "defer"]))
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def policy_cmd(ctx: click.Context, branch: str, policy: str, as_json: bool) -> None:
    """Set what irreversible effects do on BRANCH."""
    from agentsnap_core.layers.effects import set_policy

    out = set_policy(open_repo(ctx), branch, policy)
    if as_json:
        emit({"v": JSON_VERSION, **out})
    else:
        click.echo(f"{branch}: effects {policy}")


@effects.command("verify")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def verify_cmd(ctx: click.Context, as_json: bool) -> None:
    """Check the ledger's HMAC chain, seal and snapshot bindings; exit 1 on a problem."""
    from agentsnap_core.layers.effects_ledger import verify_ledger

    rep = verify_ledger(open_repo(ctx))
    if as_json:
        emit({"v": JSON_VERSION, **rep})
    else:
        for p in rep["problems"]:
            click.echo(f"problem: {p['error']}", err=True)
        msg = {"ok": "chain verifies", "empty": "no ledger yet", "failed": "PROBLEMS FOUND",
               "unverifiable": f"the chain cannot be checked: {rep['reason']}"}[rep["status"]]
        click.echo(f"{rep['entries']} entries: {msg}")
    if rep["status"] == "failed":
        ctx.exit(1)


register(effects)
