"""The ``agentsnap`` click application and its core verbs (init, snapshot, status, log, restore, ...); the verb groups
live in their own modules (``LAZY_VERBS``). The console script enters through :func:`agentsnap_core.cli.run`."""

from __future__ import annotations

import importlib
import json
import os
import sqlite3
import time
from collections.abc import Callable
from typing import Any

import click

from agentsnap_core import __version__
from agentsnap_core.cli.common import (  # noqa: F401 - re-exported: importable from the application as before
    _REMOTE_CLIENT_MODULES,
    _UNCHANGED,
    CLI_LOCK_WAIT,
    JSON_VERSION,
    OPENED,
    _is_remote,
    end_quietly_on_closed_output,
    environment_error_line,
    fork_lines,
    git_shield_notes,
    interrupted_line,
    json_line,
    left_out_line,
    listing,
    open_notes,
    output_closed,
    progress,
    refuse_snapshot_during_merge,
    restore_lines,
    seconds_or_now,
    short,
    snapshot_lines,
    status_lines,
    status_of,
    subject,
)
from agentsnap_core.errors import AgentSnapError, InvalidInput, Terminated
from agentsnap_core.layers.world import shown_path
from agentsnap_core.repository import journals
from agentsnap_core.repository.repo import Repo, Snapshot

#: verbs whose module is imported only when that verb runs (or for --help): `--version`, `status`, `snapshot`
#: do not pay for fan-out, remotes, the UI server... Each module calls `register()` for its verbs when imported.
LAZY_VERBS = {
    "config": "cli.config",
    "effects": "cli.effects",
    "fanout": "cli.fanout",
    "merge": "cli.merge",
    **dict.fromkeys(("push", "fetch", "pull", "clone", "remote"), "cli.remote"),
    **dict.fromkeys(("prune", "du", "expire", "timeline"), "cli.retention"),
    "scan": "cli.scan",
    "resident": "cli.resident_cmd",
    "ui": "ui.cli",
}


class _Group(click.Group):
    """Loads verb modules on demand; turns agentsnap errors into one line on stderr and exit status 2 (no traceback)."""

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in LAZY_VERBS:
            importlib.import_module(f"agentsnap_core.{LAZY_VERBS[cmd_name]}")
        return super().get_command(ctx, cmd_name)

    def list_commands(self, ctx: click.Context) -> list[str]:
        for module in sorted(set(LAZY_VERBS.values())):
            importlib.import_module(f"agentsnap_core.{module}")
        return super().list_commands(ctx)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except AgentSnapError as exc:
            click.echo(f"agentsnap: error: {exc}", err=True)
            ctx.exit(2)
        except KeyboardInterrupt as exc:
            click.echo(interrupted_line(), err=True)
            ctx.exit(143 if isinstance(exc, Terminated) else 130)
        except (OSError, sqlite3.Error, MemoryError) as exc:  # the world said no: one line, never a traceback
            if output_closed(exc):  # `agentsnap log | head`: the reader left; not an error (as git)
                ctx.exit(end_quietly_on_closed_output())
            click.echo(f"agentsnap: error: {environment_error_line(exc)}", err=True)
            ctx.exit(2)
        except Exception as exc:
            if type(exc).__module__.partition(".")[0] not in _REMOTE_CLIENT_MODULES:
                raise
            click.echo(f"agentsnap: error: {environment_error_line(exc)}", err=True)
            ctx.exit(2)


def emit(data: Any) -> None:
    click.echo(json_line(data))


def in_dir(ctx: click.Context, path: str) -> str:
    """``path`` as the user meant it: relative paths are relative to ``-C DIR`` when given (as in git)."""
    base = ctx.find_root().obj.get("dir") if ctx.find_root().obj else None
    return path if base is None or os.path.isabs(path) else os.path.join(base, path)


def open_repo(ctx: click.Context) -> Repo:
    path = ctx.obj.get("dir") if ctx.obj else None
    repo = Repo.open(path)
    OPENED.append(repo)  # (what an interrupt says it made)
    for note in open_notes(repo):  # (a store made before git init ran above it; a lost index)
        click.echo(note, err=True)
    if not os.environ.get("AGENTSNAP_LOCK_WAIT"):
        repo.lock_wait = CLI_LOCK_WAIT  # a hook's snapshot beside the user's: the second waits, then runs
    ctx.call_on_close(repo.close)
    return repo


def fmt_time(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))


json_opt = click.option("--json", "as_json", is_flag=True, help="Machine-readable output (docs/CLI.md).")


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-C", "directory", type=click.Path(exists=True, file_okay=False), help="Run as if started in this directory.")
@click.version_option(__version__, prog_name="agentsnap")
@click.pass_context
def main(ctx: click.Context, directory: str | None) -> None:
    """git for live AI agents: snapshot, fork, merge, restore and share agent state."""
    ctx.ensure_object(dict)
    if directory:
        ctx.obj["dir"] = directory


@main.command()
@click.argument("directory", default=".", type=click.Path(file_okay=False))
@click.option("-b", "--branch", default="main", show_default=True, help="Name of the first branch.")
@click.option("--store-dir", "store_dir", type=click.Path(file_okay=False),
              help="Keep the store in this directory outside the tree, linked from DIRECTORY/.agentsnap: nothing done "
                   "in the tree (rm -rf, git clean -ffdx) deletes it, and a deleted link is made again.")
@json_opt
@click.pass_context
def init(ctx: click.Context, directory: str, branch: str, store_dir: str | None, as_json: bool) -> None:
    """Create a store (.agentsnap/) in DIRECTORY."""
    repo = Repo.init(in_dir(ctx, directory), branch=branch,
                     store_dir=None if store_dir is None else in_dir(ctx, store_dir))
    git = (repo.root / ".git").is_dir() and not repo.include_git
    outside = store_dir is not None
    if as_json:
        emit({"v": JSON_VERSION, "root": str(repo.root), "store": str(repo.store_dir), "git_not_captured": git,
              "git_shield": repo.git_shield, "outside": outside})
    else:
        click.echo(f"Initialised agentsnap store in {repo.store_dir}"
                   + (f" (outside the tree; {repo.root / '.agentsnap'} links to it)" if outside else ""))
        for note in git_shield_notes(repo.git_shield, outside):
            click.echo(note, err=True)
        if git:  # said once here (and in every snapshot's --json): git keeps its own history
            from agentsnap_core.cli.common import INCLUDE_GIT_HINT

            click.echo("note: .git is not captured: snapshots hold the files, git keeps its own history (a deleted "
                       f".git, a dropped stash or branch do not come back from a snapshot); {INCLUDE_GIT_HINT}",
                       err=True)
    repo.close()


@main.command()
@json_opt
@click.pass_context
def status(ctx: click.Context, as_json: bool) -> None:
    """Show what changed in the working tree since the current snapshot."""
    repo = open_repo(ctx)
    for line, err in status_lines(status_of(repo), as_json):  # the fast path (cli/fast.py) prints the same lines
        click.echo(line, err=err)


@main.command()
@click.option("-m", "--message", default="", help="Describe the snapshot.")
@click.option("--agent", default="", help="Agent id to record.")
@click.option("--no-redact", is_flag=True, help="Keep secret-looking environment values (not recommended).")
@click.option("--include-secrets", is_flag=True, default=None,
              help="Also capture credential files (.env, private keys, ...); store default: world.include_secrets.")
@json_opt
@click.pass_context
def snapshot(ctx: click.Context, message: str, agent: str, no_redact: bool, include_secrets: bool | None,
             as_json: bool) -> None:
    """Snapshot the working tree and trace; print the new id."""
    repo = open_repo(ctx)
    refuse_snapshot_during_merge(repo)
    with progress(repo, "snapshot", not as_json):
        snap = repo.snapshot(message, agent=agent, redact_env=not no_redact, include_secrets=include_secrets)
    for line, err in snapshot_lines(snap, as_json, repo):  # as the fast path (cli/fast.py) prints them
        click.echo(line, err=err)


@main.command()
@click.argument("spec", required=False)
@click.option("--all", "all_refs", is_flag=True,
              help="Every branch, tag, remote-tracking ref and Python API session, not only HEAD.")
@click.option("--graph", is_flag=True, help="Draw the snapshot DAG.")
@click.option("-n", "--limit", type=int, default=None, help="Show at most N snapshots.")
@json_opt
@click.pass_context
def log(ctx: click.Context, spec: str | None, all_refs: bool, graph: bool, limit: int | None, as_json: bool) -> None:
    """List snapshots, newest first."""
    if limit is not None and limit < 0:
        raise InvalidInput(f"-n takes a number of snapshots (0 or more), not {limit}")
    repo = open_repo(ctx)
    if spec is None and not all_refs and repo.head()[1] is None and repo.refs.list_refs("refs/agents/"):
        raise AgentSnapError("no snapshot yet on this branch; the snapshots saved through the Python API are on their "
                             "sessions: 'agentsnap log --all' or 'agentsnap timeline' lists them")
    snaps = repo.log(spec, all_refs=all_refs, limit=limit, past_unreadable=True)
    late = journals.notice(repo.store_dir, repo.wt_dir)  # checkpoints or writes an adapter journaled, not in the store
    if late:
        click.echo(late, err=True)
    labels = _labels(repo)
    bad = [s for s in snaps if "unreadable" in s.manifest]
    from agentsnap_core.repository.retention import death_of, tombstones

    marks = tombstones(repo)  # expired, pruned, deleted: listed (history), marked (restore refuses them)
    dead = {s.id: why for s in snaps if "unreadable" not in s.manifest
            for why in [death_of(repo, s.id, s.manifest, marks=marks)] if why}
    if as_json:
        emit([{**s.summary(), "refs": labels.get(s.id, []), **({"dead": dead[s.id]} if s.id in dead else {}),
               **({"unreadable": s.manifest["unreadable"]} if "unreadable" in s.manifest else {})} for s in snaps])
    else:
        lines = _graph_lines(snaps) if graph else [("", s) for s in snaps]
        for prefix, s in lines:
            if s is None:
                click.echo(prefix)
                continue
            refs = f" ({', '.join(labels[s.id])})" if s.id in labels else ""
            agent = f" [{shown_path(str(s.manifest.get('agent')))}]" if s.manifest.get("agent") else ""  # (one line)
            flag = " [UNREADABLE]" if "unreadable" in s.manifest else f" [{dead[s.id].split()[0]}]" if s.id in dead else ""
            click.echo(f"{prefix}{click.style(short(s.id), fg='yellow')}{refs}{flag} {fmt_time(s.time)}{agent} "
                       f"{subject(s.message)}")
    if bad:  # (listed from the index, and the history before them too: the user can still find what to restore)
        raise AgentSnapError(
            f"{len(bad)} snapshot(s) cannot be read: {bad[0].manifest['unreadable']}"
            f"{f' (and {len(bad) - 1} more)' if len(bad) > 1 else ''}; they are listed as the index records them "
            "([UNREADABLE]); the others can be restored or shown as usual - run 'agentsnap verify' for the whole "
            "report")


def _labels(repo: Repo) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    symref, head = repo.head()
    for name, oid in repo.refs.list_refs().items():
        if name.startswith("refs/heads/"):
            label = name[11:]
            if name == symref:
                label = f"HEAD -> {label}"
            out.setdefault(oid, []).append(label)
        elif name.startswith("refs/tags/"):
            out.setdefault(oid, []).append(f"tag: {name[10:]}")
        elif name.startswith(("refs/remotes/", "refs/agents/")):  # (origin/main; agents/<agent>/<session>)
            out.setdefault(oid, []).append(name[13:] if name.startswith("refs/remotes/") else name[5:])
    if head and not symref:
        out.setdefault(head, []).insert(0, "HEAD")
    return out


def _graph_lines(snaps: list[Snapshot]) -> list[tuple[str, Snapshot | None]]:
    """A git-like lane drawing: one column per line of descent, '*' marks the snapshot.

    A lane that reaches a parent already drawn in another lane joins it with ``|/``; a merge
    opens a lane for its second parent with ``|\\``.
    """
    lanes: list[str] = []
    out: list[tuple[str, Snapshot | None]] = []
    for s in snaps:
        if s.id not in lanes:
            lanes.append(s.id)
        col = lanes.index(s.id)
        out.append(("".join("* " if i == col else "| " for i in range(len(lanes))), s))
        parents = s.parents
        opened = False
        if parents and parents[0] not in lanes:
            lanes[col] = parents[0]
        else:
            del lanes[col]
            if parents and col < len(lanes):  # the lanes to the right shift left into this one
                out.append(("| " * col + "|/" + " /" * (len(lanes) - col - 1), None))
            elif parents and col > 0:  # this lane joins the one on its left
                out.append(("| " * (col - 1) + "|/", None))
        for p in parents[1:]:
            if p not in lanes:
                lanes.insert(min(col + 1, len(lanes)), p)
                opened = True
        if opened:
            out.append(("".join("|\\" if i == col else "| " for i in range(len(lanes) - 1)).rstrip(), None))
    return out


@main.command()
@click.argument("spec", required=False)
@json_opt
@click.pass_context
def show(ctx: click.Context, spec: str | None, as_json: bool) -> None:
    """Show one snapshot: parents, message, layers."""
    repo = open_repo(ctx)
    snap = repo.get(spec)
    if as_json:
        emit({"v": JSON_VERSION, **snap.summary(), "manifest_layers": snap.layers})
        return
    m = snap.manifest
    click.echo(f"snapshot {snap.id}")
    for p in snap.parents:
        click.echo(f"parent   {p}")
    click.echo(f"author   {m.get('author', '')}")
    if m.get("agent"):
        click.echo(f"agent    {m['agent']}")
    click.echo(f"time     {fmt_time(snap.time)}")
    click.echo("\n" + "".join(f"    {line}".rstrip() + "\n" for line in (snap.message or "").split("\n")))
    for name, rec in sorted(snap.layers.items()):
        if name == "world":
            click.echo(f"  world: {rec.get('files')} files, {rec.get('bytes')} bytes (tree {short(rec.get('tree'))})")
        elif name == "trace":
            click.echo(f"  trace: {rec.get('count')} messages")
        else:
            click.echo(f"  {name}: {short(rec.get('content'))}")


@main.command()
@click.argument("args", nargs=-1, metavar="[A [B]] [-- PATH...]")
@click.option("--layer", type=str, default=None, help="Only this layer (world, trace, env, state, ...).")
@click.option("--stat", is_flag=True, help="Only list changed paths.")
@click.option("--conflict", "conflict_path", default=None, metavar="PATH", help="During a merge: base/ours/theirs of PATH.")
@json_opt
@click.pass_context
def diff(ctx: click.Context, args: tuple[str, ...], layer: str | None, stat: bool, as_json: bool,
         conflict_path: str | None = None) -> None:
    """Show changes: HEAD vs working tree, A vs working tree, or A vs B; PATHs keep only the files at or below them.

    As in git, the leading arguments that name snapshots are A and B, the rest are paths (write ./NAME for a file
    named like a branch)."""
    if conflict_path:
        from agentsnap_core.cli.merge import show_conflict

        return show_conflict(ctx, conflict_path, as_json)
    repo = open_repo(ctx)
    from agentsnap_core.errors import HistoryTooShort, UnknownSnapshot

    specs: list[str] = []
    paths: list[str] = []
    for arg in args:
        if not paths and len(specs) < 2:
            try:
                repo.resolve(arg)
                specs.append(arg)
                continue
            except HistoryTooShort:  # a known name, a range past its history: not a path
                raise
            except UnknownSnapshot:
                pass
        paths.append(arg)
    d = repo.diff(specs[0] if specs else None, specs[1] if len(specs) > 1 else None, layer, paths or None)
    if as_json:
        emit({"v": JSON_VERSION, **d})
        return
    layers = d["layers"]
    if "world" in layers:
        w = layers["world"]
        if stat:
            for key, mark in (("added", "A"), ("modified", "M"), ("deleted", "D"), ("mode", "m")):
                for p in w[key]:
                    click.echo(f"{mark} {shown_path(p)}")
        else:
            for p in sorted(w.get("patches", {})):
                click.echo(w["patches"][p], nl=False)
            for key, what in (("added", "new directory"), ("deleted", "deleted directory")):
                for p in w[key]:
                    if p.endswith("/"):  # (no patch: world.compare lists a directory only where nothing else does)
                        click.echo(f"{what}: {shown_path(p)}")
            for p in w["mode"]:
                click.echo(f"mode changed: {shown_path(p)}")
    if "trace" in layers:
        t = layers["trace"]
        if t["only_a"] or t["only_b"]:
            click.echo(f"--- trace: {t['common']} messages in common")
            for m in t["only_a"]:
                click.echo(f"- [{m.get('role')}] {str(m.get('content'))[:200]}")
            for m in t["only_b"]:
                click.echo(f"+ [{m.get('role')}] {str(m.get('content'))[:200]}")
    for name, v in sorted(layers.items()):
        if name in ("world", "trace"):
            continue
        if any(v.get(k) for k in ("added", "removed", "changed")):
            click.echo(f"--- {name}: " + json.dumps(v, default=str))
    if d.get("no_files"):  # (never "every file added": that side has no files, not an empty tree)
        click.echo(f"note: files not compared: snapshot {', '.join(short(x) for x in d['no_files'])} holds none (saved "
                   "without the working tree)", err=True)
    held = [name for name in d.get("not_compared") or [] if name != "world"]
    if held:  # (never "changed": the working side of those layers is in no file to read)
        click.echo(f"note: not compared with the working state: {', '.join(held)} (captured when a snapshot is "
                   "taken; 'agentsnap diff A B' compares two snapshots)", err=True)


@main.command()
@click.argument("spec")
@click.argument("paths", nargs=-1)
@click.option("--to", "to", type=click.Path(file_okay=False), help="Materialise into this new/empty directory instead.")
@click.option("--dry-run", is_flag=True, help="Only say what would change.")
@click.option("--allow-external-symlinks", is_flag=True, help="Permit symlinks that point outside the tree.")
@click.option("--trust-git", is_flag=True,
              help="Write git's config and hooks from a snapshot this store did not capture (they can run commands).")
@json_opt
@click.pass_context
def restore(ctx: click.Context, spec: str, paths: tuple[str, ...], to: str | None, dry_run: bool, allow_external_symlinks: bool,
            trust_git: bool, as_json: bool) -> None:
    """Make the working tree equal snapshot SPEC (undoable); `-- PATH...` restores only those paths."""
    repo = open_repo(ctx)
    if not paths and not to and not dry_run:
        refuse_snapshot_during_merge(repo, "restore")
    paths = tuple(in_dir(ctx, p) for p in paths)
    to = in_dir(ctx, to) if to else to
    with progress(repo, "restore", not as_json):
        res = repo.restore(spec, to=to, dry_run=dry_run, paths=list(paths) or None,
                           allow_external_symlinks=allow_external_symlinks, trust_git=trust_git)
    for line, err in restore_lines(res, as_json, dry_run, bool(to)):
        click.echo(line, err=err)


@main.command()
@click.argument("spec", required=False)
@click.option("-n", "count", type=int, default=2, show_default=True, help="Number of forks.")
@click.option("--prefix", default="attempt", show_default=True, help="Branch name prefix.")
@click.option("--worktrees", type=click.Path(file_okay=False), help="Also materialise each fork in DIR/<branch>.")
@json_opt
@click.pass_context
def fork(ctx: click.Context, spec: str | None, count: int, prefix: str, worktrees: str | None, as_json: bool) -> None:
    """Create N branches (and optionally N worktrees) from a snapshot."""
    repo = open_repo(ctx)
    with progress(repo, "fork", not as_json):
        out = repo.fork(spec, count, prefix=prefix, worktrees=worktrees)
    for line, err in fork_lines(out, as_json):
        click.echo(line, err=err)


@main.command()
@click.argument("name", required=False)
@click.argument("at", required=False)
@click.option("-d", "--delete", is_flag=True, help="Delete branch NAME.")
@click.option("-f", "--force", is_flag=True, help="Move an existing branch; with -d, delete one a worktree whose "
              "directory is gone still has checked out.")
@json_opt
@click.pass_context
def branch(ctx: click.Context, name: str | None, at: str | None, delete: bool, force: bool, as_json: bool) -> None:
    """List branches, create NAME at AT, or delete NAME."""
    if delete and not name:
        raise InvalidInput("name the branch to delete (agentsnap branch -d NAME)")
    repo = open_repo(ctx)
    if name is not None and delete:
        was = repo.refs.get_ref(f"refs/heads/{name}") if isinstance(name, str) and name else None
        notes = repo.delete_branch(name, force=force)
        for note in notes:
            click.echo(note, err=True)
        if as_json:
            emit({"v": JSON_VERSION, "deleted": name, "notes": notes})
        else:
            click.echo(f"deleted branch {name}" + (f" (was {short(was)})" if was else ""))
        return
    if name is not None:  # (an empty name is refused by its check, not taken for "list")
        notes = []
        oid = repo.create_branch(name, at, force=force, notes=notes)
        for note in notes:
            click.echo(f"warning: {note}", err=True)
        if as_json:
            emit({"v": JSON_VERSION, "branch": name, "id": oid, **({"notes": notes} if notes else {})})
        else:
            click.echo(f"{name} -> {short(oid)}")
        return
    cur = repo.current_branch()
    br = repo.branches()
    if as_json:
        emit([{"name": k, "id": v, "current": k == cur} for k, v in br.items()])
        return
    for k, v in br.items():
        click.echo(f"{'*' if k == cur else ' '} {k} {short(v)}")


@main.command()
@click.argument("name")
@click.option("-c", "--create", is_flag=True, help="Create the branch at HEAD; the tree stays as it is (as git switch -c).")
@json_opt
@click.pass_context
def switch(ctx: click.Context, name: str, create: bool, as_json: bool) -> None:
    """Switch the working tree to branch NAME (uncommitted work is kept in an undo snapshot; -c keeps it in the tree)."""
    repo = open_repo(ctx)
    refuse_snapshot_during_merge(repo, "switch")
    res = repo.switch(name, create=create)
    from agentsnap_core.cli.common import restore_notes

    for line, err in restore_notes(res):  # (as restore says them: never dropped)
        click.echo(line, err=err)
    if as_json:
        emit({"v": JSON_VERSION, **res})
    elif res.get("already"):
        click.echo(f"already on {name} at {short(res['id'])}")
    elif res.get("created"):
        click.echo(f"switched to a new branch {name} at {short(res['id'])} (the working tree is as it was)")
    else:
        click.echo(f"switched to {name} at {short(res['id'])}{_switch_undo(res)}")


def _switch_undo(res: dict[str, Any]) -> str:
    """How to undo a switch: back to the branch it left, and the work it replaced back in the tree without moving
    any branch. (Not ``restore UNDO``: that moves the branch now checked out, as ``git reset --hard`` does, onto the
    other branch's work, and its own snapshots drop out of its history.)"""
    import shlex

    previous, undo = res.get("previous"), res.get("undo")
    replaced = bool(undo) and undo != res.get("previous_id")
    if previous is None:  # (HEAD was detached: there is no branch to go back to)
        return (f"; the work it replaced is snapshot {short(undo)} ('agentsnap restore {short(undo)} -- .' puts its "
                "files back)") if replaced else ""
    back = f"agentsnap switch {shlex.quote(previous)}"
    return f"; undo with: {back} && agentsnap restore {short(undo)} -- ." if replaced else f"; undo with: {back}"


@main.command()
@click.argument("name", required=False)
@click.argument("at", required=False)
@click.option("-d", "--delete", is_flag=True, help="Delete tag NAME (a tag already pushed stays on the remote).")
@json_opt
@click.pass_context
def tag(ctx: click.Context, name: str | None, at: str | None, delete: bool, as_json: bool) -> None:
    """List tags, tag AT (default HEAD) as NAME, or delete NAME."""
    if delete and not name:
        raise InvalidInput("name the tag to delete (agentsnap tag -d NAME)")
    repo = open_repo(ctx)
    if name is not None and delete:
        oid = repo.delete_tag(name)
        if as_json:
            emit({"v": JSON_VERSION, "deleted": name, "id": oid})
        else:
            click.echo(f"deleted tag {name} (was {short(oid)})")
        return
    if name is not None:  # (an empty name is refused by its check, not taken for "list")
        oid = repo.tag(name, at)
        if as_json:
            emit({"v": JSON_VERSION, "tag": name, "id": oid})
        else:
            click.echo(f"{name} -> {short(oid)}")
        return
    tags = repo.tags()
    if as_json:
        emit([{"name": k, "id": v} for k, v in tags.items()])
    else:
        for k, v in tags.items():
            click.echo(f"{k} {short(v)}")


@main.command()
@json_opt
@click.pass_context
def verify(ctx: click.Context, as_json: bool) -> None:
    """Re-hash every object and check refs and the DAG; exit 1 on any problem."""
    repo = open_repo(ctx)
    rep = repo.verify()
    if as_json:
        emit({"v": JSON_VERSION, **rep})
    else:
        for p in rep["problems"]:
            click.echo(f"problem: {p.get('kind')} {short(p.get('id'))}: {p.get('error')}", err=True)
        click.echo(f"checked {rep['objects']} objects, {rep['refs']} refs: {'ok' if rep['ok'] else 'PROBLEMS FOUND'}")
        _say_foreign(rep.get("foreign_files") or [])
    if not rep["ok"]:
        ctx.exit(1)


@main.command()
@click.option("--prune", default="3600", show_default=True, help="Grace period in seconds for unreachable objects, or 'now'.")
@json_opt
@click.pass_context
def gc(ctx: click.Context, prune: str, as_json: bool) -> None:
    """Delete objects unreachable from refs, HEADs and the reflog."""
    repo = open_repo(ctx)
    rep = repo.gc(seconds_or_now(prune, "--prune"))
    if as_json:
        emit({"v": JSON_VERSION, **rep})
    else:
        click.echo(f"removed {rep['removed']} objects; kept {rep['live']} live and {rep['kept_recent']} recent")
        pk = rep.get("packs")
        if pk:
            click.echo(f"packs: {pk['written']} written ({pk['merged']} merged, {pk['packed']} loose objects packed, "
                       f"{pk['dropped']} dropped); {pk['packs']} pack(s) hold {pk['objects_in_packs']} objects; "
                       f"objects {_mib(pk['bytes_before'])} in {pk['files_before']} files before, "
                       f"{_mib(pk['bytes_after'])} in {pk['files_after']} files after")
        _say_foreign(rep.get("foreign_files") or [])


def _say_foreign(names: list[str]) -> None:
    if names:
        click.echo(f"note: {len(names)} file(s) in .agentsnap/objects are not agentsnap objects, left as they are "
                   f"(move them out of the store): {listing(names)}", err=True)


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.2f} MiB"


@main.command()
@json_opt
def plugins(as_json: bool) -> None:
    """List loaded plugins (adapters) and the hooks they implement."""
    from agentsnap_core.plugins import list_plugins

    items = list_plugins()
    if as_json:
        emit(items)
        return
    for p in items:
        click.echo(f"{p['name']:<28} {p['dist']:<32} {p['hooks']}")


@main.group()
def trace() -> None:
    """Read and append to the working trace (chat and tool-call messages)."""


@trace.command("add")
@click.argument("role")
@click.argument("text")
@click.option("--tool-call", "tool_calls", multiple=True, help="A tool call as JSON (repeatable).")
@json_opt
@click.pass_context
def trace_add(ctx: click.Context, role: str, text: str, tool_calls: tuple[str, ...], as_json: bool) -> None:
    """Append a message with ROLE and TEXT."""
    repo = open_repo(ctx)
    fields: dict[str, Any] = {}
    if tool_calls:
        try:
            fields["tool_calls"] = [json.loads(t) for t in tool_calls]
        except ValueError as exc:
            raise AgentSnapError(f"--tool-call is not valid JSON: {exc}") from None
    msg = repo.append_message(role, text, **fields)
    if as_json:
        emit({"v": JSON_VERSION, **msg})
    else:
        click.echo(msg["id"])


@trace.command("show")
@click.argument("spec", required=False)
@json_opt
@click.pass_context
def trace_show(ctx: click.Context, spec: str | None, as_json: bool) -> None:
    """Print the trace of SPEC (default: the working trace)."""
    repo = open_repo(ctx)
    from agentsnap_core.repository.diffing import read_trace

    msgs = read_trace(repo, repo.get(spec)) if spec else repo.messages()
    if as_json:
        emit(msgs)
        return
    for m in msgs:
        click.echo(f"[{m.get('role')}] {m.get('content')}")


def register(command: click.Command) -> None:
    """Add a command to the CLI (used by core modules that grow their own verbs)."""
    main.add_command(command)


def _load_extensions(loaders: list[Callable[[], None]]) -> None:
    for load in loaders:
        load()



if __name__ == "__main__":  # pragma: no cover
    main()
