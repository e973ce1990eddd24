"""``agentsnap prune``, ``agentsnap du``, ``agentsnap expire`` and ``agentsnap timeline``."""

from __future__ import annotations

import click

from agentsnap_core.cli.app import JSON_VERSION, emit, fmt_time, json_opt, open_repo, register, short, subject
from agentsnap_core.cli.common import listing, seconds_or_now
from agentsnap_core.errors import InvalidInput
from agentsnap_core.repository import maintenance, retention


@click.command("prune")
@click.option("--keep-last", type=int, default=None, help="Keep the N newest snapshots of each agent.")
@click.option("--keep-daily", type=int, default=None, help="Keep the newest snapshot of each of the last D days (UTC) with snapshots.")
@click.option("--keep-tagged", is_flag=True, help="Keep every tagged snapshot (tag refs and client tags).")
@click.option("--dry-run", "-n", is_flag=True, help="Show what would be pruned; change nothing.")
@json_opt
@click.pass_context
def prune_cmd(ctx: click.Context, keep_last: int | None, keep_daily: int | None, keep_tagged: bool, dry_run: bool, as_json: bool) -> None:
    """Mark snapshots outside the keep policy as pruned; 'agentsnap gc' then reclaims their layers.

    Snapshots a branch, a session, an undo ref or a worktree HEAD points at are always kept, and so are
    the points two branches forked from (merging them needs it); pruned snapshots that others descend
    from stay as tombstones (manifest only).
    """
    repo = open_repo(ctx)
    res = retention.prune(repo, keep_last=keep_last, keep_daily=keep_daily, keep_tagged=keep_tagged, dry_run=dry_run)
    if as_json:
        emit({"v": JSON_VERSION, **res})
        return
    verb = "would prune" if dry_run else "pruned"
    tags = res.get("pruned_tagged") or {}
    for oid in res["pruned"]:
        click.echo(f"{verb} {short(oid)}" + (f" (tag {', '.join(tags[oid])})" if oid in tags else ""))
    click.echo(f"{verb} {len(res['pruned'])} snapshot(s), kept {res['kept']}" + ("" if dry_run else "; run 'agentsnap gc' to reclaim space"))
    if tags:  # (was silent: 'restore v1' then refused a release the user had named)
        named = ", ".join(n for oid in res["pruned"] for n in tags.get(oid, []))
        click.echo(f"agentsnap: warning: {len(tags)} of them tagged ({named}): "
                   + ("they would be pruned (restore refuses a pruned snapshot); --keep-tagged keeps tagged snapshots"
                      if dry_run else "restore refuses them now; 'agentsnap prune --keep-tagged' keeps tagged "
                      "snapshots next time"), err=True)


@click.command("du")
@click.option("--by", type=click.Choice(["branch", "agent"]), default="branch", show_default=True, help="Group sizes by branch or by agent.")
@click.option("--warn-bytes", type=int, default=None, help=f"Warn above this store size (default: config {retention.WARN_KEY} or 1 GiB).")
@json_opt
@click.pass_context
def du_cmd(ctx: click.Context, by: str, warn_bytes: int | None, as_json: bool) -> None:
    """Logical (uncompressed, per snapshot) vs physical (stored, deduplicated) size."""
    repo = open_repo(ctx)
    res = retention.du(repo, by=by, warn_bytes=warn_bytes)
    if as_json:
        emit({"v": JSON_VERSION, **res})
        return
    click.echo(f"{by:<24} {'snapshots':>9} {'logical':>11} {'physical':>11}")
    for g in res["groups"]:
        click.echo(f"{g['name']:<24} {g['snapshots']:>9} {retention.human(g['logical']):>11} {retention.human(g['physical']):>11}")
    click.echo(f"store: {retention.human(res['physical'])} stored, {retention.human(res['reclaimable'])} reclaimable by gc")
    if "warning" in res:
        click.echo(f"agentsnap: warning: {res['warning']}", err=True)


@click.command("expire")
@click.argument("specs", nargs=-1)
@click.option("--reflog", is_flag=True, help="Expire the reflog instead: drop entries older than --older-than, "
              "forget ids of snapshots that are gone (a deleted branch's snapshots are then reclaimed by gc).")
@click.option("--older-than", default=None, metavar="SECONDS|now",
              help=f"With --reflog: the age past which entries go (default {int(maintenance.REFLOG_AGE)}, 90 days).")
@click.option("--dry-run", "-n", is_flag=True, help="With --reflog: say what would go; change nothing.")
@json_opt
@click.pass_context
def expire_cmd(ctx: click.Context, specs: tuple[str, ...], reflog: bool, older_than: str | None, dry_run: bool,
               as_json: bool) -> None:
    """Expire snapshots now: they leave queries, restore refuses them, gc reclaims their layers.

    With --reflog, expire the reflog: what keeps a deleted branch's snapshots and old undo points alive.
    """
    if reflog:
        if specs:
            raise InvalidInput("expire --reflog takes no snapshots: it expires reflog entries by age (--older-than)")
        _expire_reflog(ctx, older_than, dry_run, as_json)
        return
    if not specs:
        raise InvalidInput("name the snapshots to expire (agentsnap expire SPEC...), or expire the reflog "
                           "(agentsnap expire --reflog)")
    if older_than is not None or dry_run:
        raise InvalidInput("--older-than and --dry-run go with --reflog (snapshots named are expired at once)")
    repo = open_repo(ctx)
    ids = [repo.resolve(s) for s in specs]
    new = retention.bury(repo, ids, "expire")
    if as_json:
        emit({"v": JSON_VERSION, "expired": ids, "new": new})
        return
    for oid in ids:
        click.echo(f"expired {short(oid)}" + ("" if oid in new else " (already)"))


def _expire_reflog(ctx: click.Context, older_than: str | None, dry_run: bool, as_json: bool) -> None:
    age = maintenance.REFLOG_AGE if older_than is None else seconds_or_now(older_than, "--older-than")
    res = maintenance.expire_reflog(open_repo(ctx), age, dry_run=dry_run)
    if as_json:
        emit({"v": JSON_VERSION, **res})
        return
    verb = "would drop" if dry_run else "dropped"
    click.echo(f"{verb} {res['dropped']} reflog entries older than {_age(age)}, kept {res['kept']}"
               + ("" if dry_run or not res["dropped"] else "; run 'agentsnap gc' to reclaim what only they kept"))
    if res["expired"]:
        ids = res["expired"]
        click.echo(f"{'would mark' if dry_run else 'marked'} {len(ids)} snapshot(s) only those entries kept as expired: "
                   + listing([short(o) for o in ids]))
    if res["stale"]:
        click.echo(f"{'would forget' if dry_run else 'forgot'} {len(res['stale'])} snapshot(s) the reflog named that "
                   f"are gone: " + listing([short(o) for o in res["stale"]]))


def _age(seconds: float) -> str:
    if seconds >= 86400 and seconds % 86400 == 0:
        return f"{int(seconds // 86400)} day(s)"
    return f"{seconds:g} second(s)"


@click.command("timeline")
@click.option("--agent", "agent_id", default=None, help="Only this agent's snapshots.")
@click.option("--session", "session_id", default=None, help="Only this session's snapshots.")
@click.option("-n", "--limit", type=int, default=None, help="At most N snapshots (as log -n).")
@json_opt
@click.pass_context
def timeline_cmd(ctx: click.Context, agent_id: str | None, session_id: str | None, limit: int | None, as_json: bool) -> None:
    """Snapshots saved through the Python API (agentsnap_core.Client), newest first."""
    from agentsnap_core.client import Client

    if limit is not None and limit < 1:
        raise InvalidInput(f"--limit must be at least 1, not {limit}")
    client = Client(repo=open_repo(ctx))
    items = client.timeline(agent_id, session_id, limit=limit)
    if as_json:
        emit({"v": JSON_VERSION, "snapshots": [i.as_dict() for i in items]})
        return
    for i in items:
        click.echo(f"{short(i.id)} {fmt_time(i.time)} {i.agent_id}/{i.session_id} {subject(i.message)}")


for _command in (prune_cmd, du_cmd, expire_cmd, timeline_cmd):
    register(_command)
