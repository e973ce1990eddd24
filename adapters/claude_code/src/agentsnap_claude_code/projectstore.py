"""Where the plugin keeps a project's snapshots: outside the project, so that nothing run in it deletes them.

One store per project under ``<user data dir>/agentsnap/claude-code/<encoded project path>-<hash>``
(``$XDG_DATA_HOME`` or ``~/.local/share``; the ``store_dir`` setting moves it, ``store_url`` keeps
objects and refs in a shared store). The project gets a one-line link file ``.agentsnap`` (the
core's linked-worktree marker, kept out of git through ``.git/info/exclude``) so that the core's
``agentsnap`` CLI works there too; the plugin never needs it and re-creates it after a
``git clean -fdx`` or an ``rm -rf`` of the whole project.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import time
from pathlib import Path

from agentsnap_core import Repo
from agentsnap_core.errors import AgentSnapError
from agentsnap_core.repository import outside
from agentsnap_core.repository.repo import DEFAULT_BRANCH, PRIMARY, STORE_DIR
from agentsnap_core.stores import bind_store_url
from agentsnap_core.stores.local import LocalStore

from .config import Settings
from .gate import project_root_for
from .transcript import encode_project_dir


def data_dir() -> Path:
    env = os.environ.get("XDG_DATA_HOME")
    return (Path(env).expanduser() if env else Path.home() / ".local" / "share") / "agentsnap" / "claude-code"


def store_dir_for(root: Path, settings: Settings) -> Path:
    """The store of the project at ``root`` (an absolute path; the same project always maps to the same store)."""
    base = Path(settings["store_dir"]).expanduser() if settings["store_dir"] else data_dir()
    digest = hashlib.sha256(str(root).encode("utf-8", "surrogateescape")).hexdigest()[:12]
    return base.resolve() / f"{encode_project_dir(root)[-60:].strip('-')}-{digest}"


def _create(store: Path, root: Path, settings: Settings) -> None:
    fresh = not (store / "format.json").exists()
    store.parent.mkdir(parents=True, exist_ok=True)
    local = LocalStore(store, create=True)
    try:
        if settings["store_url"]:
            bind_store_url(local, settings["store_url"])
    except BaseException:
        local.close()
        if fresh:
            import shutil

            shutil.rmtree(store, ignore_errors=True)
        raise
    local.close()
    with Repo(root, store, PRIMARY) as repo:
        if fresh:
            repo.refs.set_head(PRIMARY, f"refs/heads/{DEFAULT_BRANCH}", None)
        repo.refs.set_config("world.include_git", "true" if settings["capture_git"] else "false")
        secrets = settings["capture_secrets"]
        if secrets is None:
            secrets = not settings["store_url"]  # credentials stay on this machine unless asked for
        repo.refs.set_config("world.include_secrets", "true" if secrets else "false")
        repo.refs.set_config("claude_code.project", str(root))


def link(root: Path, store: Path) -> None:
    """Write ``<root>/.agentsnap`` (a link to the store) unless something is there; keep it out of git and record it
    in core's registry of stores outside their trees, so the core CLI finds the store by the project's path even
    once the link is gone (``agentsnap_core.repository.outside``)."""
    if (root / STORE_DIR).exists():
        return
    try:
        outside.link(root, store)
    except OSError:
        pass  # the link is a convenience for the core CLI; the plugin finds its store by the project path


def open_project_repo(cwd: str | os.PathLike[str], settings: Settings, *, create: bool | None = None) -> Repo:
    """The plugin's store for the project holding ``cwd``; created when ``auto_init`` allows (or ``create``)."""
    root = project_root_for(str(cwd))
    store = store_dir_for(root, settings)
    if create is not False and (store == root or root in store.parents):  # (the CLI still reads such a store)
        raise AgentSnapError(
            f"the store {store} would be inside the project {root} (setting store_dir {settings['store_dir']!r}): "
            "`git clean -fdx` or `rm -rf` there would delete the snapshots along with the files; "
            "set store_dir to a folder outside the project"
        )
    if not (store / "format.json").exists():
        if not (settings["auto_init"] if create is None else create):
            raise AgentSnapError(
                f"no agentsnap store for {root} yet (it would live in {store}); set auto_init to true or take a snapshot with /agentsnap:snapshot"
            )
        if root == Path.home().resolve() or root == Path(root.anchor):
            raise AgentSnapError(f"refusing to snapshot {root} (home or filesystem root); start Claude Code in a project")
        _create(store, root, settings)
    root.mkdir(parents=True, exist_ok=True)  # `rm -rf <project>` removed it: a restore brings it back
    link(root, store)
    if not KEEP_OPEN:
        return Repo(root, store, PRIMARY)
    key = (str(root), str(store))
    kept = _OPEN.pop(key, None)
    signature = _signature(store)
    if kept is not None:
        if signature is not None and not kept.in_transaction() and kept.signature == (signature, _settings_of(kept)):
            _OPEN[key] = kept
            return kept
        kept.close_now()
    repo = _KeptRepo(root, store, PRIMARY)
    settings_now = _settings_of(repo)
    if signature is None or not isinstance(repo.store, LocalStore):  # (objects and refs in a shared store, by
        return repo  # URL: a connection to a server is opened for each call)
    if getattr(repo.store.refs, "full_disk", False):  # opened read-only on a full disk: as it was then, never kept
        return repo
    repo.signature = (signature, settings_now)
    _OPEN[key] = repo
    return repo


#: set by the plugin's helper (a long-lived process answering one call at a time): the stores opened stay open
#: between calls (opening and closing one is ~1.5 ms of a snapshotting call); see :func:`_signature`
KEEP_OPEN = False


class _KeptRepo(Repo):
    """A repository the helper keeps open: ``close()`` (a ``with`` block's end) leaves it open for the next call."""

    signature: tuple[object, ...] | None = None

    def close(self) -> None:
        if self.signature is None:  # (not kept)
            super().close()

    def close_now(self) -> None:
        try:
            super().close()
        except Exception:  # noqa: BLE001 - (a store gone or broken under it: dropped all the same)
            pass

    def in_transaction(self) -> bool:
        """Whether its index connection was left inside a transaction (a call cut short by its time limit)."""
        db = getattr(self.refs, "_db", None)
        return bool(db is not None and db().in_transaction)


#: (project root, store) -> the repository kept open for it
_OPEN: dict[tuple[str, str], _KeptRepo] = {}


def _signature(store: Path) -> tuple[object, ...] | None:
    """What a kept repository was opened with outside its store's settings: the very store files (a store deleted
    and made again, or its format changed, is another one), the environment ``Repo`` reads when it opens, and the
    encryption key file it names (None: the store cannot be kept, e.g. that file is missing)."""
    try:
        fmt, index = os.stat(store / "format.json"), os.stat(store / "index.sqlite")
    except OSError:
        return None
    env = tuple(os.environ.get(k) for k in ("AGENTSNAP_ENCRYPTION_KEY", "AGENTSNAP_ENCRYPTION_KEY_FILE",
                                            "AGENTSNAP_LOCK_WAIT"))
    key_file = os.environ.get("AGENTSNAP_ENCRYPTION_KEY_FILE")
    key = _identity(key_file) if key_file else None  # (a key file written anew under the same name: another key)
    if key_file and key is None:
        return None
    return (fmt.st_dev, fmt.st_ino, fmt.st_size, fmt.st_mtime_ns), (index.st_dev, index.st_ino), env, key


def _settings_of(repo: Repo) -> tuple[str | None, ...]:
    """The store settings ``Repo`` reads when it opens (encryption and its key's id, ``.git`` capture, a shared store's
    URL)."""
    get = repo.refs.get_config
    return (get("crypto.encrypt"), get("crypto.key_id"), get("world.include_git"), get("store.url"))


def close_kept() -> None:
    """Close every repository kept open (the helper, before it exits; and after a snapshot that failed or was cut
    short, so that the next call opens the store afresh)."""
    while _OPEN:
        _OPEN.popitem()[1].close_now()


def bulky_ignored(root: Path, limit: int, cache_path: Path | None = None) -> list[str]:
    """Folders git ignores (``.gitignore``, ``.git/info/exclude``, the global excludes) holding more than ``limit`` files.

    Build output and dependency folders (``node_modules/``, ``target/``, ``.venv/``) can be rebuilt and would
    make the first snapshot of a big project miss the hook's time limit. Empty when ``root`` is not a git work tree.

    In the plugin's helper (a process keeping core's change journal on the tree), the answer of the last call is
    reused when nothing it depends on can have changed since (:func:`_still_true`); ``cache_path`` is the tree's
    stat cache, whose listing says the last capture saw every directory of the tree watched.
    """
    if not (root / ".git").exists():
        return []
    from agentsnap_core.layers import journal

    watch = journal.lookup(str(root))
    token = watch.token() if watch is not None else None
    key = (str(root), limit)
    known = _BULKY.pop(key, None)
    if known is not None and token is not None and cache_path is not None and _still_true(root, known, watch, cache_path):
        known.token = token  # (the answer holds as of now: the next call asks what changed after this one)
        _BULKY[key] = known
        return list(known.folders)
    # what the answer depends on, taken before git runs (a change while it runs shows at the next call)
    before = _git_fingerprint(root) if token is not None and _fingerprint_tells(root) else None
    ignores = _ignore_files(root, cache_path) if before is not None and cache_path is not None else {}
    import subprocess

    try:
        proc = subprocess.run(
            ["git", "-C", str(root), "ls-files", "--others", "--ignored", "--exclude-standard", "--directory", "-z"],
            capture_output=True, timeout=20,
        )
    except (OSError, subprocess.TimeoutExpired):
        return []
    if proc.returncode != 0:
        return []
    out = []
    for rel in proc.stdout.decode("utf-8", "surrogateescape").split("\0"):
        if rel.endswith("/") and rel != f"{STORE_DIR}/" and _more_files_than(root / rel, limit):
            out.append(rel)
    if before is not None:
        _BULKY[key] = _Bulky(token, before, ignores, out, [_identity(root / rel) for rel in out])
    return out


class _Bulky:
    """One answer of :func:`bulky_ignored`, with what it depended on."""

    def __init__(self, token: object, fingerprint: tuple[object, ...], ignores: dict[str, tuple[int, ...]],
                 folders: list[str], stats: list[tuple[int, ...] | None]) -> None:
        self.token = token  # the change journal's token when it was last known true
        self.fingerprint = fingerprint
        self.ignores = ignores  # directory -> its .gitignore's identity, size and times
        self.folders = folders
        self.stats = stats  # each folder's own directory: its identity (its top-level entries unchanged)


#: (project root, limit) -> the last answer of bulky_ignored (in the helper; one process, one call at a time)
_BULKY: dict[tuple[str, int], _Bulky] = {}

#: environment variables that change what git ignores (or where it reads its settings from)
_GIT_ENV = ("HOME", "XDG_CONFIG_HOME", "GIT_DIR", "GIT_WORK_TREE", "GIT_COMMON_DIR", "GIT_INDEX_FILE",
            "GIT_CONFIG_GLOBAL", "GIT_CONFIG_SYSTEM", "GIT_CONFIG_NOSYSTEM", "GIT_CONFIG_COUNT", "GIT_CONFIG_PARAMETERS",
            "GIT_CEILING_DIRECTORIES")

#: a file written this close to when it is looked at may be written again within the same timestamp: not vouched for
_RACY_NS = 50_000_000
_RACY_LOOKS = itertools.count()


def _identity(path: Path | str) -> tuple[int, ...] | None:
    """A file's inode, size, modification and change times; None when missing or written too recently to tell."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    if time.time_ns() - max(st.st_mtime_ns, st.st_ctime_ns) < _RACY_NS:
        return (-1, next(_RACY_LOOKS))  # (equal to no other look: what depends on it is asked again)
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _git_files(root: Path) -> tuple[list[Path], list[Path]]:
    """``(config files, other files)`` git reads for what it ignores in ``root``, outside the work tree's directories."""
    git = root / ".git"
    home = Path(os.environ.get("HOME") or "~").expanduser()
    xdg = Path(os.environ.get("XDG_CONFIG_HOME") or home / ".config")
    return ([git / "config", home / ".gitconfig", xdg / "git" / "config", Path("/etc/gitconfig")],
            [git / "info" / "exclude", git / "index", xdg / "git" / "ignore"])


def _git_fingerprint(root: Path) -> tuple[object, ...]:
    """What git's ignore answer for ``root`` depends on outside the work tree's own directories: the git-related
    environment and the identity of the repository's index, exclude file and config, the user's and the system's
    config and ignore files."""
    configs, others = _git_files(root)
    return (tuple((k, os.environ.get(k)) for k in _GIT_ENV), *(_identity(p) for p in (*configs, *others)))


def _fingerprint_tells(root: Path) -> bool:
    """Whether :func:`_git_fingerprint` is all git's answer depends on. Not when ``.git`` is a link to a git directory
    elsewhere, ``GIT_CONFIG_*`` is set, or a config names an excludes file or includes another config: then git is
    asked every time. (Checked when git answers; the answer is reused only while the configs' identities stay.)"""
    if not (root / ".git").is_dir() or any(os.environ.get(k) for k in _GIT_ENV if k.startswith("GIT_CONFIG_")):
        return False
    for path in _git_files(root)[0]:
        try:
            text = path.read_bytes().lower()
        except FileNotFoundError:
            continue
        except OSError:
            return False
        if b"excludesfile" in text or b"include" in text:
            return False
    return True


def _ignore_files(root: Path, cache_path: Path) -> dict[str, tuple[int, ...]]:
    """The ``.gitignore`` files of the directories the last capture listed (none without a listing), by directory."""
    from agentsnap_core.layers import world

    listing = world.kept_listing(cache_path)
    out: dict[str, tuple[int, ...]] = {}
    for d in ("", *(listing or {}).get("d", ())):
        ident = _identity(os.path.join(root, d, ".gitignore"))
        if ident is not None:
            out[d] = ident
    return out


def _still_true(root: Path, known: _Bulky, watch: object, cache_path: Path) -> bool:
    """Whether the last answer still holds, from the change journal: a capture with the same watch, no later than
    the answer, found every directory of the tree watched (the token of the listing kept for the tree), and since
    then no directory had an entry made or removed, every ``.gitignore`` in a directory that changed is as it was,
    git's settings, index and exclude files are as they were, and each folder left out has the same top-level entries
    (its own directory unchanged). A folder left out is not watched: files removed deep inside it leave it out
    until something at its top level changes."""
    from agentsnap_core.layers import world

    listing = world.kept_listing(cache_path)  # (a later capture keeps it: once covered, new directories are
    listed, token = (listing or {}).get("t"), known.token  # watched as the journal reports them, and a removed one
    if not (isinstance(listed, list) and isinstance(token, list) and listed[0] == token[0] and listed[1] <= token[1]):
        return False  # relists its parent)
    changed = watch.since(token)  # type: ignore[attr-defined]
    relisted = watch.relisted_since(token)  # type: ignore[attr-defined]
    if changed is None or relisted is None or relisted:
        return False
    for d in changed:
        ident = _identity(os.path.join(root, d, ".gitignore"))
        if ident is not None and known.ignores.get(d) != ident:
            return False
    return _git_fingerprint(root) == known.fingerprint and [_identity(root / rel) for rel in known.folders] == known.stats


def _more_files_than(folder: Path, limit: int) -> bool:
    seen, stack = 0, [folder]
    while stack:
        try:
            with os.scandir(stack.pop()) as it:
                for entry in it:
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(Path(entry.path))
                    else:
                        seen += 1
                        if seen > limit:
                            return True
        except OSError:
            continue
    return False


def leave_out(repo: Repo, folders: list[str]) -> None:
    """Record ``folders`` as the store's ``world.ignore`` (snapshots and restores both leave them alone)."""
    value = "\n".join(f"/{f}" for f in folders)
    if (repo.refs.get_config("world.ignore") or "") != value:
        repo.refs.set_config("world.ignore", value)
