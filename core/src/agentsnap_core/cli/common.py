"""What the click application and the click-free fast path (:mod:`agentsnap_core.cli.fast`) share: the one-line
error messages, and the text of the read-only verbs the fast path answers, so that both print the same bytes.
Imports nothing heavy (no click, no repository)."""

from __future__ import annotations

import errno
import json
import os
import sqlite3
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from agentsnap_core.layers.world import listing, shown_path
from agentsnap_core.stores.base import READ_ONLY_ON_A_FULL_DISK

if TYPE_CHECKING:
    from agentsnap_core.repository.repo import Repo, Snapshot

JSON_VERSION = 1
#: seconds a command waits for another agentsnap process working on the same tree (AGENTSNAP_LOCK_WAIT overrides)
CLI_LOCK_WAIT = 10.0


#: libraries whose errors mean "the remote store went away" (PostgreSQL, S3)
_REMOTE_CLIENT_MODULES = frozenset({"psycopg", "psycopg_pool", "botocore", "boto3", "urllib3"})
_UNCHANGED = "nothing past the last completed step was committed"


def git_shield_notes(shielded: dict[str, str], outside: bool = False) -> list[str]:
    """What ``init`` (or the first command after ``git init`` above an existing store) says about keeping the store
    out of git: once, when it was done now, and whenever it could not be done. ``outside``: the store is outside the
    tree, only its link file is listed."""
    notes = []
    if shielded.get("exclude") and outside:
        notes.append(f"note: the link file .agentsnap is kept out of git: listed in {shielded['exclude']}")
    elif shielded.get("exclude"):  # where the store was listed, and what still deletes it
        notes.append(f"note: the store is kept out of git: listed in {shielded['exclude']} (git add and status pass "
                     "it by), and 'git clean -fdx' skips it (a nested-repository marker, .agentsnap/.git); only "
                     "'git clean -ffdx' deletes it")
    if shielded.get("problem"):
        notes.append(f"warning: could not keep the store out of git ({shielded['problem']}): 'git add -A' would "
                     "commit it and 'git clean -fdx' would delete it; add '.agentsnap/' to .git/info/exclude")
    return notes


#: the stores this command opened (the click application's ``open_repo``, the fast path): what an interrupt made
OPENED: list[Repo] = []


def interrupted_line() -> str:
    """What a Ctrl-C says: the snapshots the command had committed by then, by id (a snapshot whose manifest was
    written is committed even when the interrupt came after: "unchanged" alone read as "not made"), else that the
    store is unchanged; and a restore it cut short, with how to finish it or go back."""
    cut = next((repo.restoring for repo in OPENED if getattr(repo, "restoring", None)), None)
    if cut is not None:
        from agentsnap_core.repository.repo import restore_interrupted_line

        return "agentsnap: " + restore_interrupted_line(cut, now=True)
    made = [m for repo in OPENED for m in getattr(repo, "made", ())]
    count = sum(getattr(repo, "made_count", 0) for repo in OPENED)
    if not made:
        return "agentsnap: interrupted; the store is unchanged past the last completed step"
    shown = ", ".join(f"{oid[:12]} ({message!r})" if message else oid[:12] for oid, message in made[-3:])
    more = f" and {count - len(made[-3:])} earlier" if count > len(made[-3:]) else ""
    return (f"agentsnap: interrupted after it made snapshot {shown}{more} (in 'agentsnap log'); the store is "
            "unchanged past that")


def seconds_or_now(value: str, option: str) -> float:
    """An option's number of seconds, ``now`` being 0 (``gc --prune``, ``expire --reflog --older-than``); the range
    is the verb's to check."""
    try:
        return 0.0 if value == "now" else float(value)
    except ValueError:
        from agentsnap_core.errors import InvalidInput

        raise InvalidInput(f"{option} takes seconds or 'now', not {value!r}") from None


def open_notes(repo: Repo) -> list[str]:
    """What opening the store did that the user must hear of: keeping it out of git (:func:`git_shield_notes`), and
    a lost ``index.sqlite`` indexed again from the objects (its branch names are gone: the snapshots got new ones)."""
    notes = git_shield_notes(repo.git_shield, repo.relinked is not None)
    if repo.relinked:
        notes.append(f"note: {repo.relinked}, the link to this tree's store {repo.store_dir}, was gone (deleted with "
                     "the tree's files?); it was made again")
    local = getattr(repo.store, "local", repo.store)  # (a checkout bound to a shared store: its own directory)
    recovered, restored = getattr(local, "recovered", None), getattr(local, "restored", None)
    settings = (f"its settings ({listing(restored)}) and the branch each checkout is on came back from "
                f"{repo.store_dir}/config.json" if restored else "")
    if recovered:
        shown = listing([name.removeprefix("refs/heads/") for name in recovered])
        notes.append(f"warning: the store's index ({repo.store_dir}/index.sqlite) was missing; its snapshots were "
                     f"indexed again from the objects and named by the branches {shown} (branch and tag names "
                     + ("were in the lost index; " + settings if restored else "HEADs and config were in the lost "
                        "index") + "): 'agentsnap log --all' lists them"
                     + ("; its objects are encrypted, so the store stays encrypted (set the key to read it)"
                        if getattr(local, "recovered_encrypted", False) else ""))
    elif restored:
        notes.append(f"warning: the store's index ({repo.store_dir}/index.sqlite) was missing; {settings}"
                     + (f" (this checkout's snapshots live in {repo.store.url})" if local is not repo.store else ""))
    return notes


def environment_error_line(exc: BaseException) -> str:
    """One line for a failure of the machine, disk or network (not of agentsnap): what happened and what to do."""
    if isinstance(exc, MemoryError):
        return f"out of memory; {_UNCHANGED}: free memory and re-run"
    if isinstance(exc, sqlite3.Error):
        text = str(exc)
        if ("readonly" in text or "read-only" in text) and READ_ONLY_ON_A_FULL_DISK:
            return (f"the disk holding the store is full ({sorted(READ_ONLY_ON_A_FULL_DISK)[0]}) and this verb writes "
                    f"to it; {_UNCHANGED}: free space and re-run (reading verbs - log, status, show, diff - still work)")
        if "readonly" in text or "read-only" in text:
            return "the store is read-only and this verb writes to it; run it as a user who can write the store"
        if "disk is full" in text or "disk I/O" in text:
            return f"the disk holding the store is full or failing ({text}); {_UNCHANGED}: free space and re-run"
        return f"the store's index cannot be used ({text}); run 'agentsnap verify'"
    if isinstance(exc, OSError) and not _is_remote(exc):
        where = f": {os.fsdecode(exc.filename)}" if exc.filename else ""
        reason = exc.strerror or type(exc).__name__
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            return f"no space left on the device{where}; {_UNCHANGED}: free space and re-run"
        if exc.errno in (errno.EACCES, errno.EPERM) and f"{os.sep}.agentsnap{os.sep}" in where:
            return f"the store is not writable by this user and this verb writes to it{where}; {_UNCHANGED}"
        if exc.errno in (errno.EACCES, errno.EPERM):
            return f"permission denied{where}; give this user access (or leave the path out) and re-run"
        if exc.errno == errno.EROFS:
            return f"read-only file system{where}; {_UNCHANGED}"
        if exc.errno == errno.ENAMETOOLONG:
            return f"file name too long{where}; choose a shorter name"
        if exc.errno in (errno.EEXIST, errno.ENOTEMPTY, errno.ELOOP):
            return f"{reason}{where}: something not in the snapshot (an ignored file or link?) is in the way; move it and re-run"
        if exc.errno in (errno.ENOENT, errno.ENOTDIR):
            return f"{reason}{where}; check that the path can be created and re-run"
        return f"{reason}{where}; {_UNCHANGED}"
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return (
        f"lost the connection to the remote store ({first}); nothing already stored is lost: "
        "re-run the command and it resumes where it stopped"
    )


#: the exit status of a command whose reader went away (``agentsnap log | head``): 128 + SIGPIPE, what a shell shows
#: for git there
OUTPUT_CLOSED = 141


def output_closed(exc: BaseException) -> bool:
    """True when ``exc`` is this process's standard output closed by its reader, not a lost connection to a store.

    A BrokenPipeError is a ConnectionError, which :func:`environment_error_line` would take for a remote store that
    went away; the output's own state (poll says POLLERR on a pipe or socket with no reader) tells them apart.
    """
    if not isinstance(exc, BrokenPipeError):
        return False
    import select

    try:
        poller = select.poll()
        poller.register(1, select.POLLOUT)
        return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))
    except (OSError, ValueError, AttributeError):  # (no poll on this platform: say it as before)
        return False


def end_quietly_on_closed_output() -> int:
    """The reader went away: nothing more can be said to it, so say nothing (what is still buffered for the closed
    pipe goes to /dev/null, so the interpreter's exit prints no "Exception ignored"); the status to exit with."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.close(devnull)
    except OSError:
        pass
    return OUTPUT_CLOSED


def _is_remote(exc: BaseException) -> bool:
    return type(exc).__module__.partition(".")[0] in _REMOTE_CLIENT_MODULES or isinstance(exc, ConnectionError)


def short(oid: str | None) -> str:
    return oid[:12] if oid else "-"


def subject(message: str) -> str:
    """A message's first line, for one-line listings (``log``, ``timeline``): a multi-line message printed whole
    would read as several entries. ``show`` prints it all."""
    first, _, rest = (message or "").strip("\n").partition("\n")
    return first + (" ..." if rest.strip() else "")


def json_line(data: Any) -> str:
    return json.dumps(data, indent=None, sort_keys=True, default=str)


def left_out_line(names: list[str], kept: list[str] | None = None) -> str | None:
    """The stderr line naming the files the secrets policy left out (stdout stays the id for scripts), or None.

    ``kept``: those of them the local vault keeps encrypted (repository/vault.py): said apart, never pushed.
    """
    if not names:
        return None
    kept_set = set(kept or [])
    out = [n for n in names if n not in kept_set]
    parts = []
    if kept_set:
        parts.append(f"kept {len(kept_set)} secret file(s) encrypted in the local store only, not in the snapshot "
                     f"and never pushed: {_first(sorted(kept_set))} ('agentsnap restore' brings them back)")
    if out:
        parts.append(f"left out {len(out)} secret file(s): {_first(out)}")
    return "; ".join(parts) + "; capture them in the snapshot with 'snapshot --include-secrets' (docs/SECURITY.md)"


def not_captured_line(names: list[str]) -> str | None:
    """The stderr line naming the FIFOs, sockets and devices in the tree (no snapshot holds them), or None."""
    if not names:
        return None
    return (f"not captured: {len(names)} FIFO(s), socket(s) or device(s), which no snapshot holds: {_first(names)} "
            "(a restore leaves them as they are)")


#: how a user captures .git directories too (named wherever one is said to be left out)
INCLUDE_GIT_HINT = "'agentsnap config world.include_git true' captures .git directories too"


def nested_git_line(names: list[str]) -> str | None:
    """The stderr line naming the ``.git`` directories below the top of the tree that the snapshot leaves out
    (another repository's history inside the project: a restore brings its files back, not its ``.git``), or None.
    The top ``.git`` is said once, by ``init``, and listed in ``--json``: naming it on every command would be noise."""
    nested = [n for n in names if n != ".git"]
    if not nested:
        return None
    one = len(nested) == 1
    return (f"not captured: the .git of {'a' if one else len(nested)} nested git repositor{'y' if one else 'ies'} "
            f"({_first(nested)}): {'its' if one else 'their'} branches, stashes and unpushed commits are not in the "
            f"snapshot and a restore does not bring {'it' if one else 'them'} back; {INCLUDE_GIT_HINT}")


def nested_store_line(names: list[str]) -> str | None:
    """The stderr line naming the stores of nested agentsnap trees (``sub/.agentsnap``) inside this tree, which no
    snapshot of it holds (their snapshots are their own), or None."""
    if not names:
        return None
    one = len(names) == 1
    return (f"not captured: the store of {'a' if one else len(names)} nested agentsnap tree{'' if one else 's'} "
            f"({_first(names)}): {'its' if one else 'their'} snapshots are not in this one and a restore does not "
            f"bring {'it' if one else 'them'} back; push {'it' if one else 'them'} to keep a copy "
            "('agentsnap push URL' run there)")


def store_not_restored_line(names: list[str], snap: str) -> str | None:
    """After a restore: the nested agentsnap stores that are not in the tree now (their files came back from
    snapshot ``snap``, their history did not), or None."""
    if not names:
        return None
    return (f"not brought back: {_first(names)} - the store of a nested agentsnap tree is never in a snapshot of "
            f"this one (snapshot {short(snap)} holds that tree's files, not its history)")


def git_not_restored_line(names: list[str], snap: str) -> str | None:
    """After a restore: the ``.git`` directories the snapshot did not capture that are not in the tree now (a
    deleted repository's files came back, its history did not), or None."""
    if not names:
        return None
    return (f"not brought back: {_first(names)} - snapshot {short(snap)} did not capture "
            f"{'it' if len(names) == 1 else 'them'} (git's history is not in it); a directory restored without its "
            f".git is no longer a repository of its own; {INCLUDE_GIT_HINT} for later snapshots")


def git_held_back_line(names: list[str], snap: str, how: str = "restore again with --trust-git") -> str | None:
    """After a restore: git's config and hooks it did not write (a snapshot this store did not capture), or None."""
    from agentsnap_core.repository.repo import git_held_back_note

    note = git_held_back_note(names, snap, how)
    return f"warning: {note}" if note else None


def _first(names: list[str]) -> str:
    return ", ".join(map(shown_path, names[:5])) + (f", ... ({len(names) - 5} more; --json lists all)" if len(names) > 5 else "")


def merge_in_progress(repo: Repo) -> dict[str, Any] | None:
    """The merge of this working tree stopped on conflicts (``agentsnap merge``), or None: ``{"ours", "theirs",
    "conflicts": [paths]}``. The merge module loads only when there is one (status stays quick)."""
    if not repo.merge_state_path.exists():
        return None
    from agentsnap_core.operations.merge import merge_state

    state = merge_state(repo)
    if state is None:
        return None
    paths: list[str] = []
    for c in state.get("conflicts") or []:
        if isinstance(c, dict):
            paths += [c["path"]] if isinstance(c.get("path"), str) else [f for f in c.get("files") or [] if isinstance(f, str)]
    return {"ours": state["ours"], "theirs": state["theirs"], "conflicts": sorted(set(paths))}


def status_of(repo: Repo) -> dict[str, Any]:
    """:meth:`Repo.status`, plus ``merge`` while a merge waits for ``--continue`` or ``--abort``."""
    st = repo.status()
    merging = merge_in_progress(repo)
    if merging is not None:
        st["merge"] = merging
    return st


def refuse_snapshot_during_merge(repo: Repo, verb: str = "snapshot") -> None:
    """A snapshot, a whole-tree restore or a switch moves HEAD: done while a merge waits, ``merge --continue`` could
    no longer finish it (git refuses to commit or check out over unmerged paths). ``restore SNAP -- PATH`` (taking
    one side of a conflicted file) moves nothing and is not refused."""
    merging = merge_in_progress(repo)
    if merging is not None:
        from agentsnap_core.errors import InvalidInput

        raise InvalidInput(f"a merge of {short(merging['theirs'])} is in progress: finish it with 'agentsnap merge "
                           f"--continue' (or 'agentsnap merge --abort'); a {verb} now would move HEAD and the merge "
                           "could not be finished")


def status_lines(st: dict[str, Any], as_json: bool) -> list[tuple[str, bool]]:
    """``agentsnap status``'s output for :meth:`Repo.status`'s answer: ``(line, to stderr)`` in order."""
    if as_json:
        return [(json_line({"v": JSON_VERSION, **st}), False)]
    out = [(f"On branch {st['branch'] or '(detached)'} at {short(st['head'])}", False)]
    if st.get("restore_interrupted"):
        from agentsnap_core.repository.repo import restore_interrupted_line

        out.append((restore_interrupted_line(st["restore_interrupted"]), False))
    merging = st.get("merge")
    if merging:
        listed = f" in {len(merging['conflicts'])} file(s): {_first(merging['conflicts'])}" if merging["conflicts"] else ""
        out.append((f"merge of {short(merging['theirs'])} in progress, stopped on conflicts{listed}; fix them, then "
                    "'agentsnap merge --continue' (or 'agentsnap merge --abort')", False))
    if st.get("head_gone"):
        out.append((f"HEAD {short(st['head'])} was {st['head_gone']}: its files were reclaimed by gc, so there is "
                    "nothing to compare with and every file is listed as added ('agentsnap snapshot' records the "
                    "tree as it is)", True))
    w = st["world"]
    ignored = set(st.get("now_ignored") or [])
    why = {"D": " (still here, now ignored: the next snapshot leaves it out)"}
    for key, mark in (("added", "A"), ("modified", "M"), ("deleted", "D"), ("mode", "m")):
        out += [(f"  {mark} {shown_path(p)}{why[mark] if p in ignored else ''}", False) for p in w[key]]
    if st["trace"]["pending"]:
        out.append((f"  {st['trace']['pending']} new trace message(s)", False))
    if st["clean"]:
        out.append(("nothing changed", False))
    left = left_out_line(st["left_out"])
    if left:
        out.append((left, True))
    special = not_captured_line(st.get("not_captured") or [])
    if special:
        out.append((special, True))
    for nested in (nested_git_line(st.get("git_not_captured") or []),
                   nested_store_line(st.get("stores_not_captured") or [])):
        if nested:
            out.append((nested, True))
    gone = st.get("secrets_missing") or []
    if gone:
        shown = _first(gone)
        import shlex

        cmd = "agentsnap restore HEAD -- " + " ".join(shlex.quote(n) for n in gone)
        out.append((f"{len(gone)} secret file(s) kept in the local vault are gone from the tree: {shown}; "
                    f"'{cmd}' brings {'it' if len(gone) == 1 else 'them'} back", True))
    bad = st.get("secrets_unreadable")
    if bad:
        out.append((f"warning: {bad['error']}; {len(bad['paths'])} secret file(s) left out of HEAD are gone from the "
                    f"tree and may not come back from it: {_first(bad['paths'])}", True))
    late = st.get("unreplayed_journals")
    if late:
        from agentsnap_core.repository import journals

        out.append((journals.describe([(j["adapter"], j["path"]) for j in late]), True))
    pending = st.get("unsnapshotted_journals")
    if pending:
        from agentsnap_core.repository import journals

        out.append((journals.describe_unsnapshotted([(j["adapter"], j["path"]) for j in pending]), True))
    return out


def snapshot_lines(snap: Snapshot, as_json: bool, repo: Repo | None = None) -> list[tuple[str, bool]]:
    """``agentsnap snapshot``'s output: the id (stdout stays the id for scripts), then the files left out
    (with ``repo``: saying which its local secrets vault keeps, repository/vault.py)."""
    w = snap.layers.get("world") or {}
    names: list[str] = []
    kept: list[str] = []
    why_not = None
    if w.get("left_out"):
        from agentsnap_core.repository import vault

        names = vault.left_out(w)
        kept = vault.kept(repo, snap.id) if repo is not None else []
        why_not = vault.key_problem(repo) if repo is not None and len(kept) < len(names) else None
    from agentsnap_core.layers import world as world_layer

    special = [world_layer.name_in(n) for n in w.get("not_captured") or []]
    git_dirs, stores = world_layer.split_stores([world_layer.name_in(n) for n in w.get("git_not_captured") or []])
    if as_json:
        world = {**{k: w.get(k) for k in ("files", "bytes", "hashed")}, "left_out": names, "kept_locally": kept,
                 "not_captured": special, "git_not_captured": git_dirs, **({"stores_not_captured": stores} if stores else {})}
        return [(json_line({"v": JSON_VERSION, **snap.summary(), "world": world}), False)]
    left = left_out_line(names, kept)
    if left and why_not:
        left += f" (not kept in the local vault: {why_not})"
    lines = [(snap.id, False)] + ([(left, True)] if left else [])
    cut = repo.restore_interrupted() if repo is not None else None
    if cut is not None:  # (taken all the same: nothing is lost by it, and a hook's protecting snapshot must not fail)
        from agentsnap_core.repository.repo import restore_interrupted_line

        lines.append(("note: this snapshot holds the tree as it is now; " + restore_interrupted_line(cut), True))
    return lines + [(line, True) for line in (not_captured_line(special), nested_git_line(git_dirs),
                                               nested_store_line(stores)) if line]


def restore_notes(res: dict[str, Any]) -> list[tuple[str, bool]]:
    """The stderr lines of a restore's (or a switch's) answer: the secret files of the local vault that could not be
    brought back (repository/vault.py), the ``.git`` directories the snapshot did not capture, and (a switch) the
    worktrees forgotten because their directory is gone."""
    note = [(f"warning: {res['secrets_note']}", True)] if res.get("secrets_note") else []
    note += [(f"warning: {n}", True) for n in res.get("notes") or []]
    if res.get("temps_removed"):  # (removed from the tree: said, never silent)
        note.append((f"note: removed the temp file(s) an interrupted restore had left: {listing(res['temps_removed'])}", True))
    lines = (git_not_restored_line(res.get("git_not_restored") or [], res["id"]),
             store_not_restored_line(res.get("stores_not_restored") or [], res["id"]),
             git_held_back_line(res.get("git_held_back") or [], res["id"]))
    return note + [(line, True) for line in lines if line]


def restore_lines(res: dict[str, Any], as_json: bool, dry_run: bool = False, to: bool = False) -> list[tuple[str, bool]]:
    """``agentsnap restore``'s output for :meth:`Repo.restore`'s answer."""
    note = restore_notes(res)
    if as_json:
        return note + [(json_line({"v": JSON_VERSION, **res}), False)]
    if dry_run:
        ch = res["changes"]
        return [(f"would restore ({key}): {shown_path(p)}", False) for key in ("added", "modified", "deleted", "mode")
                for p in ch.get(key, [])]
    if to:
        return note + [(f"restored {short(res['id'])} into {res['to']} ({res['files']} files)", False)]
    return note + [(f"restored {short(res['id'])}; undo with: agentsnap restore {short(res['undo'])}", False)]


def fork_lines(out: list[dict[str, Any]], as_json: bool) -> list[tuple[str, bool]]:
    """``agentsnap fork``'s output for :meth:`Repo.fork`'s answer."""
    # secret files of the local vault a worktree did not get (repository/vault.py): one line each, stderr
    notes = [(f"warning: {n}", True) for n in dict.fromkeys(f["secrets_note"] for f in out if f.get("secrets_note"))]
    held = next((f for f in out if f.get("git_held_back")), None)  # (the same for every worktree: one line)
    line = git_held_back_line(held["git_held_back"], held["id"], "restore it in the worktree with --trust-git") if held else None
    notes += [(line, True)] if line else []
    if as_json:
        return notes + [(json_line({"v": JSON_VERSION, "forks": out}), False)]
    return notes + [(f"{f['branch']} -> {short(f['id'])}" + (f"  {f['path']}" if "path" in f else ""), False) for f in out]


@contextmanager
def progress(repo: Repo, label: str, enabled: bool) -> Iterator[None]:
    """A byte counter on a TTY; silent otherwise."""
    if not enabled or sys.stderr is None or not sys.stderr.isatty():  # (2>&-: stderr is None, not a stream)
        yield
        return
    from rich.progress import BarColumn, DownloadColumn, Progress, SpinnerColumn, TextColumn, TransferSpeedColumn

    with Progress(SpinnerColumn(), TextColumn(label), BarColumn(), DownloadColumn(), TransferSpeedColumn(), transient=True) as bar:
        task = bar.add_task(label, total=None)
        repo.progress = lambda _k, n, _t: bar.advance(task, n)
        try:
            yield
        finally:
            repo.progress = None
