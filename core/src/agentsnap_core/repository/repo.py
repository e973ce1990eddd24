"""The repository: a working directory bound to a store, and the git-like verbs on it."""

from __future__ import annotations

import fcntl
import functools
import json
import os
import re
import shutil
import stat
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import msgpack

from agentsnap_core import plugins
from agentsnap_core.errors import (
    AgentSnapError,
    AmbiguousId,
    AmbiguousName,
    HistoryTooShort,
    InvalidInput,
    InvalidRefName,
    ObjectCorrupt,
    ObjectMissing,
    RefConflict,
    RefExists,
    StoreNotFound,
    TargetNotEmpty,
    TreeBusy,
    UnknownSnapshot,
    UnsafeSnapshot,
    UnsupportedFormat,
)
from agentsnap_core.format import content
from agentsnap_core.format.encoding import pack, pack_value, unpack
from agentsnap_core.format.files import write_replacing
from agentsnap_core.format.objects import Kind, is_oid
from agentsnap_core.layers import journal, world
from agentsnap_core.repository import gitshield, journals, outside, vault, writers
from agentsnap_core.stores import bind_store_url, open_repo_store
from agentsnap_core.stores.base import ANY, RefUpdate, SnapshotRow
from agentsnap_core.stores.local import LocalStore

if TYPE_CHECKING:
    from agentsnap_core.plugins.hookspecs import HookContext

STORE_DIR = ".agentsnap"
MANIFEST_FORMAT = 1
#: a manifest only names layers; anything bigger is refused before it is decoded
MAX_MANIFEST_BYTES = 16 * 1024 * 1024
PRIMARY = "_"
#: ``wt/<id>/path`` in the store: the directory a linked worktree was made in (``fork --worktrees``)
WORKTREE_PATH = "path"
DEFAULT_BRANCH = "main"
_REF_NAME = re.compile(r"^(?!.*\.\.)(?!.*//)(?!/)(?!.*/$)(?!.*\.lock$)[A-Za-z0-9._/\-+@]+$")
Progress = Callable[[str, int, int], None]  # (label, advance, total)


@dataclass
class _Batch:
    """Snapshots taken but not yet committed (see :meth:`Repo.batch`)."""

    rows: list[SnapshotRow] = field(default_factory=list)
    updates: list[tuple[RefUpdate, str]] = field(default_factory=list)
    heads: list[tuple[str, str | None, str | None]] = field(default_factory=list)
    after: list[Callable[[], None]] = field(default_factory=list)
    refs: dict[str, str | None] = field(default_factory=dict)  #: refs as the batch's updates leave them
    head: tuple[str | None, str | None] | None = None  #: this worktree's HEAD as the batch leaves it


@dataclass
class Snapshot:
    id: str
    manifest: dict[str, Any]

    @property
    def parents(self) -> list[str]:
        return list(self.manifest["parents"])

    @property
    def message(self) -> str:
        return str(self.manifest.get("message", ""))

    @property
    def time(self) -> float:
        return float(self.manifest["time"])

    @property
    def layers(self) -> dict[str, Any]:
        return dict(self.manifest.get("layers", {}))

    def summary(self) -> dict[str, Any]:
        m = self.manifest
        return {
            "id": self.id,
            "parents": self.parents,
            "message": self.message,
            "time": self.time,
            "agent": m.get("agent", ""),
            "author": m.get("author", ""),
            "layers": sorted(self.layers),
            "meta": m.get("meta", {}),
        }


def check_ref_name(name: str) -> str:
    if not isinstance(name, str):  # (the pattern below would raise a bare TypeError deep in the caller's call)
        raise InvalidRefName(name, f"a name is a str, not a {type(name).__name__}")
    if not name or not _REF_NAME.match(name) or is_oid(name) or name in ("HEAD",) or name.startswith("-"):
        raise InvalidRefName(name, "use letters, digits and . _ - / (no '..', no leading '-' or '/')")
    if any(len(part.encode()) > MAX_REF_PART for part in name.split("/")):  # a branch is also a worktree directory
        raise InvalidRefName(name[:40] + "...", f"each '/'-separated part may have at most {MAX_REF_PART} characters")
    return name


#: a ref name part becomes a directory name (worktrees, fork suffixes "-N"): keep it well under NAME_MAX (255)
MAX_REF_PART = 200


def check_path(label: str, value: object) -> str:
    """``value`` as a str path, or :class:`InvalidInput` naming ``label`` (a bare ``TypeError`` from ``Path(5)``
    or ``Path(b"dir")`` told a caller of ``Client(5)`` or ``rollback(agent, world=5)`` nothing about which argument)."""
    raw = os.fspath(value) if isinstance(value, os.PathLike) else value
    if not isinstance(raw, str):
        raise InvalidInput(f"{label} must be a path (str or os.PathLike), not {type(value).__name__} {value!r}"[:200])
    if not raw or "\0" in raw:
        raise InvalidInput(f"{label} must be a non-empty path without NUL characters, not {raw!r}"[:200])
    return raw


def _outside_store(root: Path, store_dir: str | os.PathLike[str]) -> Path:
    """The store ``Repo.init(root, store_dir=...)`` makes or links, after refusing what would lose or mix snapshots:
    a store inside the tree (it would go with the tree), a tree with its own store or a link to another, a store
    another tree still links to."""
    store = Path(check_path("store_dir", store_dir)).expanduser().resolve()
    if store == root or root in store.parents:
        raise InvalidInput(f"the store must be outside the tree it keeps: {store} is inside {root} (what deletes the "
                           "tree would delete it); give a directory elsewhere")
    if store in root.parents:
        raise InvalidInput(f"the store {store} would hold the tree {root}; give a directory beside it, not above it")
    marker = root / STORE_DIR
    if marker.is_dir():
        raise InvalidInput(f"{root} has its own store ({marker}); snapshot there, or move it away first")
    if marker.is_file() and not outside.linked_to(root, store):
        raise InvalidInput(f"{marker} links {root} to another store already ({marker.read_text().strip()[:200]})")
    if (store / "format.json").exists():
        local = LocalStore(store)
        try:
            other = local.refs.get_config(outside.PROJECT_KEY)
        finally:
            local.close()
        if outside.other_tree(other, root, store):
            raise InvalidInput(f"{store} is the store of {other} (linked there); give this tree another directory")
    elif store.exists() and any(store.iterdir()):
        raise InvalidInput(f"{store} is not empty and holds no agentsnap store; give a new or empty directory")
    return store


def find_root(start: str | os.PathLike[str] | None = None) -> tuple[Path, Path, str]:
    """Find ``(work root, store dir, worktree id)`` from ``start`` upward, or ``AGENTSNAP_DIR``."""
    if start is not None:
        start = check_path("path", start)
    env = os.environ.get("AGENTSNAP_DIR")
    if env and start is None:
        store = Path(env)
        if (store / "format.json").exists():
            return store.resolve().parent, store.resolve(), PRIMARY
        raise StoreNotFound(env)
    if start is None:
        try:
            start = os.getcwd()
        except FileNotFoundError:  # (a restore, or another process, removed the directory this command runs in)
            raise InvalidInput("the current directory no longer exists (a restore or another process removed it); "
                               "cd into the project (or pass -C DIR) and re-run") from None
    here = Path(start).resolve()
    for d in [here, *here.parents]:
        marker = d / STORE_DIR
        if marker.is_dir():
            return d, marker, PRIMARY
        if marker.is_file():
            try:
                info = json.loads(marker.read_text())
                return d, Path(info["store"]), str(info["worktree"])
            except (ValueError, KeyError, OSError):
                raise AgentSnapError(f"{marker} is not a valid worktree link file") from None
    raise StoreNotFound(str(here))


F = TypeVar("F", bound=Callable[..., Any])


def _lock_wait_from_env() -> float:
    raw = os.environ.get("AGENTSNAP_LOCK_WAIT") or "0"
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0 <= value < float("inf"):
        raise InvalidInput(f"AGENTSNAP_LOCK_WAIT must be a number of seconds (0 or more), not {raw!r}")
    return value


def _writing(method: F) -> F:
    """Run a method that writes objects and then names them in a ref inside a writer session (see writers.py)."""

    @functools.wraps(method)
    def run(self: Repo, *args: Any, **kwargs: Any) -> Any:
        self.check_present()
        with self.writer_sessions.session():
            return method(self, *args, **kwargs)

    return run  # type: ignore[return-value]


#: what a world record says about how it was taken, not about the state a restore gives back: which process took it,
#: how many files it hashed, and that process's environment (shown by diff, never restored: two commands from two
#: shells differ there, PWD, OLDPWD, _ ...)
_HOW_TAKEN = frozenset({"hashed", "process", "env"})


def _same_state(layers: dict[str, Any], other: dict[str, Any]) -> bool:
    """Whether the manifest layers ``layers`` hold exactly the state ``other`` holds: every layer record equal, the
    world's apart from :data:`_HOW_TAKEN`. (The secret files a world left out are compared by name here; their
    content, which the vault keeps per snapshot, by :func:`vault.holds_as_they_are`.)"""
    if layers.keys() != other.keys():
        return False
    for name, rec in layers.items():
        old = other[name]
        if name == "world" and isinstance(rec, dict) and isinstance(old, dict):
            rec = {k: v for k, v in rec.items() if k not in _HOW_TAKEN}
            old = {k: v for k, v in old.items() if k not in _HOW_TAKEN}
        if rec != old:
            return False
    return True


_PARENT_SUFFIXES = re.compile(r"(.+?)((?:[~^]\d*)+)")


class Repo:
    """A working tree plus its store. ``Repo.init(path)`` creates one, ``Repo.open()`` finds one."""

    def __init__(self, root: Path, store_dir: Path, worktree: str = PRIMARY, include_git: bool = False) -> None:
        self.root = Path(root).resolve()
        self.store_dir = Path(store_dir)
        self.worktree = worktree
        self.store = open_repo_store(self.store_dir)  # its own, or the shared store its store.url names
        #: seconds tree_lock waits for another process's snapshot or restore of this tree before TreeBusy
        self.lock_wait = _lock_wait_from_env()
        #: held while this process writes objects a ref will name (gc keeps what was written since; writers.py)
        self.writer_sessions = writers.WriterSessions(self.store_dir)
        self.objects = self.store.objects
        self.refs = self.store.refs
        if self.refs.get_config("crypto.encrypt") or os.environ.get("AGENTSNAP_ENCRYPTION_KEY") or os.environ.get(
            "AGENTSNAP_ENCRYPTION_KEY_FILE"
        ):  # encryption at rest (agentsnap_core.format.crypto): writes sealed, reads opened with a key kept outside the store
            from agentsnap_core.format.crypto import encryption_wrapper

            self.objects = self.store.objects = encryption_wrapper(self.store.objects, self.refs)
        self.include_git = include_git or self.refs.get_config("world.include_git") == "true"
        self.git_shield: dict[str, str] = {}  # what init / open did to keep the store out of git
        #: the link file this open made again (a tree whose store is outside it lost its link with its files)
        self.relinked: str | None = None
        #: ``(id, message)`` of the last snapshots this handle committed, oldest first, and how many it committed in
        #: all (what an interrupted command says it made: a Ctrl-C after the manifest was written still commits the
        #: snapshot); bounded, as a Client may save for days
        self.made: deque[tuple[str, str]] = deque(maxlen=3)
        self.made_count = 0
        self.wt_dir = self.store_dir / "wt" / worktree
        #: the in-place restore this handle is in the middle of (what an interrupted command says it left)
        self.restoring: dict[str, Any] | None = None
        self.progress: Progress | None = None
        self._tree_lock_fd: int | None = None
        self._tree_lock_mutex = threading.RLock()
        #: world trees already loaded and validated by this object (content-addressed, so never stale; a few)
        self._trees: dict[str, list[world.Entry]] = {}
        self._valid: set[str] | None = None
        #: set by restore around its undo snapshot: the default world capture leaves the entries it found here
        self._capture_sink: list[list[world.Entry]] | None = None
        self._batch_tl = threading.local()  # this thread's open batch (see batch())

    @contextmanager
    def tree_lock(self, verb: str) -> Iterator[None]:
        """Hold this worktree's lock (``wt/<worktree>/tree.lock`` in the store) while capturing or rewriting it.

        One process at a time snapshots or restores a working tree: a second one waits up to
        :attr:`lock_wait` seconds (``AGENTSNAP_LOCK_WAIT``; 0 for the Python API, 10 for the CLI) for the first to
        finish, then raises :class:`TreeBusy` instead of recording a tree that never existed on disk.
        Re-entrant within this object (restore takes the undo snapshot under the same lock).
        """
        with self._tree_lock_mutex:
            if self._tree_lock_fd is not None:
                yield
                return
            self.wt_dir.mkdir(parents=True, exist_ok=True)
            path = self.wt_dir / "tree.lock"
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            deadline = time.monotonic() + self.lock_wait
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() < deadline:  # wait for the other snapshot/restore (lock_wait seconds)
                        time.sleep(0.05)
                        continue
                    holder = os.pread(fd, 200, 0).decode("utf-8", "replace").strip()
                    os.close(fd)
                    raise TreeBusy(str(self.root), holder, self.lock_wait) from None
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{verb}, pid {os.getpid()} on {os.uname().nodename}".encode(), 0)
            self._tree_lock_fd = fd
            try:
                yield
            finally:
                self._tree_lock_fd = None
                os.close(fd)  # releases the lock (also when the process dies)

    # ---------------------------------------------------------------- opening
    @classmethod
    def init(
        cls, path: str | os.PathLike[str] = ".", branch: str = DEFAULT_BRANCH, store_url: str | None = None,
        store_dir: str | os.PathLike[str] | None = None,
    ) -> Repo:
        """Create a store for the tree ``path``: ``.agentsnap/`` inside it, or (``store_dir``) a store outside it that
        nothing done in the tree deletes, linked from ``path/.agentsnap`` (:mod:`~agentsnap_core.repository.outside`).
        Running it again on an existing store changes nothing but a missing link."""
        root = Path(check_path("path", path)).resolve()
        root.mkdir(parents=True, exist_ok=True)
        outside_store = None if store_dir is None else _outside_store(root, store_dir)
        store = outside_store or root / STORE_DIR
        if outside_store is None and store.is_file():
            raise AgentSnapError(f"{root} is a linked worktree of another store; not creating a store here")
        fresh = not (store / "format.json").exists()
        local = LocalStore(store, create=True)
        try:
            if store_url:  # objects and refs live in a shared store; this directory keeps worktree state
                bind_store_url(local, store_url)
            if outside_store is not None:
                local.refs.set_config(outside.PROJECT_KEY, str(root))
        except BaseException:
            local.close()
            if fresh:  # nothing half-made is left behind
                import shutil  # (with its compression modules: only here and for worktree copies)

                shutil.rmtree(store, ignore_errors=True)
            raise
        local.close()
        repo = cls(root, store)
        if fresh:
            repo.refs.set_head(PRIMARY, f"refs/heads/{check_ref_name(branch)}", None)
        if outside_store is not None:
            repo.git_shield = outside.link(root, store)  # (the link file out of git add -A)
        else:
            repo.git_shield = gitshield.shield(root, store)  # (out of git add -A and git clean -fdx)
        return repo

    @classmethod
    def open(cls, path: str | os.PathLike[str] | None = None) -> Repo:
        try:
            root, store_dir, wt = find_root(path)
        except StoreNotFound:
            found = None if path is None and os.environ.get("AGENTSNAP_DIR") else \
                outside.recall(Path(path if path is not None else os.getcwd()).resolve())
            if found is None:
                raise
            root, store_dir = found  # a tree whose link went with its files (rm -rf, git clean -fdx): linked again
            repo = cls(root, store_dir, PRIMARY)
            if outside.other_tree(repo.refs.get_config(outside.PROJECT_KEY), root, store_dir):
                repo.close()  # (the project moved away from here since: that store is its, not this directory's)
                raise
            try:
                repo.git_shield = outside.link(root, store_dir)
                repo.relinked = str(root / STORE_DIR)
            except OSError:
                pass  # (a tree that cannot be written now: the registry finds the store again next time)
            return repo
        repo = cls(root, store_dir, wt)
        if wt == PRIMARY and store_dir != root / STORE_DIR:  # a tree linked to a store outside it
            repo._check_project()
        repo.git_shield = gitshield.keep_out(root, store_dir)  # (a store made before git init ran above it)
        return repo

    @classmethod
    def open_at(cls, path: str | os.PathLike[str]) -> Repo | None:
        """The repository whose working tree is ``path`` itself - its own ``.agentsnap/``, a link file, or a store
        outside it found through the registry once its link went with the files (``init --store-dir``) - or None:
        ``path`` has no store of its own (a store further up is another tree's). For adapters that open or create a
        store at a path: without this, a tree whose link was deleted got a new, empty store in silence."""
        root = Path(check_path("path", path)).resolve()
        try:
            repo = cls.open(root)
        except StoreNotFound:
            return None
        if repo.root == root:
            return repo
        repo.close()
        return None

    def _check_project(self) -> None:
        """The tree a store outside it was made for (``store.project``) is this one; or it moved here (the old place
        no longer links to the store): the store follows it. A copy of a linked tree (both link the store as its
        main tree) is refused: the two would share one HEAD and one stat cache."""
        other = self.refs.get_config(outside.PROJECT_KEY)
        if not other or other == str(self.root):
            return
        if outside.other_tree(other, self.root, self.store_dir):
            self.close()
            raise InvalidInput(f"{self.root / STORE_DIR} links to the store of {other}, which still uses it (a copy of "
                               f"that tree?); give this tree its own: remove {self.root / STORE_DIR}, then "
                               "'agentsnap init --store-dir NEW_DIR'")
        self.refs.set_config(outside.PROJECT_KEY, str(self.root))
        outside.link(self.root, self.store_dir)

    def check_present(self) -> None:
        """Raise :class:`~agentsnap_core.errors.StoreGone` when this repo's store was deleted or replaced since it was
        opened (every writing verb checks first: what it wrote would be lost in silence)."""
        check = getattr(self.store, "check_present", None)
        if check is not None:
            check()

    def close(self) -> None:
        self.store.close()

    def __enter__(self) -> Repo:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---------------------------------------------------------------- refs and ids
    def head(self) -> tuple[str | None, str | None]:
        """``(branch ref or None, snapshot id or None)`` of this worktree."""
        symref, oid = self.refs.get_head(self.worktree)
        if symref:
            return symref, self.refs.get_ref(symref)
        return None, oid

    def current_branch(self) -> str | None:
        symref, _ = self.head()
        return symref[len("refs/heads/") :] if symref and symref.startswith("refs/heads/") else None

    def resolve(self, spec: str | None) -> str:
        """Resolve HEAD, NAME~N / NAME^N (chained), a branch, tag, ref or (short) id to a snapshot id (None: HEAD).

        An empty name is refused, never taken for HEAD: it is a script's unset variable (``restore "$SNAP"``), and
        as HEAD it reset the working tree to the last snapshot."""
        if spec is None:
            spec = "HEAD"
        elif spec == "":
            raise InvalidInput("an empty snapshot name: name a snapshot, branch or tag (HEAD for the current one)")
        elif not isinstance(spec, str):  # (the Python API: never an AttributeError from deep inside)
            raise InvalidInput(f"a snapshot is named by a str (id, branch, tag, HEAD~N), not {type(spec).__name__}")
        try:  # (bytes that are not UTF-8 on the command line: a traceback from deep in the ref store before)
            spec.encode("utf-8")
        except UnicodeEncodeError:
            raise UnknownSnapshot(spec) from None
        # git's parent suffixes, chained: NAME~N (N first parents back), NAME^N (the Nth parent: a merge's
        # second is the branch it merged), ^ = ^1, ~ = ~1, ^0 = NAME itself. Names never hold '~' or '^'.
        m = _PARENT_SUFFIXES.fullmatch(spec)
        base, suffix = (m.group(1), m.group(2)) if m else (spec, "")
        oid = self._resolve_one(base, spec)
        taken = base
        for op, digits in re.findall(r"([~^])(\d*)", suffix):
            n = int(digits) if digits else 1
            if op == "~":
                for i in range(n):
                    parents = self.manifest(oid)["parents"]
                    if not parents:  # (said as it is: the name is right, the history is shorter)
                        raise HistoryTooShort(spec, taken, i)
                    oid = parents[0]
            elif n:
                parents = self.manifest(oid)["parents"]
                if len(parents) < n:
                    raise HistoryTooShort(spec, taken, len(parents), nth=n)
                oid = parents[n - 1]
            taken += op + digits
        return oid

    def _resolve_one(self, spec: str, full: str) -> str:
        if spec == "HEAD":
            _, oid = self.head()
            if oid is None:
                raise AgentSnapError("no snapshot yet on this branch; run 'agentsnap snapshot' first")
            return oid
        oid = self.refs.get_ref(spec) if spec.startswith("refs/") else None  # (a full name: never ambiguous)
        if oid:
            return oid
        named = [(ref, oid) for ref in (f"refs/{spec}", f"refs/heads/{spec}", f"refs/tags/{spec}",
                                        f"refs/remotes/{spec}")  # (as git: origin/main; agents/A/S as log shows it)
                 if (oid := self.refs.get_ref(ref))]
        if len({oid for _, oid in named}) > 1:  # a branch and a tag of one name, apart: never one taken in silence
            raise AmbiguousName(spec, named)
        if named:
            return named[0][1]
        low = spec.lower()
        if is_oid(low):
            if self.objects.has(low):
                return low
            self._refuse_buried(low)
            raise UnknownSnapshot(full)
        if re.fullmatch(r"[0-9a-f]{4,63}", low):
            found = self.refs.snapshots_with_prefix(low, limit=6)
            if len(found) == 1:
                return found[0]
            if len(found) > 1:
                raise AmbiguousId(spec, found)
        raise UnknownSnapshot(full)

    def update_refs(self, updates: list[RefUpdate], message: str) -> None:
        self.check_present()  # (branch, tag, delete through a handle whose store is gone: into the deleted index)
        for u in updates:
            if u.new is not None and not self.objects.has(u.new):
                raise AgentSnapError(f"refusing to point {u.name} at missing object {u.new[:12]}")
        self.refs.update_refs(updates, message)

    def branches(self) -> dict[str, str]:
        return {k[len("refs/heads/") :]: v for k, v in self.refs.list_refs("refs/heads/").items()}

    def tags(self) -> dict[str, str]:
        return {k[len("refs/tags/") :]: v for k, v in self.refs.list_refs("refs/tags/").items()}

    def create_branch(self, name: str, at: str | None = None, force: bool = False,
                      notes: list[str] | None = None) -> str:
        """Branch ``name`` at ``at``; ``force`` moves an existing one - never one a worktree has checked out (its
        tree would no longer be its branch's: git refuses it too). A worktree whose directory is gone does not
        block the move; with ``notes`` it is forgotten and that is said there, without them it is left as it is."""
        oid = self.resolve(at)
        ref = f"refs/heads/{check_ref_name(name)}"
        if at is not None:  # (a tag may label a dead snapshot; a branch is a line of work that starts from it)
            _refuse_dead(self, self.get(oid), "branched from")
        if force and self.refs.get_ref(ref) not in (None, oid):
            where = self.checked_out_at(ref, notes)
            if where:
                raise InvalidInput(f"cannot move branch {name!r}: it is checked out {_place(*where[0])} ('agentsnap restore' "
                                   "there moves it with its tree)")
        try:
            self.update_refs([RefUpdate(ref, oid, ANY if force else None)], f"branch: create {name}")
        except RefConflict:
            raise RefExists(ref) from None
        return oid

    def delete_branch(self, name: str, force: bool = False) -> list[str]:
        """Delete branch ``name``; refused while a worktree has it checked out (that worktree's next snapshot would
        start a new history with no parent). Returns notes: worktrees forgotten because their directory is gone
        (as ``git worktree prune``), and, with ``force``, one whose directory was never recorded."""
        ref = f"refs/heads/{name}"
        old = self.refs.get_ref(ref)
        if old is None:
            raise UnknownSnapshot(name)
        if self.head()[0] == ref:
            raise AgentSnapError(f"cannot delete branch {name!r}: it is checked out here")
        notes: list[str] = []
        where = self.checked_out_at(ref, notes)
        unknown = [wt for wt, path in where if path is None]
        if where and not (force and len(unknown) == len(where)):
            hint = (f"; if that directory is gone, 'agentsnap branch -d -f {name}' deletes the branch and forgets the "
                    "worktree" if len(unknown) == len(where) else "; switch that worktree to another branch (or "
                    "delete its directory) first")
            raise InvalidInput(f"cannot delete branch {name!r}: it is checked out {_place(*where[0])}{hint}")
        for wt in unknown:  # (force: the user says its directory is gone)
            self.refs.delete_head(wt)
            notes.append(f"forgot the worktree {wt!r}, which had {name!r} checked out")
        self.update_refs([RefUpdate(ref, None, old)], f"branch: delete {name}")
        if not self._named_elsewhere(old):  # (was silent: the work was left only in the reflog, found by nothing)
            notes.append(f"branch {name!r} was the only name for snapshot {old[:12]} (no other branch, tag or HEAD "
                         f"has it in its history); 'agentsnap branch {name} {old[:12]}' brings it back")
        return notes

    def _named_elsewhere(self, oid: str) -> bool:
        """Whether ``oid`` is in the history of a branch, tag, remote-tracking ref or worktree HEAD (the index's
        parent links: one query, no manifest read)."""
        tips = [o for n, o in self.refs.list_refs().items() if n.startswith(("refs/heads/", "refs/tags/", "refs/remotes/"))]
        tips += [o for _sym, o in self.refs.list_heads().values() if o]
        if oid in tips:
            return True
        parents = {row.id: row.parents for row in self.refs.list_snapshots()}
        seen: set[str] = set()
        stack = list(tips)
        while stack:
            x = stack.pop()
            if x == oid:
                return True
            if x not in seen:
                seen.add(x)
                stack.extend(parents.get(x, ()))
        return False

    def checked_out_at(self, ref: str, notes: list[str] | None = None) -> list[tuple[str, Path | None]]:
        """The other worktrees of this store that have branch ``ref`` checked out: ``(worktree id, directory)``, the
        directory None for one made before worktrees recorded it. A linked worktree whose directory is gone, or no
        longer links to this store, is not listed; with ``notes`` it is also forgotten (its HEAD deleted) and that
        is said there - never without them (a caller that cannot say it leaves the worktree's HEAD alone)."""
        out: list[tuple[str, Path | None]] = []
        for wt, (symref, _oid) in self.refs.list_heads().items():
            if wt == self.worktree or symref != ref:
                continue
            if wt == PRIMARY:
                out.append((wt, self.store_dir.parent))
                continue
            try:
                path = Path((self.store_dir / "wt" / wt / WORKTREE_PATH).read_text().strip())
            except FileNotFoundError:
                out.append((wt, None))
                continue
            try:
                link = json.loads((path / STORE_DIR).read_text())
                here = Path(link["store"]) == self.store_dir and str(link["worktree"]) == wt
            except (OSError, ValueError, KeyError, TypeError):
                here = False
            if here:
                out.append((wt, path))
            elif notes is not None:
                self.refs.delete_head(wt)
                notes.append(f"forgot the worktree {wt!r}: its directory {path} is gone (or no longer links here)")
        return out

    def tag(self, name: str, at: str | None = None) -> str:
        oid = self.resolve(at)
        ref = f"refs/tags/{check_ref_name(name)}"
        try:
            self.update_refs([RefUpdate(ref, oid, None)], f"tag: {name}")
        except RefConflict:
            raise RefExists(ref) from None
        return oid

    def delete_tag(self, name: str) -> str:
        """Delete tag ``name``; returns the snapshot it named (said, so a mistaken delete can be undone by hand)."""
        ref = f"refs/tags/{name}"
        old = self.refs.get_ref(ref)
        if old is None:
            raise UnknownSnapshot(name)
        self.update_refs([RefUpdate(ref, None, old)], f"tag: delete {name}")
        return old

    # ---------------------------------------------------------------- manifests
    def manifest(self, oid: str) -> dict[str, Any]:
        try:
            kind, raw = self.objects.get(oid)
        except ObjectMissing:
            self._refuse_buried(oid)
            raise
        if kind != Kind.MANIFEST:
            raise UnknownSnapshot(oid)
        if len(raw) > MAX_MANIFEST_BYTES:
            raise ObjectCorrupt(oid, f"at most {MAX_MANIFEST_BYTES} bytes", f"{len(raw)} bytes", "oversized manifest")
        doc = unpack(raw, f"manifest {oid[:12]}")
        if not isinstance(doc, dict) or doc.get("format") != "agentsnap-manifest":
            raise ObjectCorrupt(oid, "manifest", "not a snapshot manifest")
        if doc.get("v") != MANIFEST_FORMAT:
            raise UnsupportedFormat(f"snapshot {oid[:12]}", doc.get("v"), MANIFEST_FORMAT)
        parents = doc.get("parents")
        if not isinstance(parents, list) or not all(is_oid(p) for p in parents) or oid in parents:
            raise ObjectCorrupt(oid, "manifest", "bad parents")
        if not isinstance(doc.get("layers"), dict) or not isinstance(doc.get("time"), (int, float)):
            raise ObjectCorrupt(oid, "manifest", "bad layers or time")
        for name, rec in doc["layers"].items():  # records are read by key later: check their shape once, here
            if not isinstance(name, str) or not isinstance(rec, dict):
                raise ObjectCorrupt(oid, "manifest", f"bad record for layer {name!r}")
            if any(k in rec and not is_oid(rec[k]) for k in ("content", "tree", "env")):
                raise ObjectCorrupt(oid, "manifest", f"layer {name!r} names an invalid content id")
            if "refs" in rec and not isinstance(rec["refs"], list):
                raise ObjectCorrupt(oid, "manifest", f"layer {name!r} has bad refs")
        return doc

    def get(self, spec: str | None = None) -> Snapshot:
        oid = self.resolve(spec)
        return Snapshot(oid, self.manifest(oid))

    def read_layer(self, snap: str | Snapshot, layer: str) -> Any:
        """The payload of a generic layer (trace, state, ...), or None when the snapshot has none."""
        s = snap if isinstance(snap, Snapshot) else self.get(snap)
        rec = s.layers.get(layer)
        if rec is None:
            return None
        if "content" not in rec:
            raise ObjectCorrupt(s.id, "manifest", f"layer {layer!r} has no content")
        try:
            return content.get_value(self.objects, rec["content"], f"{layer} layer")
        except ObjectMissing:
            self._refuse_reclaimed(s)
            raise

    def world_entries(self, snap: str | Snapshot) -> list[world.Entry]:
        s = snap if isinstance(snap, Snapshot) else self.get(snap)
        rec = s.layers.get("world")
        if rec and "tree" not in rec:
            raise ObjectCorrupt(s.id, "manifest", "world layer has no tree")
        try:
            return self.load_tree(rec["tree"]) if rec else []
        except ObjectMissing:
            self._refuse_reclaimed(s)
            raise

    def _refuse_reclaimed(self, snap: Snapshot) -> None:
        """A layer object missing from a snapshot that was expired, pruned or deleted was reclaimed on purpose: say
        that (:class:`SnapshotGone`), not "missing from the store; run 'agentsnap verify'" (verify finds nothing)."""
        from agentsnap_core.repository.retention import SnapshotGone, death_of

        reason = death_of(self, snap.id, snap.manifest)
        if reason:
            raise SnapshotGone(snap.id, reason, "read") from None

    def _refuse_buried(self, oid: str) -> None:
        """A snapshot whose manifest is gone because it was expired, pruned or deleted and then nothing kept it (gc
        reclaims a tombstone no ref or live child reaches, its mark stays): say that, not "missing from the store;
        run 'agentsnap verify'" or "unknown snapshot" (an undo id a restore printed, pruned later, meets this)."""
        from agentsnap_core.repository.retention import TOMBSTONES, SnapshotGone, death_of

        if self.refs.get_ref(TOMBSTONES + oid) is not None:
            raise SnapshotGone(oid, death_of(self, oid, {}, marks=(oid,)) or "pruned", "read") from None

    def load_tree(self, tree: str) -> list[world.Entry]:
        """A world tree's entries, read and validated once per tree by this object (a restore reads its target
        tree three times: to check it, in the restore hook and to compare; status, diff and log read HEAD's)."""
        entries = self._trees.get(tree)
        if entries is None:
            known = tree in self._valid_trees()
            entries = world.load_tree(self.objects, tree, validated=known)
            if not known:
                self._remember_valid_tree(tree)
            if len(self._trees) >= _TREES_KEPT:
                self._trees.pop(next(iter(self._trees)))
            self._trees[tree] = entries
        return list(entries)

    # ---------------------------------------------------------------- trace (pending)
    @property
    def _trace_path(self) -> Path:
        return self.wt_dir / "trace.msgpack"

    def append_message(self, role: str, content_: Any = "", **fields: Any) -> dict[str, Any]:
        """Append a message to the working trace; it is captured by the next snapshot."""
        if not isinstance(role, str) or not role:
            raise InvalidInput("a trace message needs a non-empty role")
        msg = {"id": fields.pop("id", None) or os.urandom(16).hex(), "role": role, "content": content_, **fields}
        data = pack_value(msg)  # (a message keeps its fields' order, as the trace layer does)
        self.wt_dir.mkdir(parents=True, exist_ok=True)
        with open(self._trace_path, "ab") as f:
            f.write(data)
        return msg

    def messages(self) -> list[dict[str, Any]]:
        try:
            data = self._trace_path.read_bytes()
        except FileNotFoundError:
            return []
        unpacker = msgpack.Unpacker(raw=False, strict_map_key=False)
        unpacker.feed(data)
        return [m for m in unpacker if isinstance(m, dict)]

    def set_messages(self, messages: list[dict[str, Any]]) -> None:
        self.wt_dir.mkdir(parents=True, exist_ok=True)
        tmp = self._trace_path.with_suffix(".tmp")
        tmp.write_bytes(b"".join(pack_value(m) for m in messages))
        os.replace(tmp, self._trace_path)

    # ---------------------------------------------------------------- world
    def _ignore(self, include_secrets: bool | None = None, root: Path | None = None) -> world.Ignore:
        """The rules of what a capture of ``root`` (default: this tree) leaves out: the defaults, ``root``'s own
        ``.agentsnapignore`` and the store's ``world.ignore`` lines. An adapter capturing another directory (LangGraph's
        ``world_root``) gets that directory's ignore file, never this tree's."""
        if include_secrets is None:  # credential files stay out of snapshots unless the store opts in
            include_secrets = self.refs.get_config("world.include_secrets") == "true"
        # store config world.ignore: gitignore lines kept outside the tree (e.g. the Claude Code plugin's bulky build folders)
        extra = [line for line in (self.refs.get_config("world.ignore") or "").splitlines() if line.strip()]
        return world.Ignore(root or self.root, include_git=self.include_git, extra=extra or None,
                            include_secrets=include_secrets)

    def left_out(self, path: str | os.PathLike[str]) -> str | None:
        """Why a snapshot of this tree would not hold ``path`` (None: it would): a tool that promises an undo of a
        change to ``path`` asks first (the Claude Code plugin before an ``Edit``). ``path`` is relative to the tree
        (or absolute); it need not exist. The reason names the rule: outside the tree, the store, ``.git`` (not
        captured unless ``world.include_git``), a credential file (unless ``world.include_secrets``, or the local vault
        keeps it: a restore brings those back), or the ignore rules (``.agentsnapignore``, the store's
        ``world.ignore``), for the path or a directory above it."""
        rel = self._tree_path(path)
        if rel is None:
            return f"outside the tree {self.root}"
        return self._left_out(self._ignore(), rel, (self.root / rel).is_dir(), self._vault_keeps()) if rel else None

    def left_out_within(self, path: str | os.PathLike[str], limit: int = 1000) -> list[tuple[str, str]]:
        """What under the directory ``path`` a snapshot of this tree would not hold, as ``(path in the tree,
        reason)``: each left-out directory once (not its contents), each left-out file; at most ``limit`` entries.
        A command that deletes ``path`` takes these with it, and no snapshot brings them back. The store itself
        (and a worktree's link file) is not listed."""
        rel = self._tree_path(path)
        if rel is None:
            return [(str(path), f"outside the tree {self.root}")]
        ignore, keeps = self._ignore(), self._vault_keeps()
        top = self._left_out(ignore, rel, True, keeps) if rel else None
        if top is not None:
            return [(rel, top)]
        out: list[tuple[str, str]] = []
        todo = [rel]
        while todo and len(out) < limit:
            folder = todo.pop()
            try:
                with os.scandir(self.root / folder if folder else self.root) as it:
                    entries = sorted(it, key=lambda e: e.name)
            except OSError:
                continue
            for entry in entries:
                sub = f"{folder}/{entry.name}" if folder else entry.name
                is_dir = entry.is_dir(follow_symlinks=False)
                if sub in ignore.always or sub.endswith("/.agentsnap"):
                    continue
                why = self._left_out(ignore, sub, is_dir, keeps, parents=False)
                if why is not None:
                    out.append((sub, why))
                elif is_dir:
                    todo.append(sub)
        return out[:limit]

    def _tree_path(self, path: str | os.PathLike[str]) -> str | None:
        """``path`` (absolute, or relative to the tree) as a path in the tree ('' for the root; None: outside)."""
        given = Path(path)
        full = given if given.is_absolute() else self.root / given
        here = (Path(os.path.realpath(full)) if full.name in ("", ".", "..")
                else Path(os.path.realpath(full.parent)) / full.name)  # (a link named last is captured as a link)
        try:
            rel = here.relative_to(os.path.realpath(self.root)).as_posix()
        except ValueError:
            return None
        return "" if rel == "." else rel

    def _vault_keeps(self) -> Callable[[str], str | None]:
        """For a credential file the snapshot leaves out: None when the local vault keeps it (a restore brings it
        back), else why not."""
        if not vault.enabled(self):
            return lambda rel: "the local vault is off or needs the cryptography package"

        def keeps(rel: str) -> str | None:
            try:
                big = os.lstat(self.root / rel).st_size > vault.MAX_FILE
            except OSError:
                big = False  # (not there yet: kept when it is made)
            return f"larger than the {vault.MAX_FILE >> 20} MiB the local vault keeps" if big else None

        return keeps

    @staticmethod
    def _left_out(ignore: world.Ignore, rel: str, is_dir: bool, keeps: Callable[[str], str | None],
                  parents: bool = True) -> str | None:
        parts = rel.split("/")
        for i in range(1 if parents else len(parts), len(parts) + 1):
            sub, sub_dir = "/".join(parts[:i]), i < len(parts) or is_dir
            if not ignore.ignored(sub, sub_dir):
                continue
            where = "" if sub == rel else f" (in {sub}/)"
            if sub in ignore.always or sub.endswith("/.agentsnap"):
                return f"inside a store{where}"
            if sub in ignore.git_dirs:
                return f"a .git directory, not captured unless world.include_git is true{where}"
            if sub in ignore.left_out:
                why_not = keeps(sub)
                if why_not is None:
                    return None  # out of the snapshot, in the local vault: a restore brings it back
                return f"a credential file, not captured unless world.include_secrets is true, and {why_not}{where}"
            return f"ignored by .agentsnapignore or the store's world.ignore setting{where}"
        return None

    def _capture_world_default(self, root: str, context: HookContext) -> dict[str, Any]:
        cache_path = self.wt_dir / "statcache.msgpack"
        own = Path(root) == self.root
        ignore = self._ignore(context.get("include_secrets"), Path(root))
        watch = journal.lookup(str(self.root)) if own else None  # (in the resident process's children)
        tip = world.unchanged_tip(cache_path, watch, ignore) if self._capture_sink is None else None
        if tip is not None and self.objects.has(tip["tree"]):  # nothing changed since the last capture from here
            tree, left_out, special, git_dirs = tip["tree"], tip["x"], tip["s"], tip["g"]
            files, nbytes, hashed, escapes = tip["files"], tip["bytes"], 0, tip["esc"]
            git_code = False  # (the tree last stored from here: remembered then if it had to be)
            context["statcache"] = None
        else:
            cache = world.StatCache.load(cache_path) if own else None
            entries, new_cache, stats = world.capture(Path(root), self.objects, ignore, cache, self._advance,
                                                      watch if own else None)
            tree = world.put_tree(self.objects, entries, new_cache if own else None)
            left_out, special, git_dirs = sorted(ignore.left_out), sorted(stats.special), sorted(ignore.git_dirs)
            files, nbytes, hashed = stats.files, stats.bytes_total, stats.files_hashed
            escapes = bool(stats.links) and any(kind == "l" and world.symlink_escapes(path, ref)
                                                for path, kind, _m, _s, ref in entries)
            git_code = self.include_git and any(world.runs_git_code(e[0]) for e in entries if e[1] != "d")
            if own and watch is not None:
                new_cache.tip = world.make_tip(new_cache, stats, left_out, escapes, git_dirs)
            context["statcache"] = (cache_path, new_cache) if own else None
            if self._capture_sink is not None and own:
                self._capture_sink.append(entries)
        if escapes or git_code:  # (what only comes back from a tree captured here: links out, git's config and hooks)
            self.remember_own(tree)
        from agentsnap_core.layers.environment import capture_env  # its secret patterns compile only for a snapshot

        env = content.put_value(self.objects, capture_env(redact=context.get("redact", True)))
        rec = {
            "tree": tree,
            "env": env,
            "files": files,
            "bytes": nbytes,
            "hashed": hashed,
            "process": {"cwd": root, "host": os.uname().nodename, "pid": os.getpid()},
        }
        if left_out:  # named, never silent: snapshot, show and status report them
            rec["left_out"] = [world.name_out(n) for n in left_out]  # any bytes, as tree names
        if special:  # FIFOs, sockets, devices: no snapshot can hold them; named, as left_out
            rec["not_captured"] = [world.name_out(n) for n in special]
        if git_dirs:  # git's own history (branches, stashes, its index) is not in the snapshot: named, never silent
            rec["git_not_captured"] = [world.name_out(n) for n in git_dirs]
        if self.include_git and own:  # its .git directories are in the tree: a restore of it puts them back too
            rec["include_git"] = True
        return rec

    def _valid_trees(self) -> set[str]:
        """Trees this store found valid (:func:`world.validate_entries`) under today's rules; kept local.

        A tree's id is the hash of its bytes and every read re-hashes them, so a tree found valid once is valid
        whenever it is read again: restore and status of a 50k-file tree skip the per-entry checks (~0.1 s)."""
        if self._valid is None:
            self._valid = set()
            try:
                lines = (self.store_dir / VALID_TREES).read_text().split("\n")
            except (FileNotFoundError, UnicodeDecodeError):
                return self._valid
            if lines[0] == f"rules {world.VALIDATION_RULES}":  # else: validated under other rules, read again
                self._valid.update(t for t in lines[1:] if is_oid(t))
        return self._valid

    def _remember_valid_tree(self, tree: str) -> None:
        valid = self._valid_trees()
        valid.add(tree)
        path = self.store_dir / VALID_TREES
        try:
            if len(valid) > _VALID_KEPT or not path.exists():  # start again with the latest (temp file + rename)
                keep = [tree] if len(valid) > _VALID_KEPT else sorted(valid)
                valid.intersection_update(keep)
                text = "".join(f"{line}\n" for line in [f"rules {world.VALIDATION_RULES}", *keep])
                write_replacing(path, text.encode())
                return
            fd = os.open(path, os.O_WRONLY | os.O_APPEND)
            try:
                os.write(fd, f"{tree}\n".encode())  # one short append: whole or not at all, beside other writers
            finally:
                os.close(fd)
        except OSError:
            pass  # (a read-only store: validated again next time)

    def remember_own(self, oid: str) -> None:
        """Note that this store made ``oid`` here (kept local: never pushed): a world tree captured from one of its
        own working trees, or a token for a setting an adapter's capture used (:mod:`agentsnap_core.layers.reach`:
        a model endpoint, an MCP server). Only what may need it is noted (a tree with links pointing outside or
        git's config and hooks; settings that reach outside the process)."""
        own = self.own_trees()
        if oid in own:
            return
        line = f"{oid}\n".encode()
        path = self.store_dir / OWN_TREES
        with self._own_list_lock():  # (gc rewrites the list without the trees it reclaimed: not while this appends)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            try:
                os.write(fd, line)
                st = os.fstat(fd)
            finally:
                os.close(fd)
        cached = self.__dict__.get("_own_cache")
        if cached is not None and cached[0][0] + len(line) == st.st_size:  # (no other writer in between: kept
            own.add(oid)  # up to date here, so a loop of captures does not read the list again each time)
            self._own_cache = ((st.st_size, st.st_mtime_ns, st.st_ino), own)

    @contextmanager
    def _own_list_lock(self) -> Iterator[None]:
        fd = os.open(self.store_dir / f"{OWN_TREES}.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def forget_own_gone(self) -> int:
        """Drop from the own list the world trees this store no longer holds (gc reclaimed them: nothing can restore
        them, so nothing needs to know they were its own); tokens (``kind:digest``) stay. The list grew by a line per
        tree captured with a link pointing outside or git's config, every snapshot of such a tree, for good. Returns
        how many lines went."""
        path = self.store_dir / OWN_TREES
        with self._own_list_lock():
            try:
                lines = path.read_text().split()
            except FileNotFoundError:
                return 0
            kept = [x for x in dict.fromkeys(lines) if not is_oid(x) or self.objects.has(x)]
            if len(kept) == len(lines):
                return 0
            write_replacing(path, "".join(f"{x}\n" for x in kept).encode(), 0o644)
        return len(lines) - len(kept)

    def own_trees(self) -> set[str]:
        """Object ids this store made itself, of those holding what only comes back from one's own history: links
        pointing outside, git's config and hooks, an adapter's settings (see :meth:`captured_here`). Read once per
        change of the list (a process's many questions read it once); do not modify the set returned."""
        path = self.store_dir / OWN_TREES
        try:
            st = os.stat(path)
        except FileNotFoundError:
            return set()
        key = (st.st_size, st.st_mtime_ns, st.st_ino)
        cached = self.__dict__.get("_own_cache")
        if cached is None or cached[0] != key:
            cached = (key, set(path.read_text().split()))
            self._own_cache = cached
        return cached[1]

    def captured_here(self, oid: str) -> bool:
        """Whether ``oid`` (a world tree, a :mod:`~agentsnap_core.layers.reach` token) is your own history: made by
        this store here. Only such a tree may restore, without being asked, what a pulled, cloned or crafted snapshot must not: links
        pointing outside the tree (the in-tree ``.venv`` whose ``bin/python`` points at ``/usr/bin/python3``;
        otherwise refused unless ``--allow-external-symlinks``) and git's config and hooks
        (:func:`world.runs_git_code`: a ``.git/config`` whose ``core.fsmonitor`` runs a command at your next ``git
        status``; otherwise left as they are unless ``--trust-git``, as git's own clone never copies them); adapters
        ask it of the settings they rebuild (:mod:`agentsnap_core.layers.reach`). The list lives in the store
        directory and is never pushed or pulled, so a snapshot cannot claim to be one.
        """
        return oid in self.own_trees()

    def guard_git_code(self, tree: Any, target: list[world.Entry], current: list[world.Entry], trust: bool = False
                       ) -> tuple[list[world.Entry], list[world.Entry], list[str]]:
        """``(target, current, held)`` for a restore of ``tree``: without git's config and hooks that differ from
        what is there now, unless ``tree`` may write them (:meth:`captured_here`) or ``trust``; ``held`` names
        them (said, never silent)."""
        if trust or (isinstance(tree, str) and self.captured_here(tree)) or self.refs.get_config("world.trust_git") == "true":
            return target, current, []
        return world.without_git_code(target, current)

    def _restore_world_default(self, root: str, rec: dict[str, Any], context: HookContext) -> dict[str, Any]:
        target = self.load_tree(rec["tree"])
        current = context.get("current")
        if current is None:
            current, _, _ = world.capture(Path(root), None, self._ignore(root=Path(root)))
        if self.include_git and not rec.get("include_git"):  # taken without .git: what git keeps is not the
            # snapshot's to remove (one that holds a .git, taken before the record said so, still restores it; with
            # include_git off the working tree's capture holds no .git to begin with)
            current = world.without_git_dirs(current, target)
        target, current, held = self.guard_git_code(rec["tree"], target, current, bool(context.get("trust_git")))
        paths = context.get("paths")
        context["git_held_back"] = [h for h in held if paths is None or _under(h, paths)]
        changes = world.materialize(
            self.objects,
            Path(root),
            target,
            current,
            allow_external_symlinks=context.get("allow_external_symlinks", False) or self.captured_here(rec["tree"]),
            paths=context.get("paths"),
            progress=self._advance,
            validated=True,  # load_tree validated it
        )
        return changes.as_dict()

    def _advance(self, n: int) -> None:
        if self.progress:
            self.progress("bytes", n, 0)

    @property
    def restore_state_path(self) -> Path:
        """Where an in-place restore notes what it is doing before it writes the first file, removed once the tree is
        the snapshot's: a restore cut short (Ctrl-C, SIGTERM, SIGKILL, a crash, a full disk it could not roll back
        from) leaves a tree part old and part new, and the note says so in :meth:`status` and how to finish or go
        back."""
        return self.wt_dir / "restoring.json"

    def restore_interrupted(self) -> dict[str, Any] | None:
        """``{"target", "undo", "paths"}`` of a restore of this working tree that did not finish (None: none); a merge
        cut short while it wrote the merged tree has ``"merge"`` (what was merged) and no target when the merged tree
        was not a snapshot yet."""
        try:
            data = json.loads(self.restore_state_path.read_bytes())
        except (OSError, ValueError):
            return None
        if not isinstance(data, dict) or not (is_oid(data.get("undo")) or data.get("undo") is None and is_oid(data.get("target"))):
            return None  # (no undo: a checkout into a branch with no snapshot yet, a clone's)
        merge = data.get("merge")
        if not (is_oid(data.get("target")) or data.get("target") is None and isinstance(merge, str)):
            return None
        paths = data.get("paths")
        ok = paths is None or isinstance(paths, list) and all(isinstance(x, str) for x in paths)
        return {"target": data["target"], "undo": data["undo"], "paths": paths if ok else None,
                **({"merge": merge} if isinstance(merge, str) else {})}

    @contextmanager
    def noting_restore(self, target: str | None, undo: str | None, paths: list[str] | None, merge: str | None = None
                        ) -> Iterator[dict[str, Any]]:
        """The note of :attr:`restore_state_path` around an in-place restore: written before the first write, removed
        when the block ends normally (the tree is the target's) or after it set ``whole`` (nothing was touched, or the
        tree was rolled back); any other exception, KeyboardInterrupt included, leaves it. A path restore begun while
        the note of an earlier, whole restore stands leaves that one (the rest of the tree is still part old)."""
        earlier = self.restore_interrupted()
        keep = earlier is not None and paths is not None and earlier["paths"] != paths
        note = {"target": target, "undo": undo, "paths": paths, **({"merge": merge} if merge is not None else {})}
        if not keep:
            self.wt_dir.mkdir(parents=True, exist_ok=True)
            write_replacing(self.restore_state_path, json.dumps(note).encode())
        self.restoring = note
        state: dict[str, Any] = {"whole": False}
        try:
            yield state
            state["whole"] = True
        finally:
            if state["whole"]:
                self.restoring = None
                if not keep:
                    try:
                        os.unlink(self.restore_state_path)
                    except FileNotFoundError:
                        pass
                    if earlier is not None and paths is None:  # (the tree is whole again: what the one cut short
                        state["swept"] = self._sweep_dead_temps()  # by SIGKILL was half-way through writing goes too)

    def _sweep_dead_temps(self) -> list[str]:
        """Remove the temp files (``.agentsnap-tmp-PID-NAME``) restores whose process is gone left in the tree: a
        SIGKILL or a crash mid-file leaves one, which agentsnap itself never captures but git and the user see.
        Walked only after a restore that finished one cut short. Returns their paths."""
        removed: list[str] = []
        for d, dirs, files in os.walk(self.root):
            dirs[:] = [x for x in dirs if x not in (STORE_DIR, ".git") and not os.path.islink(os.path.join(d, x))]
            for name in files:
                if name.startswith(world.TEMP_PREFIX) and not _pid_alive(_temp_pid(name)):
                    try:
                        os.unlink(os.path.join(d, name))
                        removed.append(os.path.relpath(os.path.join(d, name), self.root))
                    except OSError:
                        pass
        return removed

    @property
    def merge_state_path(self) -> Path:
        """Where a merge stopped on conflicts keeps its state (operations/merge.py) until --continue or --abort."""
        return self.wt_dir / "merge.msgpack"

    def working_entries(self) -> list[world.Entry]:
        return self._working()[0]

    def _working(self) -> tuple[list[world.Entry], list[str]]:
        """The working tree's entries and the files the secrets policy leaves out of it."""
        entries, left_out, _, _, _ = self._working_with_cache()
        return entries, left_out

    def _working_with_cache(
        self, ignore: world.Ignore | None = None, watch: Any = None
    ) -> tuple[list[world.Entry], list[str], world.StatCache, list[str], list[str]]:
        """The working tree's entries, the files the secrets policy leaves out, the stat cache they were read with,
        the special files (FIFOs, sockets, devices) that no snapshot captures and the ``.git`` directories left out
        (``ignore`` and ``watch``: the caller's, when it has them already)."""
        path = self.wt_dir / "statcache.msgpack"
        cache = world.StatCache.load(path)
        ignore = ignore or self._ignore()
        watch = watch or journal.lookup(str(self.root))
        entries, new, stats = world.capture(self.root, None, ignore, cache, watch=watch)
        if watch is not None and stats.files_hashed == 0 and new.listing is not None and new.dirty:
            # (in the resident process) nothing was hashed, so every entry is the cache's own (its content stored by
            # the snapshot that wrote it): keep the journal's listing, so the next command reads only what changes
            # from here, as `git status` refreshes its index; a tree with changes keeps the cache it had
            try:
                new.save(path)
            except OSError:
                pass
        return entries, sorted(ignore.left_out), cache, sorted(stats.special), sorted(ignore.git_dirs)

    # ---------------------------------------------------------------- snapshot
    @contextmanager
    def batch(self) -> Iterator[None]:
        """Commit every snapshot taken in this block (this thread) together: one pack, one barrier, one transaction.

        ``with repo.batch(): repo.snapshot(...); repo.snapshot(...)``. New small objects of all the snapshots go
        into ONE pack file; at the end of the block one durability barrier (the pack, the large loose objects and
        their directories fsynced) is followed by ONE SQLite transaction holding every index row, ref update and
        HEAD move, so refs never name an object that is not durable. Inside the block a snapshot's parent and the
        ref it expects are the ones the earlier snapshots of the block left. If any ref moved under the block
        (another writer), no ref update of the block is applied and :class:`RefConflict` is raised at its end
        (the snapshots themselves are kept and indexed). If the block raises, the snapshots it finished are
        still committed. Every :meth:`snapshot` outside a block is a batch of one. Nested blocks join the outer
        one.
        """
        if getattr(self._batch_tl, "batch", None) is not None:
            yield
            return
        b = _Batch()
        objects_batch = getattr(self.objects, "batch", None)  # stores without packs write objects one by one
        with self.writer_sessions.session(), (objects_batch() if objects_batch is not None else nullcontext()):
            self._batch_tl.batch = b
            try:
                yield
            except BaseException:
                self._batch_tl.batch = None
                if b.rows:
                    self._commit_batch(b)
                raise
            self._batch_tl.batch = None
            self._commit_batch(b)

    def _commit_batch(self, b: _Batch) -> None:
        self.objects.barrier()  # objects durable before any ref names them
        for save in b.after:  # stat caches name objects: saved once those are durable
            save()
        if getattr(type(self.refs), "commit_snapshots", None) is not None:  # one transaction
            self.refs.commit_snapshots(b.rows, b.updates, b.heads)
        else:
            many = getattr(self.refs, "index_snapshots", None)
            if many is not None:
                many(b.rows)
            else:
                for row in b.rows:
                    self.refs.index_snapshot(row)
            for u, msg in b.updates:
                self.refs.update_refs([u], msg)
            for wt, symref, oid in b.heads:
                self.refs.set_head(wt, symref, oid)
        self.made.extend((row.id, row.message) for row in b.rows)
        self.made_count += len(b.rows)

    @_writing
    def snapshot(
        self,
        message: str = "",
        *,
        agent: str = "",
        layers: dict[str, Any] | None = None,
        trace: list[dict[str, Any]] | None = None,
        capture_world: bool = True,
        parents: list[str] | None = None,
        ref: str | None = None,
        move_head: bool = True,
        meta: dict[str, Any] | None = None,
        redact_env: bool = True,
        include_secrets: bool | None = None,
        same_as: Snapshot | None = None,
    ) -> Snapshot:
        """Capture the working directory, the trace and any extra layers; return the snapshot.

        ``layers`` maps a layer name (state, effects, cache, model, ...) to plain data.
        The branch HEAD points at moves by compare-and-swap: a concurrent writer that moved it
        first makes this call raise :class:`RefConflict` (the snapshot itself is kept).
        ``same_as`` (restore's undo snapshot): when what was captured is exactly that snapshot's state
        (:func:`_same_state`), no snapshot is made: the ref moves to it and it is returned.
        """
        for label, text in (("message", message), ("agent", agent)):  # (5 or None was kept and logged as "5", "None")
            if not isinstance(text, str):
                raise InvalidInput(f"snapshot {label} must be a str, not {type(text).__name__} {text!r}"[:200])
        if ref is not None and not isinstance(ref, str):
            raise InvalidInput(f"snapshot ref must be a str, not {type(ref).__name__} {ref!r}"[:200])
        for kind in ("refs/heads/", "refs/tags/"):  # a branch every other verb would refuse is never made
            if ref is not None and ref.startswith(kind):
                check_ref_name(ref[len(kind):])
        with self.tree_lock("snapshot") if capture_world else nullcontext(), self.batch():  # one tree writer
            b: _Batch = self._batch_tl.batch
            symref, head_oid = b.head if b.head is not None else self.refs.get_head(self.worktree)
            if symref:
                head_oid = b.refs[symref] if symref in b.refs else self.refs.get_ref(symref)
            target_ref = ref or symref
            if target_ref:
                expected = b.refs[target_ref] if target_ref in b.refs else self.refs.get_ref(target_ref)
            else:
                expected = head_oid
            context = plugins.hook_context(self, redact=redact_env, include_secrets=include_secrets)
            manifest_layers: dict[str, Any] = {}
            if capture_world:
                rec = context["pm"].hook.agentsnap_capture_world(root=str(self.root), context=context)
                if rec is not None:
                    manifest_layers["world"] = rec
            msgs = self.messages() if trace is None else trace
            manifest_layers["trace"] = {"content": content.put_value(self.objects, msgs, "trace layer"), "count": len(msgs)}
            for name, value in (layers or {}).items():
                if name in ("world", "trace") and not isinstance(value, dict):
                    raise InvalidInput(f"layer {name!r} is reserved")
                if name == "trace":
                    manifest_layers["trace"] = {"content": content.put_value(self.objects, value, "trace layer"), "count": len(value)}
                    continue
                manifest_layers[name] = {"content": content.put_value(self.objects, value, f"{name} layer")}
                if isinstance(value, dict) and isinstance(value.get("refs"), list):  # e.g. KV pages (kvcache.py)
                    manifest_layers[name]["refs"] = [r for r in value["refs"] if is_oid(r)]
            if parents is None:
                parents = [expected] if expected else []
            from agentsnap_core.layers.effects_ledger import bind_snapshot  # the ledger count + head this snapshot saw

            bind_snapshot(self, manifest_layers, target_ref, parents, meta)
            if same_as is not None and _same_state(manifest_layers, same_as.layers) and vault.holds_as_they_are(
                    self, same_as.id, manifest_layers.get("world"), self.root) and not _dead(self, same_as):
                if target_ref and (move_head or ref):
                    b.updates.append((RefUpdate(target_ref, same_as.id, expected), f"snapshot: {message}"[:200]))
                    b.refs[target_ref] = same_as.id
                _save_statcache_after(b, context)
                return same_as
            manifest: dict[str, Any] = {
                "format": "agentsnap-manifest",
                "v": MANIFEST_FORMAT,
                "parents": parents,
                "time": time.time(),
                "author": _whoami(),
                "agent": agent,
                "message": message,
                "layers": manifest_layers,
                "meta": meta or {},
            }
            if self.refs.get_config("crypto.signing_key"):  # signed snapshots (agentsnap_core.format.crypto)
                from agentsnap_core.format.crypto import maybe_sign

                manifest = maybe_sign(self, manifest)
            oid = self.objects.put(Kind.MANIFEST, pack(manifest))
            # committed by the batch: barrier, then the index row and the ref move in one transaction
            b.rows.append(SnapshotRow(oid, tuple(parents), float(manifest["time"]), message, agent))
            if target_ref:
                if move_head or ref:
                    b.updates.append((RefUpdate(target_ref, oid, expected), f"snapshot: {message}"[:200]))
                    b.refs[target_ref] = oid
            elif move_head:
                b.heads.append((self.worktree, None, oid))
                b.head = (None, oid)
            _save_statcache_after(b, context)
            if capture_world:  # the files left out as secrets: kept encrypted in this store only, never pushed
                vault.keep(self, oid, manifest_layers.get("world"), self.root, parents)
            return Snapshot(oid, manifest)

    # ---------------------------------------------------------------- restore
    def restore(
        self,
        spec: str,
        *,
        to: str | os.PathLike[str] | None = None,
        dry_run: bool = False,
        paths: list[str] | None = None,
        allow_external_symlinks: bool = False,
        trust_git: bool = False,
    ) -> dict[str, Any]:
        """Make the working tree (or ``to``) equal snapshot ``spec``.

        In place, the pre-restore state is snapshotted first (``refs/undo/restore``) so the
        restore can be undone (when that state is exactly the last snapshot's, ``refs/undo/restore`` names the
        last snapshot instead of a copy of it), files created after the snapshot are removed, the trace is
        reset, and the current branch moves to ``spec`` (like ``git reset --hard``). Git's config and hooks are
        written only from a tree this store captured (:meth:`captured_here`) or with ``trust_git``; otherwise the
        answer's ``git_held_back`` names those left as they were.
        """
        snap = self.get(spec)
        _refuse_dead(self, snap)
        rec = snap.layers.get("world")
        if rec is None:
            raise AgentSnapError(f"snapshot {snap.id[:12]} has no world layer to restore")
        target_entries = self.load_tree(rec["tree"])  # validates before any write (once: the hook reuses it)
        allow_external_symlinks = allow_external_symlinks or self.captured_here(rec["tree"])
        norm_paths = [self.tree_path(p) for p in paths] if paths else None
        if norm_paths and "" in norm_paths:  # `-- .` at the top (git's `checkout REV -- .`): every path, each file
            # put back as the snapshot has it and the branch left where it is (a path restore, not a reset)
            norm_paths = sorted({e[0].split("/", 1)[0] for e in target_entries}
                                | ({e[0].split("/", 1)[0] for e in self.working_entries()} if to is None else set()))
            if not norm_paths:
                raise InvalidInput(f"snapshot {snap.id[:12]} and the working tree are both empty: nothing to restore")
        if norm_paths:  # a path that names nothing is a typo, never a restore that did nothing and said "restored"
            kept = [world.name_in(n) for n in rec.get("left_out") or []]  # (secret files the vault may bring back)
            _check_paths_match(norm_paths, target_entries, snap.id, self.root if to is None else None, kept)
        context = plugins.hook_context(self, allow_external_symlinks=allow_external_symlinks, paths=norm_paths,
                                       trust_git=trust_git)
        if to is not None:
            dest = Path(to).resolve()
            self._refuse_inside_store(dest, "restore --to")
            inside = self.inside_tree_line(dest, "restore --to", snap.id[:12])  # (as fork --worktrees and push)
            if inside is not None:
                raise InvalidInput(inside)
            if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
                raise TargetNotEmpty(str(to))
            if dry_run:
                return {"id": snap.id, "to": str(dest), "dry_run": True, "changes": {"added": [e[0] for e in target_entries if e[1] != "d"]}}
            made = not dest.exists()
            secrets, note = vault.open_for_restore(self, snap.id, rec, dest, norm_paths, in_place=False)
            written, _, held = self.guard_git_code(rec["tree"], target_entries, [], trust_git)
            held = [h for h in held if norm_paths is None or _under(h, norm_paths)]
            try:
                world.materialize(self.objects, _mkdir(dest), written, [], allow_external_symlinks, norm_paths,
                                  self._advance, validated=True)
                skipped = vault.write_back(dest, secrets)
            except BaseException:  # a refused restore (corrupt or missing object) leaves the target as it was
                _empty_dir(dest, remove=made)
                raise
            return {"id": snap.id, "to": str(dest), "files": sum(1 for e in written if e[1] == "f"),
                    **_git_not_restored(rec, dest, norm_paths), **vault.report(secrets, note, skipped),
                    **({"git_held_back": held} if held else {})}
        with self.tree_lock("restore") if not dry_run else nullcontext():  # nothing captures a half-restored tree
            if dry_run:
                current = self.working_entries()
                if self.include_git and not rec.get("include_git"):
                    current = world.without_git_dirs(current, target_entries)
                subset = target_entries if norm_paths is None else [e for e in target_entries if _under(e[0], norm_paths)]
                cur = current if norm_paths is None else [e for e in current if _under(e[0], norm_paths)]
                return {"id": snap.id, "dry_run": True, "changes": world.compare(cur, subset).as_dict()}
            if not allow_external_symlinks:
                for path, kind, _, _, ref in target_entries:
                    if kind == "l" and world.symlink_escapes(path, ref):
                        raise UnsafeSnapshot(path, f"symlink points outside the restore root ({ref!r})")
            # secret files kept in the vault: decrypted and verified before the first file is touched
            secrets, note = vault.open_for_restore(self, snap.id, rec, self.root, norm_paths, in_place=True)
            sink: list[list[world.Entry]] = []
            self._capture_sink = sink
            head = self.head()[1]
            try:  # (a tree, trace and every other layer exactly as the last snapshot has them: that one is the undo)
                undo = self.snapshot(
                    f"pre-restore: state before restoring {snap.id[:12]}",
                    ref="refs/undo/restore",
                    parents=[head] if head else [],
                    meta={"undo_of": snap.id},
                    same_as=self.get(head) if head else None,
                )
            finally:
                self._capture_sink = None
            # the tree as the undo snapshot just walked it (under the same lock): no second walk (a plugin that
            # captures the world itself leaves nothing here: then walk it)
            context["current"] = sink[-1] if len(sink) == 1 else self.working_entries()
            with self.noting_restore(snap.id, undo.id, norm_paths) as noted:
                try:
                    changes = context["pm"].hook.agentsnap_restore_world(root=str(self.root), world=rec, context=context)
                    skipped = vault.write_back(self.root, secrets)
                except Exception as exc:  # failed midway (disk full, a file in the way): put the tree back as it was
                    if getattr(exc, "nothing_changed", False):  # refused before the first file was touched
                        noted["whole"] = True
                        raise
                    error, noted["whole"] = self._roll_back(undo, exc, norm_paths)
                    raise error from exc
                if norm_paths is None:
                    trace_rec = snap.layers.get("trace")
                    self.set_messages(content.get_value(self.objects, trace_rec["content"]) if trace_rec else [])
                    symref, old = self.head()
                    if symref:
                        self.refs.update_refs([RefUpdate(symref, snap.id, old)], f"restore: {snap.id[:12]}")
                    else:
                        self.refs.set_head(self.worktree, None, snap.id)
            held = context.get("git_held_back") or []
            return {"id": snap.id, "undo": undo.id, "changes": changes, **_git_not_restored(rec, self.root, norm_paths),
                    **({"temps_removed": noted["swept"]} if noted.get("swept") else {}),
                    **vault.report(secrets, note, skipped), **({"git_held_back": held} if held else {})}

    def _roll_back(self, undo: Snapshot, exc: Exception, paths: list[str] | None) -> tuple[AgentSnapError, bool]:
        """Restore the automatic undo snapshot after a failed restore; the error to raise names it, and whether the
        tree is back as it was."""
        what = f"restore failed midway ({exc})"
        try:
            world.materialize(self.objects, self.root, self.world_entries(undo), self.working_entries(),
                              allow_external_symlinks=True, paths=paths)
            # and the secret files as the undo snapshot kept them (the restore may have overwritten some)
            vault.write_back(self.root, vault.open_for_restore(self, undo.id, undo.layers.get("world") or {},
                                                               self.root, paths, in_place=False)[0])
        except Exception as again:  # noqa: BLE001 - reported with the command that finishes the job
            return AgentSnapError(f"{what}; rolling back also failed ({again}): "
                                  f"run 'agentsnap restore {undo.id[:12]}' (refs/undo/restore) to get the tree back"), False
        return AgentSnapError(f"{what}; the tree was rolled back to the undo snapshot {undo.id[:12]} "
                              "(refs/undo/restore): nothing changed"), True

    def tree_path(self, p: str | os.PathLike[str], what: str = "path") -> str:
        """``p`` (relative to the current directory, or absolute) as a path in the tree, read as written (``""``:
        the tree itself).

        A link inside the tree is not followed: ``d/f`` where ``d`` is now a link to a directory elsewhere still
        names the tree's ``d/f`` (as git reads a pathspec), so ``restore SPEC -- d/f`` puts the snapshot's
        directory back in place of the link and ``diff -- d`` shows the link. Only a path that names the tree
        through another way in (an absolute path through a link to it) is read with links followed.
        """
        p = os.fspath(p)
        if not p:  # (a script's unset variable: never "here", which at the top would be the whole tree)
            raise InvalidInput(f"an empty {what} names nothing; give a path (write '.' for the whole tree)")
        written = Path(os.path.normpath(os.path.join(os.getcwd(), p)))
        try:
            rel = written.relative_to(self.root).as_posix()
        except ValueError:
            try:
                rel = Path(p).resolve().relative_to(self.root).as_posix()
            except ValueError:
                raise InvalidInput(f"{what} {p!r} is outside the working tree {self.root}") from None
        return "" if rel == "." else rel

    def _norm_path(self, p: str) -> str:
        rel = self.tree_path(p)
        if not rel:
            raise InvalidInput("give a path inside the tree, not the tree itself")
        return rel

    # ---------------------------------------------------------------- fork / switch
    def fork(
        self,
        spec: str | None = None,
        n: int = 2,
        *,
        prefix: str = "attempt",
        worktrees: str | None = None,
        effects_policy: str = "defer",
    ) -> list[dict[str, Any]]:
        """Create ``n`` branches at ``spec``; with ``worktrees``, also ``n`` directories to work in.

        ``effects_policy`` (allow / block / defer) says what irreversible effects do on the new branches
        (see :mod:`agentsnap_core.layers.effects`); the default defers them until a branch is merged or promoted.
        """
        if isinstance(n, bool) or not isinstance(n, int) or n < 1 or n > 10_000:
            raise InvalidInput(f"fork count must be a whole number between 1 and 10000, not {n!r}")
        oid = self.resolve(spec)
        _refuse_dead(self, self.get(oid), "forked")  # (its layers are reclaimed: no branch could be worked on)
        check_ref_name(prefix)
        existing = self.branches()
        start = 1 + max([int(k[len(prefix) + 1 :]) for k in existing if re.fullmatch(re.escape(prefix) + r"-\d+", k)] or [0])
        names = [f"{prefix}-{i}" for i in range(start, start + n)]
        base_dir = Path(worktrees).resolve() if worktrees else None
        if base_dir is not None:
            self._refuse_inside_store(base_dir, "fork --worktrees")
            inside = self.inside_tree_line(base_dir, "fork --worktrees", "attempts")
            if inside:  # (the worktrees' agents would lose their files to a restore here)
                raise InvalidInput(inside)
        secrets: list[tuple[str, int, bytes]] = []
        note: str | None = None
        world_rec: dict[str, Any] = {}
        if base_dir is not None:  # everything that could refuse the fork, before any branch exists
            for name in names:
                d = base_dir / name
                if d.exists() and any(d.iterdir()):
                    raise TargetNotEmpty(str(d))
            world_rec = self.get(oid).layers.get("world") or {}
            tree = world_rec.get("tree")
            if tree and not self.captured_here(tree):
                for path, kind, _m, _s, ref in self.world_entries(oid):
                    if kind == "l" and world.symlink_escapes(path, ref):
                        raise UnsafeSnapshot(path, f"symlink points outside the worktree ({ref!r}) and the snapshot "
                                                   "is not this store's own capture")
            # the secret files the local vault keeps go into every worktree, as restore --to
            secrets, note = vault.open_for_restore(self, oid, world_rec, base_dir, None, in_place=False)
        from agentsnap_core.layers.effects import (
            record_fork,  # fork entries first: a branch never exists without its policy
        )

        record_fork(self, oid, names, effects_policy, spec if spec and f"refs/heads/{spec}" in self.refs.list_refs("refs/heads/") else None)
        self.update_refs([RefUpdate(f"refs/heads/{nm}", oid, None) for nm in names], f"fork: {n} from {oid[:12]}")
        out: list[dict[str, Any]] = [{"branch": nm, "id": oid} for nm in names]
        if base_dir is not None:
            there = {nm for nm in names if (base_dir / nm).is_dir()} | ({""} if base_dir.is_dir() else set())
            try:
                self._fill_worktrees(out, oid, base_dir, world_rec, secrets, note)
            except BaseException:  # (Ctrl-C, SIGTERM, a full disk: no branch left without its tree, nor half a tree)
                self._unfork(names, oid, base_dir, there)
                raise
        return out

    def _unfork(self, names: list[str], oid: str, base_dir: Path, there: set[str]) -> None:
        """Take back a ``fork --worktrees`` that failed or was interrupted while it filled the directories: the
        branches it made (still at ``oid``, compare-and-swap), their worktree records and what it wrote in the
        directories (each was empty or absent before: ``TargetNotEmpty`` was checked first; one that was there, empty,
        stays, as does ``base_dir`` if it was there; ``there`` names them, ``""`` for ``base_dir``)."""
        for nm in names:
            d = base_dir / nm
            if d.is_dir() and not d.is_symlink():
                if nm in there:
                    for child in list(d.iterdir()):
                        if child.is_dir() and not child.is_symlink():
                            shutil.rmtree(child, ignore_errors=True)
                        else:
                            child.unlink()
                else:
                    shutil.rmtree(d, ignore_errors=True)
            shutil.rmtree(self.store_dir / "wt" / nm, ignore_errors=True)
            try:
                self.refs.delete_head(nm)
            except Exception:  # noqa: BLE001 - (not set yet)
                pass
        try:
            self.update_refs([RefUpdate(f"refs/heads/{nm}", None, oid) for nm in names], f"fork: taken back ({len(names)})")
        except AgentSnapError:
            pass  # (one of them moved meanwhile: someone works on it; left as it is)
        if "" not in there:
            try:
                base_dir.rmdir()  # (made by this fork; left if anything else is in it)
            except OSError:
                pass

    def _fill_worktrees(self, out: list[dict[str, Any]], oid: str, base_dir: Path, world_rec: dict[str, Any],
                        secrets: list[tuple[str, int, bytes]], note: str | None) -> None:
        """One directory per fork in ``out`` under ``base_dir``, each ``oid``'s tree, its link to this store and trace."""
        entries, _, held = self.guard_git_code(world_rec.get("tree"), self.world_entries(oid), [])
        first: Path | None = None
        for item in out:
            d = _mkdir(base_dir / item["branch"])
            if first is None:  # links pointing outside: the same rule as restore (captured_here)
                tree = world_rec.get("tree")
                world.materialize(self.objects, d, entries, [], isinstance(tree, str) and self.captured_here(tree), None,
                                  self._advance)
                first = d
            else:
                _clone_tree(first, d, entries)
            (d / STORE_DIR).write_text(json.dumps({"store": str(self.store_dir), "worktree": item["branch"]}) + "\n")
            place = self.store_dir / "wt" / item["branch"]
            place.mkdir(parents=True, exist_ok=True)
            (place / WORKTREE_PATH).write_text(str(d) + "\n")  # (where it is: Repo.checked_out_at)
            self.refs.set_head(item["branch"], f"refs/heads/{item['branch']}", None)
            wt = Repo(d, self.store_dir, item["branch"])
            trace = wt.read_layer(oid, "trace")
            wt.set_messages(trace or [])
            wt.close()
            item["path"] = str(d)
            item.update(vault.report(secrets, note, vault.write_back(d, secrets)))
            if held:
                item["git_held_back"] = held

    def _refuse_inside_store(self, dest: Path, verb: str) -> None:
        """Files written into the store directory would sit among its objects and worktree state (and go with it)."""
        store = self.store_dir.resolve()
        if dest == store or store in dest.parents:
            raise InvalidInput(f"{verb} {dest}: that is inside the store ({store}); choose a directory outside it")

    def inside_tree(self, dest: Path, tree: Path | None = None) -> str | None:
        """``dest``'s path in this working tree (or in ``tree``, a directory an adapter captures: LangGraph's
        ``world_root``), '' for the tree itself, when it is in it and the tree's ignore rules do not leave it out:
        files put there are the tree's, captured by its snapshots and removed by a restore of one without them. None
        when it is outside, or ignored (then neither touches it)."""
        root = (tree or self.root).resolve()
        dest = dest.resolve()
        if dest != root and root not in dest.parents:
            return None
        parts = dest.relative_to(root).parts
        ignore = self._ignore(root=root)
        if any(ignore.ignored("/".join(parts[:i]), True) for i in range(1, len(parts) + 1)):
            return None
        return "/".join(parts)

    def inside_tree_line(self, dest: Path, what: str, name: str, tree: Path | None = None) -> str | None:
        """The refusal of ``what`` (the verb, ``dest`` and why) when :meth:`inside_tree` holds, naming a directory
        outside (``ROOT-name``) and the ignore line that would make ``dest`` safe; None when it does not hold."""
        rel = self.inside_tree(dest, tree)
        if rel is None:
            return None
        root = (tree or self.root).resolve()
        where = f"inside this working tree ({root})" if rel else "this working tree"
        how = f" (or leave it out of snapshots with a line '{rel}/' in {world.IGNORE_FILE})" if rel else ""
        return (f"{what} {dest.resolve()}: that is {where}, whose snapshots would capture its files and whose restore "
                f"would delete them; choose a directory outside it, e.g. {root.parent / (root.name + '-' + name)}{how}")

    def switch(self, branch: str, create: bool = False) -> dict[str, Any]:
        """Point this worktree at ``branch`` and restore its tree (the work it replaces is kept in the undo snapshot).
        With ``create`` the branch is made at HEAD and the tree is left as it is: uncommitted work goes on with the
        new branch, as ``git switch -c`` carries it. ``previous`` is the branch the worktree was on (None when its
        HEAD was detached): ``switch`` back to it, then ``restore UNDO -- .``, undoes a switch that replaced work.
        The answer's ``notes`` say which worktrees whose directory is gone were forgotten (they had ``branch``
        checked out)."""
        ref = f"refs/heads/{check_ref_name(branch)}"
        symref, before = self.head()
        previous = symref.removeprefix("refs/heads/") if symref else None
        if create:  # (at HEAD: the tree already is that snapshot plus the work in progress, which stays)
            made = self.create_branch(branch)
            self.refs.set_head(self.worktree, ref, None)
            return {"branch": branch, "id": made, "undo": None, "previous": previous, "previous_id": before,
                    "created": True}
        tip = self.refs.get_ref(ref)
        if tip is None:
            raise UnknownSnapshot(branch)
        oid = tip
        if symref == ref:  # (as git: already on it; the work in progress is not thrown away)
            return {"branch": branch, "id": oid, "undo": None, "previous": previous, "previous_id": before,
                    "already": True}
        where = self.checked_out_at(ref)
        if where:  # two worktrees on one branch: each one's snapshot would move the other's tree's branch
            raise InvalidInput(f"branch {branch!r} is checked out {_place(*where[0])}; fork a new branch from it instead "
                               f"('agentsnap fork {branch} -n 1')")
        result = self.restore(oid) if oid != before or not self.status()["clean"] else {"id": oid}
        # restore moved the old branch; put it back and point HEAD at the new one
        symref, _ = self.refs.get_head(self.worktree)
        if symref and symref != ref and self.refs.get_ref(symref) == oid and result.get("undo"):
            # (the undo snapshot's parent: where the branch was; an undo that is that very snapshot, unchanged)
            back = [before] if result["undo"] == before else self.manifest(result["undo"])["parents"]
            if back:
                self.refs.update_refs([RefUpdate(symref, back[0], oid)], f"switch: back to {symref}")
        self.refs.set_head(self.worktree, ref, None)
        notes: list[str] = []  # (forgotten once the switch is done: a refused one changes nothing)
        self.checked_out_at(ref, notes)
        said = {k: result[k] for k in ("secrets_restored", "secrets_note", "git_not_restored", "stores_not_restored",
                                       "git_held_back") if k in result}
        return {"branch": branch, "id": oid, "undo": result.get("undo"), "previous": previous, "previous_id": before, **said,
                **({"notes": notes} if notes else {})}  # (what the restore said, never dropped)

    # ---------------------------------------------------------------- status / log / diff
    def status(self) -> dict[str, Any]:
        symref, oid = self.head()
        snap = Snapshot(oid, self.manifest(oid)) if oid else None
        gone: list[str] = []  # why HEAD's layers were reclaimed (expired, pruned, deleted), once found
        tree = ((snap.layers.get("world") or {}).get("tree") if snap else None)
        ignore, watch = self._ignore(), journal.lookup(str(self.root))
        tip = world.unchanged_tip(self.wt_dir / "statcache.msgpack", watch, ignore)
        if tip is not None and tip["tree"] == tree:  # (resident) nothing changed since HEAD's tree was taken here
            changes, left_out, special, git_dirs = world.Changes(), tip["x"], tip["s"], tip["g"]
        else:  # (the same ignore rules: their ignore file is read and compiled once)
            entries, left_out, cache, special, git_dirs = self._working_with_cache(ignore, watch)
            if world.is_memo_tree(entries, cache, tree):  # the tree last stored from here is HEAD's, unchanged
                changes = world.Changes()
            else:
                changes = world.compare(self._head_entries(snap, gone), entries)
        trace_base = self._head_trace(snap, gone)
        msgs = self.messages()
        git_only, stores = world.split_stores(git_dirs)
        out: dict[str, Any] = {
            "branch": self.current_branch(),
            "head": oid,
            "clean": changes.empty() and msgs == (trace_base or []),
            "world": changes.as_dict(),
            "trace": {"pending": max(0, len(msgs) - len(trace_base or []))},
            "left_out": left_out,
            "not_captured": special,
            "git_not_captured": git_only,
        }
        if stores:  # other trees' stores inside this one: their history is not in it
            out["stores_not_captured"] = stores
        cut_short = self.restore_interrupted()
        if cut_short is not None:  # the tree is part the target's, part as it was: said until a restore finishes
            out["restore_interrupted"] = cut_short
            out["clean"] = False
        said = set(left_out) | set(special)  # (left out as secrets, or FIFOs: their own lines say so)
        ignored = [p for p in changes.deleted if p not in said and not p.endswith("/") and not _under(p, git_dirs)
                   and _is_there_not_a_dir(os.path.join(self.root, p))  # (a directory now: a type change)
                   and not world.through_a_link(self.root, p)]  # (its directory a link now: not "still here")
        if ignored:  # "deleted" by the next snapshot, but still on disk: an ignore rule now leaves them out
            out["now_ignored"] = ignored
        if gone:  # nothing to compare with: every file is listed as added, and why is said
            out["head_gone"] = gone[0]
            out["clean"] = False
        missing, problem = self._vault_files_gone(snap, left_out)
        if missing:  # not a change of the snapshot's tree (they are not in it), but restore brings them back
            out["secrets_missing"] = missing
        if problem:  # never silent: the user believes the vault keeps them
            out["secrets_unreadable"] = problem
        late = journals.unreplayed(self.store_dir)
        if late:  # checkpoints an adapter journaled and a process that ended never committed: not in any snapshot
            out["unreplayed_journals"] = [{"adapter": adapter, "path": str(path)} for adapter, path in late]
        pending = journals.unsnapshotted(self.wt_dir)
        if pending:  # writes an adapter keeps between its snapshots (CrewAI's memory): not in any snapshot either
            out["unsnapshotted_journals"] = [{"adapter": adapter, "path": str(path)} for adapter, path in pending]
        return out

    def _head_entries(self, snap: Snapshot | None, gone: list[str]) -> list[world.Entry]:
        """HEAD's tree for status; ``[]`` (with why in ``gone``) when it was reclaimed after HEAD expired."""
        from agentsnap_core.repository.retention import SnapshotGone

        try:
            return self.world_entries(snap) if snap else []
        except SnapshotGone as exc:
            gone[:1] = [exc.reason]
            return []

    def _head_trace(self, snap: Snapshot | None, gone: list[str]) -> list[dict[str, Any]]:
        from agentsnap_core.repository.retention import SnapshotGone

        try:
            return (self.read_layer(snap, "trace") if snap else None) or []
        except SnapshotGone as exc:
            gone[:1] = [exc.reason]
            return []

    def _vault_files_gone(self, snap: Snapshot | None, left_out: list[str]) -> tuple[list[str], dict[str, Any] | None]:
        """Secret files HEAD left out and the local vault keeps that are no longer in the tree (``rm .env``); and,
        when the vault's entry for HEAD cannot be read, ``{"error", "paths"}``: the left-out files that are gone
        and may not come back."""
        rec = snap.layers.get("world") if snap else None
        if snap is None or not rec or not rec.get("left_out"):
            return [], None
        present = set(left_out)
        candidates = [n for n in vault.left_out(rec) if n not in present and not os.path.lexists(self.root / n)]
        if not candidates:
            return [], None
        try:
            kept = set(vault.kept(self, snap.id))
        except AgentSnapError as exc:
            return [], {"error": str(exc), "paths": candidates}
        return [n for n in candidates if n in kept], None

    def walk(self, starts: Iterable[str], limit: int | None = None, *, past_unreadable: bool = False,
             ) -> Iterator[Snapshot]:
        """Snapshots reachable from ``starts``, newest first (a child always before its parents).

        ``past_unreadable`` (what ``log`` shows): a snapshot whose manifest cannot be read (corrupt, missing, of a
        newer format) is yielded as its index row says it - id, parents, time, message, agent, no layers - with
        ``manifest["unreadable"]`` the reason, and the walk goes on to its parents; without an index row it ends
        that line of descent there. Otherwise the first one raises, as before."""
        import heapq

        seen: set[str] = set()
        heap: list[tuple[float, str]] = []
        loaded: dict[str, dict[str, Any]] = {}
        rows: dict[str, SnapshotRow] | None = None

        def read(oid: str, child_time: float | None) -> dict[str, Any]:
            nonlocal rows
            if not past_unreadable:
                return self.manifest(oid)
            try:
                return self.manifest(oid)
            except (ObjectCorrupt, ObjectMissing, UnsupportedFormat, UnknownSnapshot) as exc:
                if rows is None:
                    rows = {r.id: r for r in self.refs.list_snapshots()}
                row = rows.get(oid)
                if row is None:
                    return {"parents": [], "time": child_time or 0.0, "layers": {}, "unreadable": str(exc)}
                return {"parents": list(row.parents), "time": row.time, "message": row.message, "agent": row.agent,
                        "layers": {}, "unreadable": str(exc)}

        for s in starts:
            if s not in seen:
                seen.add(s)
                loaded[s] = read(s, None)
                heapq.heappush(heap, (-loaded[s]["time"], s))
        count = 0
        while heap and (limit is None or count < limit):
            _, oid = heapq.heappop(heap)
            m = loaded.pop(oid)
            yield Snapshot(oid, m)
            count += 1
            for p in m["parents"]:
                if p not in seen:
                    seen.add(p)
                    loaded[p] = read(p, m["time"])
                    heapq.heappush(heap, (-min(loaded[p]["time"], m["time"]), p))

    def log(self, spec: str | None = None, *, all_refs: bool = False, limit: int | None = None,
            past_unreadable: bool = False) -> list[Snapshot]:
        if all_refs:  # (as git's --all: remote-tracking refs and the Python API's sessions too, not only branches)
            starts = sorted({oid for prefix in ("refs/heads/", "refs/tags/", "refs/remotes/", "refs/agents/")
                             for oid in self.refs.list_refs(prefix).values()})
            head = self.head()[1]
            if head:
                starts.append(head)
        else:
            starts = [self.resolve(spec)]
        return list(self.walk(starts, limit, past_unreadable=past_unreadable))

    def diff(self, a: str | None = None, b: str | None = None, layer: str | None = None,
             paths: list[str] | None = None) -> dict[str, Any]:
        """Per-layer differences between two snapshots, or a snapshot and the working tree; ``paths`` (relative to
        the current directory, as on the command line) keeps only the files at or below them."""
        from agentsnap_core.repository.diffing import diff_snapshots

        rels = [self.tree_path(p) for p in paths] if paths else None
        return diff_snapshots(self, a, b, layer, None if rels is None or "" in rels else rels)  # (`-- .`: all)

    # ---------------------------------------------------------------- maintenance
    def verify(self) -> dict[str, Any]:
        from agentsnap_core.repository.maintenance import verify

        report = verify(self)
        from agentsnap_core.layers.effects_ledger import (
            verify_ledger,  # the effects chain, its seal and each snapshot's binding
        )

        report["effects"] = ledger = verify_ledger(self)
        report["problems"] += [{"kind": "effects", "id": None, **p} for p in ledger["problems"]]
        report["ok"] = report["ok"] and not ledger["problems"]
        if self.refs.get_config("crypto.trusted_keys"):  # signed snapshots: every one must verify (agentsnap_core.format.crypto)
            from agentsnap_core.format.crypto import verify_signatures

            report["signatures"] = sig = verify_signatures(self)
            report["problems"] += [{"kind": "signature", **p} for p in sig["problems"]]
            report["ok"] = report["ok"] and sig["ok"]
        return report

    def gc(self, grace_seconds: float = 3600.0) -> dict[str, Any]:
        from agentsnap_core.repository.maintenance import gc

        return gc(self, grace_seconds)

    # ---------------------------------------------------------------- objects via plugins
    def capture(self, obj: Any, message: str = "", *, agent: str = "", world_: bool = False, **kw: Any) -> Snapshot:
        """Snapshot a live object through the adapter that handles it."""
        layers = plugins.capture(obj, self)
        if layers is None:
            raise AgentSnapError(f"no installed adapter handles {type(obj).__name__} objects (see 'agentsnap plugins')")
        trace = layers.pop("trace", [])
        return self.snapshot(message, agent=agent, layers=layers, trace=trace, capture_world=world_, **kw)

    def capture_many(self, objs: dict[str, Any], message: str = "", *, agent: str = "", world_: bool = False, **kw: Any) -> Snapshot:
        """Snapshot several live objects (each through its own adapter) atomically, as one snapshot.

        Layers are stored as ``<layer>@<name>``; :meth:`restore_many` puts each object back.
        """
        all_layers: dict[str, Any] = {}
        for name, obj in objs.items():
            if not name or "@" in name:
                raise InvalidInput(f"object name {name!r} must be non-empty and contain no '@'")
            layers = plugins.capture(obj, self, name=name)
            if layers is None:
                raise AgentSnapError(f"no installed adapter handles {name!r} ({type(obj).__name__})")
            for layer, value in layers.items():
                all_layers[f"{layer}@{name}"] = value
        return self.snapshot(message, agent=agent, layers=all_layers, capture_world=world_, meta={"objects": sorted(objs)}, **kw)

    def restore_many(self, objs: dict[str, Any], spec: str) -> Snapshot:
        """Load each named object of a :meth:`capture_many` snapshot back through its adapter."""
        snap = self.get(spec)
        _refuse_dead(self, snap)
        for name, obj in objs.items():
            layers = {k.rsplit("@", 1)[0]: self.read_layer(snap, k) for k in snap.layers if k.endswith("@" + name)}
            if not layers:
                raise AgentSnapError(f"snapshot {snap.id[:12]} holds no object named {name!r}")
            if not plugins.restore(obj, layers, self, snapshot=snap, name=name):
                raise AgentSnapError(f"no installed adapter could restore {name!r} ({type(obj).__name__})")
        return snap

    def restore_into(self, obj: Any, spec: str, **options: Any) -> Snapshot:
        """Load snapshot ``spec`` into a live object through its adapter.

        ``options`` reach the adapter's hooks in ``context["options"]`` (e.g. ``replay="pure"``).
        """
        snap = self.get(spec)
        _refuse_dead(self, snap)
        layers = {name: self.read_layer(snap, name) for name in snap.layers if name != "world"}
        if not plugins.restore(obj, layers, self, snapshot=snap, options=options):
            raise AgentSnapError(f"no installed adapter could restore into {type(obj).__name__}")
        return snap


#: file in the store directory listing the world trees with outside links this store captured itself
OWN_TREES = "own-trees"
#: file in the store directory listing world trees found valid (see :meth:`Repo._valid_trees`); never pushed
VALID_TREES = "valid-trees"
_VALID_KEPT = 1024
#: validated world trees a Repo keeps (a restore's target and HEAD; bounded for long-lived Repo objects)
_TREES_KEPT = 4


def git_held_back_note(names: list[str], snap: str, how: str = "restore again with --trust-git") -> str | None:
    """The line a restore (clone, fork, pull) says when it did not write git's config and hooks (``git_held_back``:
    a snapshot this store did not capture, :meth:`Repo.captured_here`), or None."""
    if not names:
        return None
    shown = ", ".join(map(world.shown_path, names[:5])) + (f", ... ({len(names) - 5} more)" if len(names) > 5 else "")
    return (f"did not write {shown}: git takes commands from them (hooks, core.fsmonitor, filters) and would run them "
            f"at your next git command, and snapshot {snap[:12]} was not captured by this store (pulled, cloned or "
            f"crafted); they are left as they were. If you trust it, {how}")


def restore_interrupted_line(cut: dict[str, Any], now: bool = False) -> str:
    """What a restore (or a merge writing the tree) cut short left (:meth:`Repo.restore_interrupted`), and the way
    out: finish it or go back. Said by status, by a snapshot taken over it, and by the verbs it stops (merge, pull)."""
    import shlex

    paths = cut.get("paths")
    tail = (" -- " + shlex.join(paths)) if paths else ""
    target, undo, merge = (cut.get("target") or "-")[:12], (cut.get("undo") or "-")[:12], cut.get("merge")
    if cut.get("undo") is None:  # a checkout into a branch with no snapshot yet (a clone)
        head = f"interrupted in the middle of the checkout of {target}" if now else f"the checkout of {target} was interrupted"
        return f"{head}: the working tree holds part of it; finish it with 'agentsnap restore {target}'"
    if merge is not None and cut.get("target") is None:
        what = f"merge of {merge} (writing the merged tree)"
    elif merge is not None:
        what = f"fast-forward merge of {merge} to {target}"
    else:
        what = f"restore of {target}" + (f" (of {world.listing(paths, 3)})" if paths else "")
    head = f"interrupted in the middle of a {what}" if now else f"a {what} was interrupted"
    where = "those paths are" if paths else "the working tree is"
    if cut.get("target") is None:
        return (f"{head}: {where} part merged, part as before (snapshot {undo}, where the branch still is); go back "
                f"with 'agentsnap restore {undo}', then merge again")
    return (f"{head}: {where} part {target}, part as before (kept in snapshot {undo}); finish it with "
            f"'agentsnap restore {target}{tail}' or go back with 'agentsnap restore {undo}{tail}'")


def _git_not_restored(rec: dict[str, Any], dest: Path, paths: list[str] | None) -> dict[str, Any]:
    """``{"git_not_restored": [...]}``: the ``.git`` directories the snapshot left out (not captured) that are not
    in ``dest`` after a restore of ``paths`` (all: None); empty when there are none. Never a silent promise: the
    files of a deleted repository come back, its history does not."""
    names = [world.name_in(n) for n in rec.get("git_not_captured") or []]
    gone = [n for n in names if (paths is None or _under(n, paths)) and not os.path.isdir(dest / n)]
    git, stores = world.split_stores(gone)
    return {**({"git_not_restored": git} if git else {}), **({"stores_not_restored": stores} if stores else {})}


def _dead(repo: Repo, snap: Snapshot) -> bool:
    """An expired, pruned or deleted snapshot: never reused as an undo (gc reclaims its layers, so the state it
    stands for would be lost: a restore after ``expire HEAD`` printed 'undo with: agentsnap restore ID' for an ID
    restore refuses)."""
    from agentsnap_core.repository.retention import death_of

    return death_of(repo, snap.id, snap.manifest) is not None


def _refuse_dead(repo: Repo, snap: Snapshot, doing: str = "restored") -> None:
    from agentsnap_core.repository.retention import refuse_dead  # expired, pruned or deleted snapshots are tombstones

    refuse_dead(repo, snap, doing=doing)


def _whoami() -> str:
    """``user@host``, the user as ``getpass.getuser`` finds it (without importing getpass: ~2 ms a command)."""
    try:
        user = next((os.environ[k] for k in ("LOGNAME", "USER", "LNAME", "USERNAME") if os.environ.get(k)), None)
        if user is None:
            import pwd

            user = pwd.getpwuid(os.getuid()).pw_name
        return f"{user}@{os.uname().nodename}"
    except Exception:
        return "unknown"


def _mkdir(p: Path) -> Path:
    p.mkdir(parents=True, exist_ok=True)
    return p


def _empty_dir(p: Path, remove: bool) -> None:
    """Undo a restore into a directory that was empty (or absent, then ``remove`` it too); links are not followed."""
    if not p.is_dir():
        return
    for child in p.iterdir():
        if child.is_dir() and not child.is_symlink():
            for dirpath, dirnames, _files in os.walk(child):  # read-only dirs from the snapshot
                for d in dirnames:
                    os.chmod(os.path.join(dirpath, d), 0o700)
            os.chmod(child, 0o700)
            import shutil

            shutil.rmtree(child, ignore_errors=True)
        else:
            child.unlink()
    if remove:
        p.rmdir()


def _temp_pid(name: str) -> int | None:
    """The process id in a restore's temp file name (``.agentsnap-tmp-PID-NAME``, ``.agentsnap-tmp-vault-PID-HEX``)."""
    rest = name[len(world.TEMP_PREFIX):].removeprefix("vault-")
    pid = rest.split("-", 1)[0]
    return int(pid) if pid.isdigit() else None


def _pid_alive(pid: int | None) -> bool:
    """Whether process ``pid`` may still be writing (unknown counts as alive: its file is left alone)."""
    if pid is None or pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # (another user's process)
    return True


def _is_there_not_a_dir(path: str) -> bool:
    """Whether ``path`` exists and is not a directory (a link to one counts as a link)."""
    try:
        return not stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def _place(worktree: str, path: Path | None) -> str:
    """Where a worktree is, as a message says it (:meth:`Repo.checked_out_at`)."""
    return f"at {path}" if path is not None else f"in the worktree {worktree!r}"


def _save_statcache_after(batch: Any, context: HookContext) -> None:
    """The capture's stat cache is saved once the batch has committed the snapshot it describes."""
    sc = context.get("statcache")
    if sc:
        batch.after.append(functools.partial(sc[1].save, sc[0]))


def _under(path: str, roots: list[str]) -> bool:
    return any(path == r or path.startswith(r + "/") for r in roots)


def _check_paths_match(paths: list[str], target: list[world.Entry], snap_id: str, root: Path | None,
                       left_out: list[str]) -> None:
    """Refuse, before anything is touched, a restore path that is neither in the snapshot (at or above an entry or
    a secret file it left out, which the vault may keep) nor, for a restore in place (``root``), in the working tree
    (where restoring it means removing it)."""
    names = {e[0] for e in target}.union(left_out)
    for p in paths:
        if any(_under(n, [p]) for n in names):
            continue
        if root is not None and os.path.lexists(root / p):
            continue
        where = " or in the working tree" if root is not None else ""
        raise InvalidInput(f"path {p!r} matches nothing in snapshot {snap_id[:12]}{where}; nothing was restored "
                           f"(see 'agentsnap show {snap_id[:12]}' for what it holds)")


_FICLONE = 0x40049409


def _clone_file(src: str, dst: str, mode: int) -> None:
    """Copy a file, sharing its blocks (reflink) where the filesystem can."""
    import fcntl

    with open(src, "rb") as fs, open(dst, "wb") as fd:
        try:
            fcntl.ioctl(fd.fileno(), _FICLONE, fs.fileno())
        except OSError:
            import shutil

            shutil.copyfileobj(fs, fd, 1 << 20)
    os.chmod(dst, mode)


def _clone_tree(src: Path, dst: Path, entries: list[world.Entry]) -> None:
    for path, kind, mode, _size, ref in entries:
        s, d = os.path.join(src, path), os.path.join(dst, path)
        if kind == "d":
            os.makedirs(d, exist_ok=True)
        elif kind == "l":
            os.symlink(ref, d)
        else:
            _clone_file(s, d, mode)
    for path, kind, mode, _size, _ref in sorted(entries, reverse=True):
        if kind == "d":
            os.chmod(os.path.join(dst, path), mode)
