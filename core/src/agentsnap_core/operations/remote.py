"""push / fetch / pull / clone: move snapshots between a repository and a remote store.

Only missing objects travel. The transfer walks the snapshot DAG from the tips, asking the
destination in batches which manifests it lacks (a manifest the destination has is complete:
manifests are always written after everything they name), collects the content those manifests
name, asks in batches which of it is missing, and copies it with a bounded thread pool in an
order that keeps every store complete at all times: chunks, then chunk lists, then manifests
(parents first), then the index, and refs last - a reader never sees a ref to a missing object.
An interrupted transfer leaves only unreferenced objects behind; re-running it copies the rest.

Branch updates are compare-and-swap on the remote. A push that is not a fast-forward is refused
unless ``force_with_lease`` is given (git's meaning: overwrite only if the remote still has what
our remote-tracking ref says it had).
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

from agentsnap_core.errors import AgentSnapError, InvalidInput, RefConflict, TargetNotEmpty
from agentsnap_core.format import crypto, objects
from agentsnap_core.format.encoding import unpack
from agentsnap_core.format.objects import Kind, is_oid
from agentsnap_core.layers import world
from agentsnap_core.stores import (
    InvalidStoreURL,
    Store,
    StoreUnavailable,
    ledger_of,
    mask_url,
    open_store,
    store_url_of,
)
from agentsnap_core.stores.base import ANY, RefUpdate, SnapshotRow

if TYPE_CHECKING:
    from agentsnap_core.repository.repo import Repo

REMOTES_KEY = "remotes"
DEFAULT_REMOTE = "origin"
DEFAULT_JOBS = 8
_BATCH = 1000
#: ``(objects done, objects known so far, bytes done)``
TransferProgress = Callable[[int, int, int], None]


class PushRejected(AgentSnapError):
    """The remote refused some ref updates (not a fast-forward, or a stale lease)."""

    def __init__(self, url: str, rejected: dict[str, str], advice: str | None = None) -> None:
        self.url, self.rejected = mask_url(url), rejected
        what = "; ".join(f"{name}: {why}" for name, why in sorted(rejected.items()))
        if advice is None and all(name.startswith("refs/tags/") for name in rejected):  # (pull and
            advice = "a push never moves a tag the remote has: give the new snapshot another tag name"  # the lease
        elif advice is None:  # never move a tag)
            advice = ("run 'agentsnap pull' to merge the remote's work, then push again (or overwrite with "
                      "--force-with-lease)")
        super().__init__(f"push to {self.url} rejected ({what}); {advice}")


class Diverged(AgentSnapError):
    """Local and remote branches both have snapshots the other lacks."""

    def __init__(self, branch: str, ours: str, theirs: str) -> None:
        self.branch, self.ours, self.theirs = branch, ours, theirs
        super().__init__(
            f"branch {branch} and the remote have diverged ({ours[:12]} vs {theirs[:12]}); "
            "merge them with 'agentsnap merge' and push again"
        )


@dataclass
class TransferResult:
    """What a transfer did."""

    url: str = ""
    objects: int = 0  #: objects copied
    bytes: int = 0  #: stored bytes copied
    snapshots: int = 0  #: manifests copied
    present: int = 0  #: objects the destination already had (among those checked)
    updated: dict[str, list[str | None]] = field(default_factory=dict)  #: ref -> [old, new]
    up_to_date: list[str] = field(default_factory=list)
    rejected: dict[str, str] = field(default_factory=dict)
    merge: dict[str, Any] | None = None
    ledger: int = 0  #: effects-ledger entries copied
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


# ---------------------------------------------------------------- remotes config


def remotes(repo: Repo) -> dict[str, str]:
    """Named remotes of this repository: ``{name: url}``."""
    raw = _local_refs(repo).get_config(REMOTES_KEY)
    return dict(json.loads(raw)) if raw else {}


def _local_refs(repo: Repo) -> Any:
    """The repository directory's own refs (remotes are per checkout, like git's config)."""
    local = getattr(repo.store, "local", None)
    return local.refs if local is not None else repo.refs


def add_remote(repo: Repo, name: str, url: str) -> str:
    from agentsnap_core.repository.repo import check_ref_name

    check_ref_name(name)
    if "/" in name:
        raise InvalidInput(f"remote name {name!r} may not contain '/'")
    url = store_url_of(url)
    _check_url_syntax(url)
    current = remotes(repo)
    if name in current:
        raise InvalidInput(f"remote {name!r} already exists ({mask_url(current[name])}); remove it first")
    current[name] = url
    _local_refs(repo).set_config(REMOTES_KEY, json.dumps(current, sort_keys=True))
    return url


def remove_remote(repo: Repo, name: str) -> None:
    current = remotes(repo)
    if name not in current:
        raise InvalidInput(f"no remote named {name!r} (see 'agentsnap remote list')")
    del current[name]
    _local_refs(repo).set_config(REMOTES_KEY, json.dumps(current, sort_keys=True))
    stale = [RefUpdate(r, None, ANY) for r in repo.refs.list_refs(f"refs/remotes/{name}/")]
    if stale:
        repo.refs.update_refs(stale, f"remote: remove {name}")


def _check_url_syntax(url: str) -> None:
    scheme = url.split("://", 1)[0].lower() if "://" in url else ""
    if scheme not in ("file", "postgresql", "postgres", "s3"):
        raise InvalidStoreURL(url, f"unknown scheme {scheme!r}")


def resolve_remote(repo: Repo, remote: str | None) -> tuple[str | None, str]:
    """``(name or None, url)`` for a remote name or URL (default: ``origin``)."""
    if remote is not None and not remote.strip():  # (a script's unset variable: not silently origin)
        raise InvalidInput("an empty remote name: name a remote or give a URL (default: origin, when none is given)")
    remote = remote or DEFAULT_REMOTE
    named = remotes(repo)
    if remote in named:
        return remote, named[remote]
    if "://" in remote or os.sep in remote or remote.startswith("."):
        url = store_url_of(remote)
        _check_url_syntax(url)
        return None, url
    raise InvalidInput(f"no remote named {remote!r}; add it with 'agentsnap remote add {remote} URL' or give a URL")


def _name_to_add(repo: Repo) -> str:
    """A remote name to suggest adding: ``origin`` when free, else ``team``, ``team2``... (the advice of a
    command given a URL where a named remote is needed)."""
    named = remotes(repo)
    for candidate in (DEFAULT_REMOTE, "team", *(f"team{i}" for i in range(2, 100))):
        if candidate not in named:
            return candidate
    return "NAME"


# ---------------------------------------------------------------- the object transfer


def _manifest(store: Any, oid: str) -> dict[str, Any]:
    kind, raw = store.get(oid)
    if kind != Kind.MANIFEST:
        raise AgentSnapError(f"{oid[:12]} is not a snapshot")
    doc = unpack(raw, f"manifest {oid[:12]}")
    if not isinstance(doc, dict) or not isinstance(doc.get("parents"), list) or not isinstance(doc.get("layers"), dict):
        raise AgentSnapError(f"manifest {oid[:12]} is malformed")
    return doc


def _new_manifests(src: Any, missing: Callable[[list[str]], list[str]], tips: Iterable[str]
                   ) -> list[tuple[str, dict[str, Any]]]:
    """``(id, manifest)`` of the snapshots reachable from ``tips`` that ``missing`` says the other side lacks, newest
    first, found generation by generation (batched existence checks)."""
    needed: list[tuple[str, dict[str, Any]]] = []
    frontier = [t for t in dict.fromkeys(tips) if is_oid(t)]
    seen = set(frontier)
    while frontier:
        nxt: list[str] = []
        for oid in missing(frontier):
            m = _manifest(src, oid)
            needed.append((oid, m))
            for p in m["parents"]:
                if is_oid(p) and p not in seen:
                    seen.add(p)
                    nxt.append(p)
        frontier = nxt
    return needed


class SecretsInPush(AgentSnapError):
    """What a push would send holds secrets (in a conversation, an environment or an agent's state); nothing was sent."""

    def __init__(self, url: str, findings: list[dict[str, Any]]) -> None:
        self.findings = findings
        shown = "; ".join(f"{f['snapshot'][:12]} {f['layer']} {f['where'] or '(value)'}: {f['kind']} {f['preview']}"
                          for f in findings[:5])
        more = f" (and {len(findings) - 5} more; 'agentsnap scan SNAPSHOT' lists a snapshot's)" if len(findings) > 5 else ""
        super().__init__(
            f"push to {url} refused: {len(findings)} possible secret(s) in what it would send, in a conversation, a "
            f"recorded environment or an agent's state: {shown}{more}. Nothing was sent. Later snapshots carry them "
            "on; push with --allow-secrets (push(..., allow_secrets=True)) if whoever can read the remote may have them"
        )


def _refuse_secrets(repo: Repo, dst: Any, url: str, tips: list[str]) -> list[str]:
    """:class:`SecretsInPush` when the snapshots ``dst`` lacks (all of them for a store not made yet) hold secrets
    outside their files (:func:`agentsnap_core.operations.scan.scan_outgoing`); else the notes to give (what could
    not be read)."""
    from agentsnap_core.operations.scan import scan_outgoing

    def missing(oids: list[str]) -> list[str]:
        gone = dst.objects.missing(oids) if dst is not None else set(oids)
        return [o for o in oids if o in gone]

    outgoing = _new_manifests(repo.objects, missing, tips)
    found, unread = scan_outgoing(repo.objects, outgoing, lambda oid: _manifest(repo.objects, oid)) if outgoing else ([], [])
    if found:
        raise SecretsInPush(url, found)
    return [f"not looked at for secrets (could not be read): {', '.join(unread[:5])}"
            + (f" and {len(unread) - 5} more" if len(unread) > 5 else "")] if unread else []


def _layer_content(src: Any, manifest: dict[str, Any]) -> list[str]:
    """Top-level content ids a manifest names (layer payloads, world tree, every file)."""
    out: list[str] = []
    for name, rec in manifest["layers"].items():
        if not isinstance(rec, dict):
            continue
        out += [rec[k] for k in ("tree", "env", "content") if is_oid(rec.get(k))]
        out += [r for r in rec.get("refs", []) if is_oid(r)]
        if name == "world" and is_oid(rec.get("tree")):
            out += [ref for _p, kind, _m, _s, ref in world.load_tree(src, rec["tree"]) if kind == "f" and is_oid(ref)]
    return out


def _stored_kind(stored: bytes) -> int:
    return stored[4] if len(stored) >= objects.HEADER.size else -1


class _Copier:
    def __init__(self, src: Any, dst: Any, jobs: int, progress: TransferProgress | None, result: TransferResult) -> None:
        self.src, self.dst, self.jobs, self.progress, self.result = src, dst, max(1, jobs), progress, result
        self.known = 0

    def _tick(self, n_bytes: int) -> None:
        self.result.objects += 1
        self.result.bytes += n_bytes
        if self.progress:
            self.progress(self.result.objects, self.known, self.result.bytes)

    def missing(self, oids: Iterable[str]) -> list[str]:
        wanted = list(dict.fromkeys(oids))
        out: list[str] = []
        for i in range(0, len(wanted), _BATCH):
            batch = wanted[i : i + _BATCH]
            gone = self.dst.missing(batch)
            self.result.present += len(batch) - len(gone)
            out += [o for o in batch if o in gone]
        return out

    def copy_many(self, oids: list[str], hold_lists: bool) -> list[tuple[str, bytes]]:
        """Copy objects in parallel; with ``hold_lists``, chunk lists are returned instead of written."""
        held: list[tuple[str, bytes]] = []

        def one(oid: str) -> tuple[int, tuple[str, bytes] | None]:
            stored = objects.compact(self.src.get_stored(oid))  # a packed small object is sent compressed
            if hold_lists and _stored_kind(stored) == Kind.CHUNKS:
                return 0, (oid, stored)
            self.dst.put_stored(oid, stored)
            return len(stored), None

        if not oids:
            return held
        with ThreadPoolExecutor(self.jobs) as pool:
            for i in range(0, len(oids), _BATCH):  # bounded: at most one batch in flight
                for size, got in pool.map(one, oids[i : i + _BATCH]):
                    if got is None:
                        self._tick(size)
                    else:
                        held.append(got)
        return held

    def copy_stored(self, oid: str, stored: bytes) -> None:
        self.dst.put_stored(oid, stored)
        self._tick(len(stored))


def transfer(
    src: Store | Any,
    dst: Store | Any,
    tips: Iterable[str],
    *,
    jobs: int = DEFAULT_JOBS,
    progress: TransferProgress | None = None,
    result: TransferResult | None = None,
) -> TransferResult:
    """Copy every object reachable from ``tips`` that ``dst`` lacks; index the new snapshots in ``dst``.

    ``src``/``dst`` are stores (``.objects`` and ``.refs``). Refs are not touched.
    """
    result = result or TransferResult()
    c = _Copier(src.objects, dst.objects, jobs, progress, result)
    # 1. manifests dst lacks
    needed = _new_manifests(src.objects, c.missing, tips)
    # 2. the content they name, minus what dst has
    top: list[str] = []
    for _oid, m in needed:
        top += _layer_content(src.objects, m)
    top = c.missing(top)
    c.known = len(top) + len(needed)
    # 3. blobs now, chunk lists held back until their chunks are in
    lists = c.copy_many(top, hold_lists=True)
    chunk_ids: list[str] = []
    for oid, stored in lists:
        _kind, raw = objects.decode(oid, stored)
        chunk_ids += [cid for cid, _n in objects.unpack_chunk_list(oid, raw)]
    chunks = c.missing(chunk_ids)
    c.known += len(chunks)
    c.copy_many(chunks, hold_lists=False)
    dst.objects.barrier()
    for oid, stored in lists:
        c.copy_stored(oid, stored)
    dst.objects.barrier()
    # 4. manifests, oldest first, each indexed once it is in
    for oid, _m in reversed(needed):
        c.copy_stored(oid, objects.compact(src.objects.get_stored(oid)))
        result.snapshots += 1
    dst.objects.barrier()
    rows = [
        SnapshotRow(oid, tuple(p for p in m["parents"] if is_oid(p)), float(m.get("time", 0.0)),
                    str(m.get("message", "")), str(m.get("agent", "")))
        for oid, m in reversed(needed)
    ]  # fmt: skip
    batch = getattr(dst.refs, "index_snapshots", None)
    if callable(batch):
        batch(rows)
    else:
        for row in rows:
            dst.refs.index_snapshot(row)
    return result


#: the note of a transfer between two ledgers that each recorded tool calls the other lacks
LEDGERS_DIVERGED = ("effects ledgers have diverged (each side recorded tool calls the other lacks); ledger entries "
                    "were not copied: snapshots that name the missing ones fail 'agentsnap verify' and cannot replay "
                    "those calls there")


def sync_ledger(src: Any, dst: Any, result: TransferResult) -> None:
    """Copy the effects-ledger entries ``dst`` lacks when its ledger is a prefix of ``src``'s.

    The ledger follows real time and is append-only, so two ledgers that both grew cannot be
    joined here: that is reported in ``result.notes`` and nothing is copied.
    """
    n_src = src.count()
    if n_src == 0:
        return
    n_dst = dst.count()
    rows = src.read(0)
    if n_dst:
        there = dst.read(0)
        if there[:n_src] != rows[:n_dst]:  # neither is a prefix of the other (a longer one is compared too)
            result.notes.append(LEDGERS_DIVERGED)
            return
    if n_dst >= n_src:
        return
    seal = src.seal()
    for i in range(n_dst, len(rows)):
        if not dst.append(i, rows[i][0], rows[i][1], seal):
            result.notes.append("the destination's effects ledger grew during the transfer; re-run to copy the rest")
            return
        result.ledger += 1


def _repo_ledger(repo: Repo) -> Any:
    from agentsnap_core.layers.effects_ledger import store_for

    return store_for(repo)


def is_ancestor(store: Any, ancestor: str, descendant: str) -> bool:
    """True when ``ancestor`` is ``descendant`` or one of its ancestors (in ``store``)."""
    if ancestor == descendant:
        return True
    if not store.has(ancestor):
        return False
    seen = {descendant}
    stack = [descendant]
    while stack:
        for p in _manifest(store, stack.pop())["parents"]:
            if p == ancestor:
                return True
            if p not in seen:
                seen.add(p)
                stack.append(p)
    return False


# ---------------------------------------------------------------- verbs


def _push_refs(repo: Repo, refs: list[str] | None) -> list[str]:
    if not refs:
        symref, _ = repo.head()
        if not symref or not symref.startswith("refs/heads/"):
            raise InvalidInput("HEAD is detached; name the branch to push")
        return [symref]
    out = []
    for r in refs:
        for name in (r, f"refs/heads/{r}", f"refs/tags/{r}"):
            if name.startswith("refs/") and repo.refs.get_ref(name):
                out.append(name)
                break
        else:
            raise InvalidInput(f"nothing to push: no branch or tag named {r!r}")
    return out


#: what an interrupted store creation leaves in its directory (a push then makes the store there again)
_STORE_LAYOUT = frozenset({"objects", "format.json.tmp"})


def _refuse_occupied_directory(url: str, exc: StoreUnavailable) -> None:
    """A push makes a store only where nothing else is: not in a project's working tree (its store is inside it), a
    damaged store, or a directory of other files (a mistyped path), where the store's files would land among them."""
    if not url.lower().startswith("file:"):
        return
    path = Path(unquote(urlsplit(url).path))
    try:
        held = sorted(os.listdir(path)) if path.is_dir() else []
    except OSError:
        return  # (unreadable: creating the store there fails and says why)
    if not held or set(held) <= _STORE_LAYOUT:
        return
    if "format.json" in held or ".agentsnap" in held:
        raise exc  # a damaged store, or a working tree: the message names its store
    shown = ", ".join(held[:3]) + (f" and {len(held) - 3} more" if len(held) > 3 else "")
    raise StoreUnavailable(url, f"no agentsnap store there, and {path} is not empty (it holds {shown}); a push makes "
                                "a new store only in a new or empty directory (check the path)") from None


def _tracking(remote_name: str | None, ref: str) -> str | None:
    if remote_name and ref.startswith("refs/heads/"):
        return f"refs/remotes/{remote_name}/{ref[len('refs/heads/'):]}"
    return None


def push(
    repo: Repo,
    remote: str | None = None,
    refs: list[str] | None = None,
    *,
    force_with_lease: bool = False,
    jobs: int = DEFAULT_JOBS,
    progress: TransferProgress | None = None,
    allow_secrets: bool = False,
) -> TransferResult:
    """Send the snapshots ``refs`` (default: the current branch) name and move the remote's refs.

    What would be sent is looked at first: secrets in the conversations, recorded environments or agents' states of
    the snapshots the remote lacks refuse the push before anything is sent, unless ``allow_secrets`` (files travel as
    git sends them; ``agentsnap scan`` reports those).

    Raises:
        SecretsInPush: see above; nothing was sent and no store was created.
        PushRejected: some ref is not a fast-forward (or the lease is stale); the others were pushed.
    """
    from agentsnap_core.repository.repo import _whoami

    name, url = resolve_remote(repo, remote)
    names = _push_refs(repo, refs)
    tips = {n: repo.refs.get_ref(n) for n in names}
    empty = [n for n, t in tips.items() if t is None]
    if empty:  # (before the remote is opened: a push that sends nothing creates no store there)
        raise InvalidInput(f"nothing to push: {', '.join(empty)} has no snapshot yet")
    if url.lower().startswith("file:"):  # a store in the tree: captured by its snapshots, deleted by its restore
        dest = Path(unquote(urlsplit(url).path))
        inside = repo.inside_tree_line(dest, "push", dest.name) if dest.resolve() != repo.root.resolve() else None
        if inside:
            raise InvalidInput(inside)
    result = TransferResult(url=mask_url(url))
    dst: Any = None
    try:
        dst = open_store(url)
    except StoreUnavailable as exc:  # nothing there yet (or unreachable: then creating fails the same way)
        _refuse_occupied_directory(url, exc)
    if not allow_secrets:
        try:
            result.notes += _refuse_secrets(repo, dst, mask_url(url), [t for t in tips.values() if t])
        except AgentSnapError:
            if dst is not None:
                dst.close()
            raise
    if dst is None:
        dst = open_store(url, create=True)
        result.notes.append(f"{mask_url(url)} held no store: this push created a new store there (check the URL if you meant an existing one)")
        if repo.refs.get_config(crypto.CONFIG_ENCRYPT) == "aes-gcm":  # (the new store says what it holds: a checkout
            for key in (crypto.CONFIG_KEY_ID, crypto.CONFIG_ENCRYPT):  # bound to it seals what it writes, as here)
                dst.refs.set_config(key, repo.refs.get_config(key) or "")
    try:
        if dst.refs.get_config(crypto.CONFIG_ENCRYPT) == "aes-gcm":  # what arrives in clear is sealed on the way in
            if crypto.load_key() is None:
                raise InvalidInput(f"{mask_url(url)} keeps its snapshots encrypted and this process has no key: set "
                                   f"{crypto.KEY_ENV} (or {crypto.KEY_FILE_ENV}) to its key and push again (what is "
                                   "sent is encrypted on the way); nothing was sent")
            dst.objects = crypto.encryption_wrapper(dst.objects, dst.refs)  # (a wrong key: refused, naming both)
        transfer(repo.store, dst, [t for t in tips.values() if t], jobs=jobs, progress=progress, result=result)
        sync_ledger(_repo_ledger(repo), ledger_of(dst), result)  # before refs: snapshots name ledger positions
        updates: list[RefUpdate] = []
        for ref, new in tips.items():
            old = dst.refs.get_ref(ref)
            if old == new:
                result.up_to_date.append(ref)
                tracking = _tracking(name, ref)  # (a push killed after the remote moved, before this side's ref did)
                if tracking and repo.refs.get_ref(tracking) != new:
                    repo.refs.update_refs([RefUpdate(tracking, new, ANY)], f"push: {mask_url(url)} (already there)")
                continue
            tracking = _tracking(name, ref)
            if force_with_lease:
                lease = repo.refs.get_ref(tracking) if tracking else None
                if name is None and old is not None and ref.startswith("refs/heads/"):  # (a branch pushed by URL:
                    # a fetch by URL makes no remote-tracking refs; a tag is never moved, whatever the lease)
                    result.rejected[ref] = LEASE_NEEDS_A_NAME
                    continue
                if lease != old:
                    result.rejected[ref] = _stale_lease(old, lease)
                    continue
            elif ref.startswith("refs/tags/") and old is not None:
                result.rejected[ref] = "tag already exists on the remote"
                continue
            elif old is not None and not is_ancestor(repo.objects, old, str(new)):
                result.rejected[ref] = f"not a fast-forward (the remote has {_short(old)}, which you do not have)"
                continue
            updates.append(RefUpdate(ref, new, old))
        if updates:
            try:
                dst.refs.update_refs(updates, f"push: from {_whoami()}")
            except RefConflict as exc:
                result.rejected[exc.name] = "the remote moved during the push; pull and push again"
                updates = []
        for u in updates:
            result.updated[u.name] = [u.expected if u.expected != ANY else None, u.new]
            tracking = _tracking(name, u.name)
            if tracking:
                repo.refs.update_refs([RefUpdate(tracking, u.new, ANY)], f"push: {mask_url(url)}")
    finally:
        dst.close()
    if result.rejected:
        advice = None
        if name is None and not all(n.startswith("refs/tags/") for n in result.rejected):  # (a pull needs a name)
            suggest = _name_to_add(repo)
            advice = (f"this push named a URL, and a pull needs a named remote: run 'agentsnap remote add {suggest} "
                      f"{remote}' and 'agentsnap pull {suggest}' to merge the remote's work, then push again (or "
                      f"overwrite with 'agentsnap push {suggest} --force-with-lease')")
        err = PushRejected(url, result.rejected, advice)
        err.result = result  # type: ignore[attr-defined]
        raise err
    return result


#: why ``--force-with-lease`` is refused for a remote given by URL (push and push --delete)
LEASE_NEEDS_A_NAME = ("--force-with-lease needs a named remote, whose remote-tracking refs are the lease: "
                      "'agentsnap remote add NAME URL', fetch NAME, then push NAME")


def _stale_lease(old: str | None, lease: str | None) -> str:
    return f"stale lease (remote has {_short(old)}, we last saw {_short(lease)}); fetch first"


def delete_remote_refs(repo: Repo, remote: str | None, refs: list[str], *, force_with_lease: bool = False
                       ) -> TransferResult:
    """Delete branches or tags ``refs`` on the remote (``agentsnap push REMOTE --delete NAME...``), all or none.

    Each name is looked up on the remote (``refs/...``, else a branch, else a tag); one it lacks refuses the whole
    call before anything changes. The remote's reflog keeps what each ref named (its snapshots stay until the remote's
    own gc lets them go), and this side's remote-tracking ref goes with it. With ``force_with_lease`` a ref is deleted
    only if the remote still has what this side last saw of it (its remote-tracking ref).

    Raises:
        PushRejected: a stale lease, or the remote moved meanwhile; nothing was deleted.
    """
    from agentsnap_core.repository.repo import _whoami

    if not refs:
        raise InvalidInput("name the branch(es) or tag(s) to delete on the remote: agentsnap push REMOTE --delete NAME")
    name, url = resolve_remote(repo, remote)
    result = TransferResult(url=mask_url(url))
    dst = open_store(url)  # (never made: there is nothing to delete in a store that does not exist)
    try:
        found: dict[str, str] = {}
        for r in refs:
            for ref in (r, f"refs/heads/{r}", f"refs/tags/{r}"):
                oid = dst.refs.get_ref(ref) if ref.startswith("refs/") else None
                if oid is not None:
                    found[ref] = oid
                    break
            else:
                raise InvalidInput(f"{mask_url(url)} has no branch or tag named {r!r}; nothing was deleted")
        for ref, old in found.items():
            tracking = _tracking(name, ref)
            if force_with_lease:
                lease = repo.refs.get_ref(tracking) if tracking else None
                if tracking is None:
                    result.rejected[ref] = LEASE_NEEDS_A_NAME
                elif lease != old:
                    result.rejected[ref] = _stale_lease(old, lease)
        if not result.rejected:
            try:
                dst.refs.update_refs([RefUpdate(ref, None, old) for ref, old in found.items()],
                                     f"push --delete: from {_whoami()}")
            except RefConflict as exc:
                result.rejected[exc.name] = "the remote moved during the push; fetch and look again"
    finally:
        dst.close()
    if result.rejected:
        raise PushRejected(url, result.rejected, advice="nothing was deleted")
    gone = [RefUpdate(t, None, ANY) for t in (_tracking(name, ref) for ref in found) if t and repo.refs.get_ref(t)]
    if gone:
        repo.refs.update_refs(gone, f"push --delete: {mask_url(url)}")
    for ref, old in found.items():
        result.updated[ref] = [old, None]
    return result


def fetch(
    repo: Repo, remote: str | None = None, *, jobs: int = DEFAULT_JOBS, progress: TransferProgress | None = None
) -> TransferResult:
    """Copy the remote's branches and tags in; move ``refs/remotes/<remote>/*`` and add new tags."""
    name, url = resolve_remote(repo, remote)
    src = open_store(url)
    try:
        with repo.writer_sessions.session():  # the fetched objects are named by refs only at the end
            return _fetch_from(repo, src, name, url, jobs, progress)
    finally:
        src.close()


def _fetch_from(
    repo: Repo, src: Any, name: str | None, url: str, jobs: int, progress: TransferProgress | None
) -> TransferResult:
    result = TransferResult(url=mask_url(url))
    heads = src.refs.list_refs("refs/heads/")
    tags = src.refs.list_refs("refs/tags/")
    transfer(src, repo.store, [*heads.values(), *tags.values()], jobs=jobs, progress=progress, result=result)
    sync_ledger(ledger_of(src), _repo_ledger(repo), result)
    updates: list[RefUpdate] = []
    for ref, oid in heads.items():
        tracking = _tracking(name, ref)
        if tracking is None:
            continue
        old = repo.refs.get_ref(tracking)
        if old == oid:
            result.up_to_date.append(tracking)
        else:
            updates.append(RefUpdate(tracking, oid, ANY))
            result.updated[tracking] = [old, oid]
    for ref, oid in tags.items():
        old = repo.refs.get_ref(ref)
        if old is None:
            updates.append(RefUpdate(ref, oid, None))
            result.updated[ref] = [None, oid]
        elif old != oid:
            result.rejected[ref] = f"local tag differs ({_short(old)} here, {_short(oid)} there); kept ours"
    if name:
        gone = set(repo.refs.list_refs(f"refs/remotes/{name}/")) - {_tracking(name, r) for r in heads}
        updates += [RefUpdate(r, None, ANY) for r in sorted(gone)]
    elif heads:  # by URL: no remote-tracking refs, so the branches fetched are said here (by id), never lost in silence
        listed = ", ".join(f"{r[len('refs/heads/'):]} {_short(o)}" for r, o in sorted(heads.items())[:5])
        more = f" and {len(heads) - 5} more" if len(heads) > 5 else ""
        result.notes.append(f"fetched by URL, so no remote-tracking refs were made: its branches are {listed}{more} "
                            "(merge or branch from those ids; 'agentsnap remote add NAME URL' keeps them as NAME/...)")
    if updates:
        repo.refs.update_refs(updates, f"fetch: {mask_url(url)}")
    return result


def pull(
    repo: Repo,
    remote: str | None = None,
    branch: str | None = None,
    *,
    jobs: int = DEFAULT_JOBS,
    progress: TransferProgress | None = None,
) -> TransferResult:
    """Fetch, then bring the current branch up to the remote's: fast-forward, or merge when both moved.

    Raises:
        Diverged: both sides moved and no merge engine is available.
    """
    name, url = resolve_remote(repo, remote)
    if name is None:  # (before the fetch: a refused pull copies nothing)
        suggest = _name_to_add(repo)
        raise InvalidInput(f"pull needs a named remote, not a URL (its remote-tracking refs are what it merges): run "
                           f"'agentsnap remote add {suggest} {remote}', then 'agentsnap pull {suggest}'")
    here = repo.current_branch()  # what the pull brings up to date, whichever remote branch it names (as git)
    if here is None:
        raise InvalidInput("HEAD is detached; switch to the branch to pull into (agentsnap switch NAME), then pull")
    result = fetch(repo, remote, jobs=jobs, progress=progress)
    branch = branch or here
    remote_ref = f"refs/remotes/{name}/{branch}"
    theirs = repo.refs.get_ref(remote_ref)
    if theirs is None:  # a typo, or a branch never pushed: never "up to date" in silence
        there = sorted(r[len(f"refs/remotes/{name}/") :] for r in repo.refs.list_refs(f"refs/remotes/{name}/"))
        raise InvalidInput(f"remote {name} has no branch {branch!r} (it has {', '.join(there) or 'no branches'}); "
                           f"nothing was merged (push it with 'agentsnap push {name} {branch}', or name a branch)")
    _, ours = repo.head()
    if theirs == ours:
        return result
    if ours is not None and is_ancestor(repo.objects, theirs, ours):
        return result  # we are ahead
    from agentsnap_core.operations.merge import _require_clean, _require_whole

    doing = f"pulling (fetched: {remote_ref} is at {theirs[:12]})"
    _require_whole(repo, doing)  # (a checkout cut short: its files are not the user's to snapshot)
    if ours is None and repo.working_entries():
        raise InvalidInput(
            f"branch {here} has no snapshot here but the working tree has files; "
            "snapshot them first (then pull merges), or clone into an empty directory"
        )
    if ours is None and repo.messages():  # (the fast-forward replaces the working trace with the snapshot's)
        raise InvalidInput(
            f"branch {here} has no snapshot here but the working trace has {len(repo.messages())} message(s) not "
            "in any snapshot; snapshot them first (then pull merges)"
        )
    if ours is None or is_ancestor(repo.objects, ours, theirs):
        if ours is not None and "world" in repo.get(theirs).layers:  # as merge does: never over unsaved work
            _require_clean(repo, doing)  # (the fast-forward replaced it in silence)
        result.notes += _fast_forward(repo, f"refs/heads/{here}", ours, theirs)
        result.merge = {"status": "fast-forward", "snapshot": theirs}
        return result
    try:
        from agentsnap_core.operations.merge import merge as merge_snapshots
    except ImportError:  # pragma: no cover - the merge engine ships with core
        raise Diverged(here, ours, theirs) from None
    merged = merge_snapshots(repo, remote_ref, message=f"merge {remote_ref} into {here}")
    result.merge = merged.as_dict()
    return result


def _encrypted(store: Any, tips: list[str]) -> bool:
    """Whether ``store`` keeps its snapshots encrypted at rest (its setting, or its tips' stored bytes)."""
    if store.refs.get_config(crypto.CONFIG_ENCRYPT) == "aes-gcm":
        return True
    for oid in tips:
        stored = store.objects.get_stored(oid)
        if objects.is_sealed(stored):
            return True
    return False


def _fast_forward(repo: Repo, ref: str, ours: str | None, theirs: str) -> list[str]:
    """Move ``ref`` and the working tree to ``theirs``; return what the result's notes must say (secret files the
    snapshot left out, which never travel, so that a checkout without them is never taken for the whole state)."""
    from agentsnap_core.repository.repo import git_held_back_note

    snap = repo.get(theirs)
    if "world" in snap.layers and ours is not None:
        said = repo.restore(theirs)  # moves the branch by compare-and-swap, keeps an undo snapshot
        return [n for n in (said.get("secrets_note"), git_held_back_note(said.get("git_held_back") or [], theirs)) if n]
    held: list[str] = []
    adopted: list[str] = []
    if "world" in snap.layers:  # (a clone: git's config and hooks of a snapshot from elsewhere are not written)
        if snap.layers["world"].get("include_git") and not repo.include_git:  # as the snapshot was taken: else the
            # checkout's .git would show as deleted in status, and its next snapshot would drop it
            repo.refs.set_config("world.include_git", "true")
            repo.include_git = True
            adopted = [f"snapshot {theirs[:12]} holds its .git directories: this checkout captures them too "
                       "(agentsnap config world.include_git false to stop)"]
        target, current, held = repo.guard_git_code(snap.layers["world"].get("tree"), repo.world_entries(snap),
                                                    repo.working_entries())
    # a clone cut short in its checkout is noted (status says how to finish it); the checkout never ends an earlier
    # interrupted restore (a clone has none, and pull refuses a tree one left), so it sweeps no temp files
    with repo.noting_restore(theirs, None, None) if "world" in snap.layers else nullcontext():
        if "world" in snap.layers:
            world.materialize(repo.objects, repo.root, target, current, False, None, None)
        repo.set_messages(repo.read_layer(snap, "trace") or [])
        repo.update_refs([RefUpdate(ref, theirs, ours)], f"pull: fast-forward to {theirs[:12]}")
    from agentsnap_core.repository import vault

    said_git = adopted + [note for note in [git_held_back_note(held, theirs)] if note]
    missing = [n for n in vault.left_out(snap.layers.get("world")) if not os.path.lexists(repo.root / n)]
    if not missing:
        return said_git
    shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
    return [f"snapshot {theirs[:12]} left out {len(missing)} secret file(s), which are never pushed: {shown}; they "
            "are not in this checkout (copy them from where the snapshot was made; docs/SECURITY.md)", *said_git]


def clone(
    url: str,
    directory: str | os.PathLike[str],
    *,
    branch: str | None = None,
    store_url: str | None = None,
    store_dir: str | os.PathLike[str] | None = None,
    jobs: int = DEFAULT_JOBS,
    progress: TransferProgress | None = None,
) -> tuple[Repo, TransferResult]:
    """Make ``directory`` a new repository with the remote's snapshots, and check out its branch (``store_dir``: its
    store outside it, as ``Repo.init(store_dir=...)``).

    The remote is opened before anything is created, so a bad URL leaves nothing behind.
    """
    from agentsnap_core.repository.repo import DEFAULT_BRANCH, Repo

    url = store_url_of(url)
    _check_url_syntax(url)
    dest = Path(directory).resolve()
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise TargetNotEmpty(str(directory))
    store = Path(store_dir).expanduser().resolve() if store_dir is not None else None
    store_made = store is not None and not (store / "format.json").exists()  # (what a failed clone takes back)
    store_existed = store is not None and store.exists()
    src = open_store(url)
    made = not dest.exists()
    repo = None
    try:
        heads = src.refs.list_refs("refs/heads/")
        if branch is not None and heads and f"refs/heads/{branch}" not in heads:
            raise InvalidInput(f"the remote has no branch {branch!r} (it has {', '.join(sorted(heads))})")
        repo = Repo.init(dest, branch=branch or DEFAULT_BRANCH, store_url=store_url, store_dir=store_dir)
        add_remote(repo, DEFAULT_REMOTE, url)
        result = _fetch_from(repo, src, DEFAULT_REMOTE, url, jobs, progress)
        if _encrypted(src, [*heads.values(), *src.refs.list_refs("refs/tags/").values()]):
            crypto.enable_encryption(repo)  # the key read them: what is snapshotted here is sealed too, as there
        if branch is None:
            branch = _checkout_choice(repo, heads)
            if branch != DEFAULT_BRANCH:  # (init made HEAD name main)
                repo.refs.set_head(repo.worktree, f"refs/heads/{branch}", None)
        tip = heads.get(f"refs/heads/{branch}")
        if tip:
            result.notes += _fast_forward(repo, f"refs/heads/{branch}", None, tip)
        # every other branch of the remote is a local branch too: a store's branches are mostly its agents' state
        # (LangGraph threads, a CrewAI memory), each of which the clone's adapters look for under its own name
        others = [RefUpdate(name, oid, None) for name, oid in sorted(heads.items()) if name != f"refs/heads/{branch}"]
        if others:
            repo.update_refs(others, f"clone: from {mask_url(url)}")
        return repo, result
    except BaseException:
        if repo is not None:
            repo.close()
        if made:
            shutil.rmtree(dest, ignore_errors=True)
        else:
            for child in dest.iterdir():
                if child.is_dir() and not child.is_symlink():
                    shutil.rmtree(child, ignore_errors=True)
                else:
                    child.unlink()
        if store is not None and store_made and repo is not None:  # (a store this clone made, outside the tree)
            shutil.rmtree(store, ignore_errors=True)
            if store_existed:
                store.mkdir(exist_ok=True)
        raise
    finally:
        src.close()


def _checkout_choice(repo: Repo, heads: dict[str, str]) -> str:
    """The branch a clone checks out when none is asked for: ``main``; without one on the remote, the first branch
    (by name) whose snapshot holds files; else a new ``main`` - never an agent's branch (a snapshot without files, as
    PFSaver's threads or CrewAI's memory): the user's own next snapshot would land on it."""
    from agentsnap_core.repository.repo import DEFAULT_BRANCH

    if f"refs/heads/{DEFAULT_BRANCH}" in heads or not heads:
        return DEFAULT_BRANCH
    for name, oid in sorted(heads.items()):
        try:
            if "world" in repo.manifest(oid).get("layers", {}):
                return name[len("refs/heads/") :]
        except AgentSnapError:  # (unreadable here, e.g. sealed without the key: not checked out)
            continue
    return DEFAULT_BRANCH


def _short(oid: str | None) -> str:
    return oid[:12] if oid else "nothing"


__all__ = [
    "Diverged",
    "PushRejected",
    "TransferResult",
    "add_remote",
    "clone",
    "fetch",
    "is_ancestor",
    "pull",
    "push",
    "remotes",
    "remove_remote",
    "resolve_remote",
    "transfer",
]


def clone_verified(url: str, directory: str | os.PathLike[str], trusted: Iterable[str], **kw: Any) -> Any:
    """``clone`` that requires every fetched snapshot to be signed by a trusted key; else nothing is left."""
    dest = Path(directory).resolve()
    existed = dest.exists()
    repo, result = clone(url, dest, **kw)
    keys = list(trusted)
    report = crypto.verify_signatures(repo, keys, tips=repo.refs.list_refs("refs/").values())
    if not report["ok"]:
        repo.close()
        if existed:
            for child in dest.iterdir():
                shutil.rmtree(child) if child.is_dir() and not child.is_symlink() else child.unlink()
        else:
            shutil.rmtree(dest)
        bad = report["problems"][0]
        raise crypto.UntrustedSnapshot(bad["id"], bad["error"])
    for k in keys:
        crypto.trust(repo, k)
    return repo, result


def pull_verified(repo: Repo, remote: str | None = None, trusted: Iterable[str] | None = None, **kw: Any) -> Any:
    """``fetch`` then check the fetched history's signatures before ``pull`` moves anything local."""
    keys = list(trusted) if trusted is not None else crypto.trusted_keys(repo)
    fetched = fetch(repo, remote)
    tips = [v for k, v in repo.refs.list_refs("refs/remotes/").items()]
    report = crypto.verify_signatures(repo, keys, tips=tips)
    if not report["ok"]:
        bad = report["problems"][0]
        raise crypto.UntrustedSnapshot(bad["id"], bad["error"])
    _ = fetched
    return pull(repo, remote, **kw)
