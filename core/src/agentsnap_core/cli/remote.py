"""``agentsnap push / pull / fetch / clone / remote``: share snapshots through a remote store."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import click

from agentsnap_core.cli.app import JSON_VERSION, emit, in_dir, json_opt, open_repo, register, short
from agentsnap_core.errors import InvalidInput
from agentsnap_core.operations import remote as remote_mod
from agentsnap_core.repository import journals
from agentsnap_core.stores import mask_url

jobs_opt = click.option(
    "-j", "--jobs", default=remote_mod.DEFAULT_JOBS, show_default=True, type=click.IntRange(1, 64),
    help="Parallel object transfers.",
)  # fmt: skip


@contextmanager
def _bar(label: str, as_json: bool) -> Iterator[remote_mod.TransferProgress | None]:
    """A progress bar (objects and bytes) on a TTY; nothing otherwise."""
    if as_json or not sys.stderr.isatty():
        yield None
        return
    from rich.progress import BarColumn, DownloadColumn, MofNCompleteColumn, Progress, TextColumn

    with Progress(TextColumn(label), BarColumn(), MofNCompleteColumn(), DownloadColumn(), transient=True) as bar:
        task = bar.add_task(label, total=None)

        def update(done: int, known: int, nbytes: int) -> None:
            bar.update(task, completed=done, total=max(known, done) or None)

        yield update


def _path_in_dir(ctx: click.Context, url: str) -> str:
    """A store path given on the command line, relative to ``-C DIR`` as every path is (a URL as it is)."""
    return url if "://" in url or not url.strip() else in_dir(ctx, url)


def _remote_in_dir(ctx: click.Context, repo: Any, remote: str | None) -> str | None:
    """REMOTE as :func:`remote_mod.resolve_remote` will read it, a path in it relative to ``-C DIR``."""
    if remote is None or remote in remote_mod.remotes(repo) or not (os.sep in remote or remote.startswith(".")):
        return remote
    return _path_in_dir(ctx, remote)


def _report(verb: str, result: remote_mod.TransferResult, as_json: bool, extra: dict[str, Any] | None = None) -> None:
    if as_json:
        emit({"v": JSON_VERSION, "verb": verb, **result.as_dict(), **(extra or {})})
        return
    if verb == "push --delete":
        click.echo(f"{verb} {result.url}: {len(result.updated)} ref(s) deleted there (its reflog keeps what they named)")
    else:
        click.echo(
            f"{verb} {result.url}: {result.objects} object(s), {result.bytes} bytes, "
            f"{result.snapshots} snapshot(s) transferred; {result.present} already there"
        )
    for ref, (old, new) in sorted(result.updated.items()):
        click.echo(f"  {ref}: {short(old)} -> {short(new)}")
    for ref in result.up_to_date:
        click.echo(f"  {ref}: up to date")
    for ref, why in sorted(result.rejected.items()):
        click.echo(f"  {ref}: rejected - {why}", err=True)
    if result.merge:
        click.echo(f"  merge: {result.merge.get('status')} {short(result.merge.get('snapshot'))}")
    for note in result.notes:  # never only in --json
        click.echo(f"warning: {note}", err=True)


@click.command("push")
@click.argument("remote", required=False)
@click.argument("refs", nargs=-1)
@click.option("--force-with-lease", is_flag=True, help="Overwrite (or --delete) the remote ref only if it is still where "
              "we last saw it.")
@click.option("--delete", "delete", is_flag=True, help="Delete the branches or tags REFS on REMOTE (its reflog keeps "
              "what they named); all or none.")
@click.option("--allow-secrets", is_flag=True, help="Send snapshots whose conversation, environment or agent state "
              "holds secrets (refused otherwise; files are not looked at: 'agentsnap scan').")
@jobs_opt
@json_opt
@click.pass_context
def push_cmd(ctx: click.Context, remote: str | None, refs: tuple[str, ...], force_with_lease: bool, delete: bool,
             allow_secrets: bool, jobs: int, as_json: bool) -> None:  # fmt: skip
    """Send snapshots to REMOTE (name or URL; default origin) and move its branches (default: the current one)."""
    repo = open_repo(ctx)
    remote = _remote_in_dir(ctx, repo, remote)
    if delete:
        if remote is None or not refs:
            raise InvalidInput("name the remote and what to delete there: agentsnap push REMOTE --delete BRANCH...")
        result = remote_mod.delete_remote_refs(repo, remote, list(refs), force_with_lease=force_with_lease)
        if as_json:
            _report("push", result, as_json, {"delete": True})
        else:
            _report("push --delete", result, as_json)
        return
    late = journals.notice(repo.store_dir)  # not in any snapshot: they would not reach the remote
    if late:
        click.echo(f"{late}; they are not pushed", err=True)
    pending = journals.unsnapshotted(repo.wt_dir)  # an adapter's writes since its last snapshot: not pushed either
    if pending:
        click.echo(journals.describe_unsnapshotted(pending), err=True)
    try:
        with _bar("push", as_json) as progress:
            result = remote_mod.push(repo, remote, list(refs) or None, force_with_lease=force_with_lease, jobs=jobs,
                                     progress=progress, allow_secrets=allow_secrets)  # fmt: skip
    except remote_mod.SecretsInPush as exc:
        if as_json:
            emit({"v": JSON_VERSION, "verb": "push", "error": str(exc), "secrets": exc.findings})
        raise
    except remote_mod.PushRejected as exc:
        partial = getattr(exc, "result", None)
        if partial is not None and as_json:
            emit({"v": JSON_VERSION, "verb": "push", "error": str(exc), **partial.as_dict()})
        elif partial is not None:
            for note in partial.notes:  # (the rejection is the error line; a note of the transfer is said too)
                click.echo(f"warning: {note}", err=True)
        raise
    _report("push", result, as_json)


@click.command("fetch")
@click.argument("remote", required=False)
@jobs_opt
@json_opt
@click.pass_context
def fetch_cmd(ctx: click.Context, remote: str | None, jobs: int, as_json: bool) -> None:
    """Copy REMOTE's snapshots in and update refs/remotes/REMOTE/*."""
    repo = open_repo(ctx)
    remote = _remote_in_dir(ctx, repo, remote)
    with _bar("fetch", as_json) as progress:
        result = remote_mod.fetch(repo, remote, jobs=jobs, progress=progress)
    _report("fetch", result, as_json)


@click.command("pull")
@click.argument("remote", required=False)
@click.argument("branch", required=False)
@jobs_opt
@json_opt
@click.pass_context
def pull_cmd(ctx: click.Context, remote: str | None, branch: str | None, jobs: int, as_json: bool) -> None:
    """Fetch, then fast-forward or merge the current branch with REMOTE's."""
    repo = open_repo(ctx)
    remote = _remote_in_dir(ctx, repo, remote)
    with _bar("pull", as_json) as progress:
        result = remote_mod.pull(repo, remote, branch, jobs=jobs, progress=progress)
    _report("pull", result, as_json)
    if result.merge and result.merge.get("status") == "conflict":
        if not as_json:
            click.echo("merge stopped on conflicts: resolve them, then 'agentsnap merge --continue'", err=True)
        ctx.exit(1)


@click.command("clone")
@click.argument("url")
@click.argument("directory", type=click.Path(file_okay=False))
@click.option("-b", "--branch", default=None, help="Branch to check out (default: main, else the first).")
@click.option("--store", "store_url", default=None, help="Keep objects and refs in this store URL instead of .agentsnap/.")
@click.option("--store-dir", "store_dir", type=click.Path(file_okay=False), default=None,
              help="Keep the store in this directory outside DIRECTORY (as 'init --store-dir').")
@jobs_opt
@json_opt
@click.pass_context
def clone_cmd(ctx: click.Context, url: str, directory: str, branch: str | None, store_url: str | None,
              store_dir: str | None, jobs: int, as_json: bool) -> None:  # fmt: skip
    """Make DIRECTORY a copy of the repository at URL and check out its branch."""
    url, directory = _path_in_dir(ctx, url), in_dir(ctx, directory)
    store_url = _path_in_dir(ctx, store_url) if store_url else store_url
    with _bar("clone", as_json) as progress:
        repo, result = remote_mod.clone(url, directory, branch=branch, store_url=store_url, jobs=jobs,
                                        store_dir=None if store_dir is None else in_dir(ctx, store_dir),
                                        progress=progress)  # fmt: skip
    try:
        _report("clone", result, as_json, {"root": str(repo.root), "branch": repo.current_branch()})
    finally:
        repo.close()


@click.group("remote", invoke_without_command=True)
@click.option("-v", "--verbose", is_flag=True, help="List the remotes with their URLs (as alone; git's habit).")
@click.pass_context
def remote_group(ctx: click.Context, verbose: bool) -> None:
    """Named remotes (stored in this checkout); alone, or with -v, lists them as 'remote list' does."""
    if ctx.invoked_subcommand is None:
        ctx.invoke(remote_list, as_json=False)


@remote_group.command("add")
@click.argument("name")
@click.argument("url")
@json_opt
@click.pass_context
def remote_add(ctx: click.Context, name: str, url: str, as_json: bool) -> None:
    """Remember URL as NAME."""
    repo = open_repo(ctx)
    stored = remote_mod.add_remote(repo, name, _path_in_dir(ctx, url))
    if as_json:
        emit({"v": JSON_VERSION, "remote": name, "url": mask_url(stored)})
    else:
        click.echo(f"remote {name}: {mask_url(stored)}")


@remote_group.command("remove")
@click.argument("name")
@json_opt
@click.pass_context
def remote_remove(ctx: click.Context, name: str, as_json: bool) -> None:
    """Forget remote NAME and its remote-tracking refs."""
    remote_mod.remove_remote(open_repo(ctx), name)
    if as_json:
        emit({"v": JSON_VERSION, "removed": name})


@remote_group.command("list")
@json_opt
@click.pass_context
def remote_list(ctx: click.Context, as_json: bool) -> None:
    """List remotes (passwords masked)."""
    named = {k: mask_url(v) for k, v in remote_mod.remotes(open_repo(ctx)).items()}
    if as_json:
        emit({"v": JSON_VERSION, "remotes": named})
        return
    for name, url in sorted(named.items()):
        click.echo(f"{name}\t{url}")


for _command in (push_cmd, fetch_cmd, pull_cmd, clone_cmd, remote_group):
    register(_command)
