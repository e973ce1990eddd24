"""The ``world`` layer: a working directory captured as a flat, sorted tree.

Entries are ``[path, kind, mode, size, ref]`` with kind ``f`` (file; ref = content id),
``l`` (symlink; ref = link target, never followed) or ``d`` (directory). The tree is stored
as canonical msgpack through :func:`agentsnap_core.format.content.put_bytes`, so a large tree is chunked
and two snapshots of a big tree share all unchanged chunks.

Capture is incremental: a stat cache (like git's index) maps each path to its
``(size, mtime, ctime, inode, mode)`` and content id, so an unchanged file is not re-read.
Git's "racily clean" problem - a file rewritten with the same size within one timestamp
tick after it was cached - is handled by never trusting cache entries whose timestamps are
within :data:`RACY_WINDOW_NS` (or two timestamp ticks, on coarse filesystems) of the capture
that recorded them: such a file could be rewritten after we read it without its timestamps
changing, so it is re-read next time (git does the same against its index file's mtime).
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import nullcontext
from dataclasses import dataclass, field
from itertools import compress, filterfalse, repeat
from operator import and_, itemgetter
from pathlib import Path
from typing import Any

from agentsnap_core.errors import AgentSnapError, ObjectCorrupt, UnsafeSnapshot
from agentsnap_core.format import content, objects
from agentsnap_core.format.encoding import bulk, pack_plain, unpack
from agentsnap_core.format.files import write_replacing
from agentsnap_core.format.objects import Kind, is_oid
from agentsnap_core.stores.base import ObjectStore

TREE_FORMAT = 1
IGNORE_FILE = ".agentsnapignore"
DEFAULT_IGNORES = (".agentsnap", ".git/")
#: cache entries whose timestamps fall this close to the capture are re-hashed next time
RACY_WINDOW_NS = 100_000_000
#: filesystem timestamp tick; tests raise it to simulate coarse filesystems
TIMESTAMP_GRANULARITY_NS = 1
MAX_PATH = 4096
NAME_MAX = 255
HASH_THREADS = min(4, (os.cpu_count() or 2) + 1)
#: threads walking the top-level directories: on 2 cores the walk is bound by Python's per-entry work under the
#: GIL, and 3 threads measured slower than one (stdlib tree: 16 ms in one thread, 23-33 ms in three; issue 19)
SCAN_THREADS = 1 if (os.cpu_count() or 1) <= 2 else min(4, (os.cpu_count() or 2) + 1)

Entry = tuple[str, str, int, int, str]  # path, kind, mode, size, ref


#: credential files left out of world capture unless the user opts in (see :func:`is_secret_file`);
#: ``*.pem`` and ``*.key`` are decided by content (:data:`KEY_SUFFIXES`), not listed here
SECRET_PATTERNS = (
    ".env", ".env.*", "!.env.example", "!.env.sample", "!.env.template", "!.env.dist",
    "*.p12", "*.pfx", "id_rsa*", "id_dsa*", "id_ecdsa*", "id_ed25519*",
    ".netrc", ".npmrc", ".pypirc", ".pgpass", ".git-credentials", "credentials.json", "**/.aws/credentials",
)
_SECRET_NAMES = frozenset({".env", ".netrc", ".npmrc", ".pypirc", ".pgpass", ".git-credentials", "credentials.json"})
_ENV_TEMPLATES = frozenset({".env.example", ".env.sample", ".env.template", ".env.dist"})
#: names that say too little: a PEM file may be a public CA bundle (certifi's cacert.pem) or a private key
KEY_SUFFIXES = (".pem", ".key")
_PRIVATE_KEY = b"PRIVATE KEY-----"
#: a key file larger than this is read only this far (private keys are a few KiB)
MAX_KEY_SCAN = 16 * 1024 * 1024
#: a chunk of zeros at least this long is restored as a hole, not written (sparse files keep their holes)
SPARSE_MIN = 4096
#: prefix of the temp files :func:`materialize` writes; an interrupted restore's leftovers are never captured
TEMP_PREFIX = ".agentsnap-tmp-"


def holds_private_key(full: str | os.PathLike[str]) -> bool:
    """True when the regular file ``full`` holds a PEM private key (``-----BEGIN ... PRIVATE KEY-----``)."""
    try:
        fd = os.open(full, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return False  # a link, a vanished file: nothing to leave out (an unreadable one fails when captured)
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return False
        tail, seen = b"", 0
        while seen < MAX_KEY_SCAN:
            block = f.read(1024 * 1024)
            if not block:
                return False
            if _PRIVATE_KEY in tail + block:
                return True
            tail, seen = block[-len(_PRIVATE_KEY):], seen + len(block)
    return True  # too large to read through: keep it out, the switch includes it


def is_secret_file(rel: str, data: bytes | None = None) -> bool:
    """True for ``.env`` files, private keys and credential files (the default secret exclusions).

    ``*.pem`` / ``*.key`` are secrets only when they hold a private key: pass the content as ``data``;
    without it such a name counts as a secret (it may hold one).
    """
    name = rel.rsplit("/", 1)[-1]
    if name in _SECRET_NAMES:
        return True
    if name.startswith(".env.") and name not in _ENV_TEMPLATES:
        return True
    if name.endswith(KEY_SUFFIXES):
        return data is None or _PRIVATE_KEY in data
    if name.endswith((".p12", ".pfx")) or name.startswith(("id_rsa", "id_dsa", "id_ecdsa", "id_ed25519")):
        return True
    return rel == ".aws/credentials" or rel.endswith("/.aws/credentials")


class Ignore:
    """gitignore-style matching: built-in defaults plus the root's ``.agentsnapignore``.

    Credential files (:data:`SECRET_PATTERNS`, and ``*.pem``/``*.key`` files holding a private key) are left
    out unless ``include_secrets`` is set (``snapshot --include-secrets``, store config
    ``world.include_secrets=true``) or a ``!pattern`` line in ``.agentsnapignore`` re-includes one by name.
    Every file left out that way is listed in :attr:`left_out`, so that nothing is left out in silence.
    """

    def __init__(
        self, root: Path, include_git: bool = False, extra: list[str] | None = None, include_secrets: bool = False
    ) -> None:
        lines = [p for p in DEFAULT_IGNORES if not (include_git and p == ".git/")]
        user: list[str] = []
        ignore_file = root / IGNORE_FILE
        if ignore_file.is_file():
            user += ignore_file.read_text(errors="replace").splitlines()
        user += extra or []
        self.root = root
        # without an ignore file only the defaults apply: decide by name, no pattern matching (and no pattern
        # compiling: pathspec's regular expressions were a third of `agentsnap status`'s start-up)
        self.defaults_only = not extra and not ignore_file.is_file()
        self.spec: Any = None
        self.user_spec: Any = None
        if not self.defaults_only:
            import pathspec

            self.spec = pathspec.GitIgnoreSpec.from_lines(lines + ([] if include_secrets else list(SECRET_PATTERNS)) + user)
            #: the same rules without the secrets policy: tells "left out as a secret" from "ignored by the user"
            self.user_spec = pathspec.GitIgnoreSpec.from_lines(lines + user)
        #: what decides what is left out: a change journal's listing is good only under the same rules
        self.key = [int(include_git), int(include_secrets), user]
        self.always = {".agentsnap"}
        self.skip_git = not include_git
        self.skip_secrets = not include_secrets
        #: files the secrets policy left out of the last scan (named by snapshot and status)
        self.left_out: list[str] = []
        #: ``.git`` directories the last scan left out (``include_git`` off): git's own history - branches,
        #: stashes, the index - is not in the snapshot, and a restore does not bring it back; named, never silent
        self.git_dirs: list[str] = []

    def _git_dir(self, rel: str) -> bool:
        """Leave out ``rel``, a directory, when it is a ``.git`` and the store does not capture them; remember it."""
        if self.skip_git and is_git_dir(rel):
            self.git_dirs.append(rel)
            return True
        return False

    def ignored(self, rel: str, is_dir: bool) -> bool:
        if rel in self.always or rel.endswith("/.agentsnap"):  # a nested store or worktree link: never captured
            if is_dir and rel not in self.always:  # another tree's store: its history is not in this snapshot (said)
                self.git_dirs.append(rel)
            return True
        if not is_dir and TEMP_PREFIX in rel and rel.rsplit("/", 1)[-1].startswith(TEMP_PREFIX):
            return True
        if self.defaults_only:
            if is_dir:
                return self._git_dir(rel)
            return self._secret(rel, is_secret_file(rel))
        if is_dir and self._git_dir(rel):
            return True
        if self.spec.match_file(rel + "/" if is_dir else rel):
            if not is_dir and self.skip_secrets and not self.user_spec.match_file(rel):
                self.left_out.append(rel)
            return True
        return not is_dir and self._secret(rel, rel.endswith(KEY_SUFFIXES))

    def _secret(self, rel: str, by_name: bool) -> bool:
        """Leave out ``rel`` when the policy says so (a key file by its content) and remember it."""
        if not (self.skip_secrets and by_name):
            return False
        if rel.endswith(KEY_SUFFIXES) and not holds_private_key(self.root / rel):
            return False
        self.left_out.append(rel)
        return True


@dataclass
class CaptureStats:
    files: int = 0
    dirs: int = 0
    links: int = 0
    bytes_total: int = 0
    files_hashed: int = 0
    bytes_hashed: int = 0
    #: FIFOs, sockets and devices found in the tree: never captured, and named (a restore leaves them as they are)
    special: list[str] = field(default_factory=list)


@dataclass
class StatCache:
    """path -> [size, mtime_ns, ctime_ns, ino, mode, content id, racy]; ``tree``: the digest of the last tree
    :func:`put_tree` stored from this working tree and that tree's id (an unchanged tree is not chunked again)."""

    entries: dict[str, list[Any]] = field(default_factory=dict)
    dirty: bool = True
    tree: tuple[str, str] | None = None
    #: with a change journal (:mod:`agentsnap_core.layers.journal`): the rest of the listing the entries came from
    #: and the journal's token for it, ``{"t": [watch id, read], "ig": ignore rules, "d": {dir: mode},
    #: "l": {link: target}, "x": [left out], "m": [files with other hard links], "s": [FIFOs, sockets, devices],
    #: "g": [.git directories left out]}``
    listing: dict[str, Any] | None = None
    #: with a change journal: what the next capture of this very tree needs when nothing changed, saved beside the
    #: cache (:func:`save_tip`; set by the snapshot that stored :attr:`tree` from this cache's entries)
    tip: dict[str, Any] | None = None
    #: loaded from the resident process's memory (:data:`KEPT`): its generation and entries, which the captures'
    #: caches keep, so that :meth:`save` hands the parent only what changed (:func:`take_handoff`)
    base: tuple[str, dict[str, list[Any]]] | None = None
    #: the paths whose entries a capture made anew (every other entry of it is :attr:`base`'s own), when it knows
    changed: list[str] | None = None

    @classmethod
    def load(cls, path: Path) -> StatCache:
        if KEPT:
            kept = KEPT.get(str(path))
            if kept is not None and _marker(path) == kept.token:  # (the same store: its marker is the parent's)
                c = kept.cache  # (the parent's, as at the fork: this process's own copy of it)
                return cls(c.entries, dirty=False, tree=c.tree, listing=c.listing, base=(kept.gen, c.entries))
        return cls._read(path)

    @classmethod
    def _read(cls, path: Path) -> StatCache:
        try:
            doc = unpack(path.read_bytes(), "stat cache")
            if isinstance(doc, dict) and doc.get("v") == 1 and isinstance(doc.get("e"), dict):
                t = doc.get("t")
                tree = (t[0], t[1]) if isinstance(t, list) and len(t) == 2 and is_oid(t[0]) and is_oid(t[1]) else None
                return cls(_keys_in(doc["e"]), dirty=False, tree=tree, listing=_listing_in(doc.get("j")))
        except (OSError, AgentSnapError):
            pass
        return cls()

    def save(self, path: Path) -> None:
        if self.tip is not None:
            save_tip(path, self.tip)
        if not self.dirty and path.exists():
            return
        if HANDOFF is not None and _hand_over(path, self):
            return  # (the resident process keeps it, and writes it when its child is off)
        path.parent.mkdir(parents=True, exist_ok=True)
        self._write(path)
        if HANDOFF is not None:  # the parent loads it, to keep it for the next command on this tree
            _hand(HANDOFF, {"v": 1, "path": name_out(str(path)), "load": True})

    def _write(self, path: Path, mode: int | None = None) -> None:
        doc: dict[str, Any] = {"v": 1, "e": _keys_out(self.entries)}
        if self.tree:
            doc["t"] = list(self.tree)
        if self.listing is not None:
            doc["j"] = _listing_out(self.listing)
        write_replacing(path, pack_plain(doc), mode)


def _listing_out(j: dict[str, Any]) -> dict[str, Any]:
    return {"t": j["t"], "ig": j["ig"], "d": _keys_out(j["d"]), "l": {name_out(k): name_out(v) for k, v in j["l"].items()},
            "x": [name_out(k) for k in j["x"]], "m": [name_out(k) for k in j["m"]],
            "s": [name_out(k) for k in j["s"]], "g": [name_out(k) for k in j["g"]]}


# -- stat caches kept in memory by the resident process (cli/resident.py) -------------------------------------------
# Decoding a 100k-entry stat cache takes ~70 ms and writing it ~30 ms, in every command on such a tree. The resident
# process keeps each tree's cache in memory instead: its children inherit it at the fork (copy-on-write), and a
# child that changed it hands the parent only what changed (a few entries, the listing), which the parent applies
# before the next fork and writes to disk once no call came for a moment. Any stat cache is only a cache: one written by
# another process meanwhile or left by a parent killed before it wrote is older, and still true of the files it
# describes. What a kept cache must never outlive is its store (its entries name the store's objects): a marker file
# beside the cache holds the parent's token, and a store deleted (and made again) has none.


@dataclass
class _Kept:
    #: the token in the marker file beside the cache (:func:`_marker`): written when the parent began to keep it
    token: str
    #: changes with every hand-over applied: a child's changes apply only to the generation it inherited
    gen: str
    cache: StatCache
    #: ahead of the file on disk: to write
    unwritten: bool = False


#: in the resident process: stat cache path -> the cache it keeps (in its children: as it was at the fork)
KEPT: dict[str, _Kept] = {}
#: in a resident child: the file it hands its stat caches' changes to (the parent takes it when the child ends)
HANDOFF: str | None = None
#: in the resident process: stat cache paths to read from disk and keep
_TO_LOAD: set[str] = set()


def _marker(path: Path | str) -> str | None:
    """The token of the resident process that keeps the stat cache at ``path`` in memory, from the file beside it."""
    try:
        with open(f"{path}.kept", "rb") as f:
            return f.read(64).decode("ascii", "replace")
    except OSError:
        return None


def _hand(handoff: str, doc: dict[str, Any]) -> bool:
    try:
        with open(handoff, "ab") as f:
            f.write(pack_plain(doc))
        return True
    except OSError:
        return False


def kept_listing(cache_path: Path) -> dict[str, Any] | None:
    """(In a process that keeps stat caches) the listing kept for the stat cache at ``cache_path`` (see
    :attr:`StatCache.listing`: ``"t"`` the change journal's token, ``"d"`` the directories), or None: with one, the
    last capture of that tree found every directory it listed watched before it began, so the journal has reported
    every change made in them after that token."""
    kept = KEPT.get(str(cache_path))
    if kept is None or kept.cache.listing is None or _marker(cache_path) != kept.token:
        return None
    return kept.cache.listing


def _hand_over(path: Path, cache: StatCache) -> bool:
    """(In a resident child) give the parent what ``cache`` changed in the one it keeps; False: write it instead."""
    if cache.base is None or cache.changed is None or HANDOFF is None:
        return False
    gen, base = cache.base
    entries = cache.entries
    changed = {k: entries[k] for k in cache.changed if k in entries}  # (every other entry is the base's own)
    added = sum(1 for k in changed if k not in base)
    removed = [] if len(entries) == len(base) + added else list(base.keys() - entries.keys())
    doc = {"v": 1, "path": name_out(str(path)), "base": gen, "gen": os.urandom(8).hex(), "e": _keys_out(changed),
           "r": [name_out(k) for k in removed], "t": list(cache.tree) if cache.tree else None,
           "j": _listing_out(cache.listing) if cache.listing is not None else None}
    return _hand(HANDOFF, doc)


def take_handoff(handoff: str) -> None:
    """(In the resident process, when a child ended) apply what it handed over to the caches kept; a cache it
    changed from another generation (two commands on one tree at once) stays as the first one left it."""
    from agentsnap_core.layers.journal import take_file

    data = take_file(handoff)
    if data is None:
        return
    try:
        docs = _docs(data)
    except Exception as exc:  # noqa: BLE001 - a garbled file (a child killed while writing): nothing of it is used
        from agentsnap_core.layers.journal import _log

        _log(f"{handoff}: not used ({type(exc).__name__}); the stat caches kept are as they were")
        return
    for doc in docs:
        if not isinstance(doc, dict) or doc.get("v") != 1 or not isinstance(doc.get("path"), (str, bytes)):
            continue
        path = name_in(doc["path"])
        if doc.get("load"):
            _TO_LOAD.add(path)
            continue
        kept = KEPT.get(path)
        e, r, j, t = doc.get("e"), doc.get("r"), doc.get("j"), doc.get("t")
        if kept is None or kept.gen != doc.get("base") or not isinstance(e, dict) or not isinstance(r, list):
            continue
        listing = _listing_in(j) if j is not None else None
        if j is not None and listing is None:
            continue
        kept.cache.entries.update(_keys_in(e))
        for name in r:
            kept.cache.entries.pop(name_in(name), None)
        kept.cache.listing = listing
        kept.cache.tree = (t[0], t[1]) if isinstance(t, list) and len(t) == 2 and is_oid(t[0]) and is_oid(t[1]) else None
        kept.gen, kept.unwritten = str(doc.get("gen")), True


def _docs(data: bytes) -> list[Any]:
    import msgpack

    unpacker = msgpack.Unpacker(raw=False, strict_map_key=False, max_buffer_size=max(len(data), 1))
    unpacker.feed(data)
    return list(unpacker)


def load_kept() -> None:
    """(In the resident process, before it forks the next command) read and keep the stat caches a child wrote whole
    (it had none from here: the first command on a tree, or another process wrote the file meanwhile). Once per
    tree: from then on the children hand over what they change."""
    import gc

    while _TO_LOAD:
        path = _TO_LOAD.pop()
        KEPT.pop(path, None)
        cache = StatCache._read(Path(path))
        if not cache.entries:
            continue
        token = os.urandom(8).hex()
        try:
            # (the mode as the cache's own: this process's umask may differ)
            write_replacing(f"{path}.kept", token.encode(), os.stat(path).st_mode & 0o777)
        except OSError:
            continue
        KEPT[path] = _Kept(token, os.urandom(8).hex(), cache)
    if KEPT:
        gc.freeze()  # (what is kept lives as long as this process: the collector need not walk it again)


def settle_kept(handoff: str) -> None:
    """(In a process that serves its calls itself, e.g. the Claude Code helper, after answering one) take what the call
    handed over, keep the caches it wrote whole, write those ahead of their files."""
    take_handoff(handoff)
    load_kept()
    flush_kept()


def unwritten() -> bool:
    """Whether a cache kept is ahead of its file (:func:`flush_kept` has work)."""
    return any(kept.unwritten for kept in KEPT.values())


def flush_kept() -> None:
    """(In the resident process, when no call came for a moment) write the caches kept that are ahead of their files
    (a command forked meanwhile would share the memory the writing touches: copied, page by page). One whose
    marker is gone (its store deleted, perhaps made again) is dropped from memory, never written."""
    for path, kept in list(KEPT.items()):
        if not kept.unwritten:
            continue
        kept.unwritten = False
        if _marker(path) != kept.token:
            del KEPT[path]
            continue
        try:
            kept.cache._write(Path(path), os.stat(path).st_mode & 0o777)
        except OSError as exc:  # (the file on disk stays the older one: still true, only slower to use)
            from agentsnap_core.layers.journal import _log

            _log(f"stat cache {path} not written ({exc}); no longer kept")
            del KEPT[path]


def _tip_path(cache_path: Path) -> Path:
    return cache_path.with_name(cache_path.name + ".tip")


def make_tip(
    cache: StatCache, stats: CaptureStats, left_out: list[str], escapes: bool, git_dirs: list[str]
) -> dict[str, Any] | None:
    """The tip of a capture with a change journal, or None when the next capture could not be answered from it:
    ``{"t": journal token, "ig": ignore rules, "tree": id stored from these entries, "files", "bytes", "links",
    "esc": a link points outside the tree, "x": left out, "s": FIFOs/sockets/devices, "g": .git directories left
    out}``. Files recorded racily
    clean may be in it: the token was taken before any file was read, so a write after that read (or during it)
    is a change the journal reports after the token. Not for a tree with a file that has other hard links (written
    through a name elsewhere, no event says so: the journal's captures stat such files again every time)."""
    j = cache.listing
    if j is None or cache.tree is None or j["m"]:
        return None
    return {"v": 1, "t": j["t"], "ig": j["ig"], "tree": cache.tree[1], "files": stats.files, "bytes": stats.bytes_total,
            "links": stats.links, "esc": escapes, "x": sorted(left_out), "s": sorted(stats.special),
            "g": sorted(git_dirs)}


def save_tip(cache_path: Path, tip: dict[str, Any]) -> None:
    write_replacing(_tip_path(cache_path),
                    pack_plain({**tip, **{k: [name_out(n) for n in tip[k]] for k in ("x", "s", "g")}}))


def unchanged_tip(cache_path: Path, watch: Any, ignore: Ignore) -> dict[str, Any] | None:
    """The tip saved beside ``cache_path`` when the change journal says no directory changed since it was taken,
    under the same ignore rules: the tree is then exactly its ``tree``, and a capture needs neither the stat cache
    nor a walk (a 100k-file tree's unchanged snapshot read and rebuilt 100k entries). None otherwise."""
    if watch is None:
        return None
    try:
        tip = unpack(_tip_path(cache_path).read_bytes(), "stat cache tip")
    except (OSError, AgentSnapError):
        return None
    if not (isinstance(tip, dict) and tip.get("v") == 1 and tip.get("ig") == ignore.key and is_oid(tip.get("tree"))
            and all(isinstance(tip.get(k), int) for k in ("files", "bytes", "links")) and isinstance(tip.get("esc"), bool)
            and all(isinstance(tip.get(k), list) for k in ("x", "s", "g"))):  # (a tip saved before "g": not used)
        return None
    if watch.since(tip.get("t")) != set():  # a change since (or a token of another watch, or a broken one)
        return None
    return {**tip, **{k: [name_in(n) for n in tip[k]] for k in ("x", "s", "g")}}


def _keys_out(d: dict[str, Any]) -> dict[str | bytes, Any]:
    """``d`` with its names as stored (:func:`name_out`); the same dict when every name is UTF-8 (the usual case:
    one encode of all the names instead of one call per name)."""
    try:
        "\0".join(d).encode("utf-8")
        return d  # type: ignore[return-value]
    except UnicodeEncodeError:
        return {name_out(k): v for k, v in d.items()}


def _keys_in(d: dict[Any, Any]) -> dict[str, Any]:
    """The inverse of :func:`_keys_out`: a name that is not UTF-8 (rare, stored as bytes) back to the str os uses."""
    return d if bytes not in set(map(type, d)) else {name_in(k): v for k, v in d.items()}


def _listing_in(j: Any) -> dict[str, Any] | None:
    """A stat cache's journal listing as saved, or None when absent or not as written (then the capture walks)."""
    if not (isinstance(j, dict) and isinstance(j.get("t"), list) and isinstance(j.get("d"), dict)
            and isinstance(j.get("l"), dict) and isinstance(j.get("x"), list) and isinstance(j.get("m"), list)
            and isinstance(j.get("s"), list) and isinstance(j.get("g"), list)):  # (a listing saved before "s" or
        # "g" existed: the capture walks once)
        return None
    return {"t": j["t"], "ig": j.get("ig"), "d": _keys_in(j["d"]),
            "l": {name_in(k): name_in(v) for k, v in j["l"].items()}, "x": [name_in(k) for k in j["x"]],
            "s": [name_in(k) for k in j["s"]], "g": [name_in(k) for k in j["g"]],
            "m": {name_in(k) for k in j["m"]}}


def _tick(ns: int) -> int:
    g = TIMESTAMP_GRANULARITY_NS
    return ns if g <= 1 else ns - ns % g


def _stat_key(st: os.stat_result) -> list[Any]:
    return [st.st_size, _tick(st.st_mtime_ns), _tick(st.st_ctime_ns), st.st_ino, st.st_mode]


#: with only the default rules, a name that none of these start or end with is never ignored (the dot covers
#: .agentsnap, .git, the temp files, .env* and the dotted credential files): :func:`_scan_tree` asks
#: :meth:`Ignore.ignored` only about the rest, which keeps the per-entry work of the walk to its stat
_MAY_IGNORE_PREFIXES = (".", "id_", "credentials")
_MAY_IGNORE_SUFFIXES = (*KEY_SUFFIXES, ".p12", ".pfx")


def _scan_tree(rel_root: str, abs_root: str, ignore: Ignore) -> list[tuple[str, os.stat_result]]:
    """Every non-ignored entry below one directory (unordered; :func:`scan` sorts)."""
    out: list[tuple[str, os.stat_result]] = []
    append = out.append
    stack = [(rel_root, abs_root)]
    by_name = ignore.defaults_only
    ignored = ignore.ignored
    isdir = stat.S_ISDIR
    while stack:
        rel_dir, abs_dir = stack.pop()
        try:
            it = os.scandir(abs_dir)
        except (FileNotFoundError, NotADirectoryError):
            continue
        with it:
            for item in it:
                name = item.name
                rel = f"{rel_dir}/{name}"
                try:
                    st = item.stat(follow_symlinks=False)
                except FileNotFoundError:
                    continue
                is_dir = isdir(st.st_mode)
                if (not by_name or name.startswith(_MAY_IGNORE_PREFIXES) or name.endswith(_MAY_IGNORE_SUFFIXES)) and \
                        ignored(rel, is_dir):
                    continue
                append((rel, st))
                if is_dir:
                    stack.append((rel, item.path))
    return out


def _name(entry: os.DirEntry[str]) -> str:
    return entry.name


#: the path of a ``(path, ...)`` pair, as a sort key (C: no Python call per entry of a 100k-entry listing)
_path = itemgetter(0)
#: the content id or link target of an entry (as a key)
_ref = itemgetter(4)


def scan(root: Path, ignore: Ignore) -> list[tuple[str, os.stat_result]]:
    """``(relative path, lstat)`` of every non-ignored entry under ``root``, sorted by path.

    The top-level directories are walked in parallel threads (``lstat`` releases the GIL,
    and on large trees the walk is bound by system calls).
    """
    top = _scan_level(str(root), ignore)
    dirs = [(rel, st) for rel, st in top if stat.S_ISDIR(st.st_mode)]
    if SCAN_THREADS <= 1 or len(dirs) < 4:
        subtrees = [_scan_tree(rel, os.path.join(root, rel), ignore) for rel, _ in dirs]
    else:
        from concurrent.futures import ThreadPoolExecutor  # only for big trees: status of a small one never loads it

        with ThreadPoolExecutor(SCAN_THREADS) as pool:
            subtrees = list(pool.map(lambda d: _scan_tree(d[0], os.path.join(root, d[0]), ignore), dirs))
    out = list(top)
    for sub in subtrees:
        out.extend(sub)
    out.sort(key=_path)
    return out


def _scan_level(abs_dir: str, ignore: Ignore) -> list[tuple[str, os.stat_result]]:
    with os.scandir(abs_dir) as it:
        items = sorted(it, key=_name)
    out = []
    for item in items:
        try:
            st = item.stat(follow_symlinks=False)
        except FileNotFoundError:
            continue
        if not ignore.ignored(item.name, stat.S_ISDIR(st.st_mode)):
            out.append((item.name, st))
    return out


def _rescan(
    root: Path, ignore: Ignore, cache: StatCache, listing: dict[str, Any], changed: set[str], special: list[str],
    lost: set[str] | None = None,
) -> tuple[list[tuple[str, os.stat_result]], tuple[list[str], list[str], list[str]]]:
    """The tree from the cached listing and a change journal: only the directories ``changed`` (and directories new
    in them, whole) are read again. Returns ``(path, lstat)`` of what was read (and of the files recorded racily
    clean or with other hard links, ``lstat``-ed again), and the paths of the files, directories and links whose
    cached entries stand as they are (in the cache's order). ``lost``: the directories the journal saw an entry
    leave since the listing (None: unknown); where none of those read lost one, every cached entry of a directory
    read is among what was read again, so the cached entries that stand are all the others (no parent looked up)."""
    dirs: dict[str, int] = listing["d"]
    by_name = ignore.defaults_only
    ignored = ignore.ignored
    isdir = stat.S_ISDIR
    fresh: dict[str, os.stat_result] = {}
    read: set[str] = set()
    for d in sorted(c for c in changed if c == "" or c in dirs):
        read.add(d)
        prefix = f"{d}/" if d else ""
        try:
            it = os.scandir(os.path.join(root, d) if d else root)
        except (FileNotFoundError, NotADirectoryError):
            continue  # gone: its parent's change says so
        with it:
            for item in it:
                name = item.name
                rel = prefix + name
                try:
                    st = item.stat(follow_symlinks=False)
                except FileNotFoundError:
                    continue
                is_dir = isdir(st.st_mode)
                if (not d or not by_name or name.startswith(_MAY_IGNORE_PREFIXES)
                        or name.endswith(_MAY_IGNORE_SUFFIXES)) and ignored(rel, is_dir):
                    continue
                fresh[rel] = st
                if is_dir and rel not in dirs:  # new here: everything in it is new
                    for sub, sst in _scan_tree(rel, item.path, ignore):
                        fresh[sub] = sst
    gone = tuple(f"{d}/" for d in dirs if d.rpartition("/")[0] in read and not (d in fresh and isdir(fresh[d].st_mode)))
    # the entries recorded racily clean (flag 6), picked at C speed: one pass of two iterators, no call per entry
    recheck = set(compress(cache.entries, map(itemgetter(6), cache.entries.values()))) | listing["m"]

    def kept(p: str) -> bool:
        return p.rpartition("/")[0] not in read and not (gone and p.startswith(gone)) and p not in fresh

    out: list[tuple[str, os.stat_result]] = list(fresh.items())
    unchanged: list[list[str]] = []
    nothing_left = not gone and lost is not None and read.isdisjoint(lost)  # (edits and new files only)
    for group in (cache.entries, dirs, listing["l"]):
        names: list[str] | Iterable[str] = group
        if gone:
            names = [p for p in group if kept(p)]
        elif read and nothing_left:  # (C: a directory read still has every entry it had, each in fresh; in the
            names = list(filterfalse(fresh.__contains__, group))  # group's order: the final sort stays near-linear)
        elif read or fresh:  # (kept() without a call per entry: no directory gone)
            names = [p for p in group if p.rpartition("/")[0] not in read and p not in fresh]
        again = recheck.intersection(names)  # (C: usually a few racily clean files, or none)
        for p in again:
            try:
                out.append((p, os.lstat(os.path.join(root, p))))
            except FileNotFoundError:
                pass  # (its directory's change is in the journal: read above, or next time)
        unchanged.append(list(names) if not again else list(filterfalse(again.__contains__, names)))
    ignore.left_out.extend(p for p in listing["x"] if kept(p))
    ignore.git_dirs.extend(p for p in listing["g"] if kept(p))
    special.extend(p for p in listing["s"] if kept(p))  # (those of the directories read are found again)
    files, kept_dirs, links = unchanged
    return out, (files, kept_dirs, links)


def capture(
    root: Path,
    store: ObjectStore | None,
    ignore: Ignore,
    cache: StatCache | None = None,
    progress: Callable[[int], None] | None = None,
    watch: Any = None,
) -> tuple[list[Entry], StatCache, CaptureStats]:
    """Capture ``root``; with ``store=None`` only compute ids (used by status/diff).

    ``watch``: a change journal on ``root`` (:class:`agentsnap_core.layers.journal.Watch`, in a process that keeps
    one): when ``cache`` holds a listing it issued, only the directories changed since are read; either way the new
    cache holds this capture's listing and, where the watch covers all of it, the token for the next capture.
    """
    with bulk():  # (a 100k-entry capture builds ~300k containers: no collection finds garbage in them)
        return _capture(root, store, ignore, cache, progress, watch)


def _capture(
    root: Path,
    store: ObjectStore | None,
    ignore: Ignore,
    cache: StatCache | None,
    progress: Callable[[int], None] | None,
    watch: Any,
) -> tuple[list[Entry], StatCache, CaptureStats]:
    start_ns = _tick(time.time_ns())
    window = max(RACY_WINDOW_NS, 2 * TIMESTAMP_GRANULARITY_NS) if RACY_WINDOW_NS >= 0 else RACY_WINDOW_NS
    old = cache.entries if cache else {}
    new: dict[str, list[Any]] = {}
    entries: list[Entry] = []
    stats = CaptureStats()
    todo: list[tuple[int, str, os.stat_result]] = []
    exact = TIMESTAMP_GRANULARITY_NS <= 1  # (tests raise it to simulate coarse filesystems)
    isreg = stat.S_ISREG
    listing = cache.listing if cache is not None and watch is not None else None
    changed = watch.since(listing["t"]) if listing is not None and listing["ig"] == ignore.key else None
    token = watch.token() if watch is not None else None
    found: Iterable[tuple[str, os.stat_result]]
    as_cached: tuple[list[str], list[str], list[str]] | None = None
    if changed is not None and cache is not None and listing is not None:
        read_again, as_cached = _rescan(root, ignore, cache, listing, changed, stats.special,
                                        watch.lost_since(listing["t"]))
        read_again.sort(key=_path)  # (the order the files are hashed and stored in, as a full walk has it)
        found = read_again
    else:
        found = scan(root, ignore)
    if watch is not None:
        new_dirs: dict[str, int] = {}
        new_links: dict[str, str] = {}
        multi: set[str] = set()
    for rel, st in found:
        mode = st.st_mode
        if isreg(mode):
            if watch is not None and st.st_nlink > 1:
                multi.add(rel)
            size = st.st_size
            stats.files += 1
            stats.bytes_total += size
            hit = old.get(rel)
            if hit is not None and hit[0] == size and hit[3] == st.st_ino and hit[4] == mode and (
                (hit[1] == st.st_mtime_ns and hit[2] == st.st_ctime_ns) if exact else hit[:5] == _stat_key(st)
            ) and not hit[6]:  # (the stat key of _stat_key, compared field by field: no list per file)
                entries.append((rel, "f", mode & 0o777, size, hit[5]))
                new[rel] = hit
            else:
                todo.append((len(entries), rel, st))
                entries.append((rel, "f", mode & 0o777, st.st_size, ""))
        elif stat.S_ISLNK(mode):
            stats.links += 1
            target = os.readlink(os.path.join(root, rel))
            entries.append((rel, "l", 0o777, 0, target))
            if watch is not None:
                new_links[rel] = target
        elif stat.S_ISDIR(mode):
            stats.dirs += 1
            entries.append((rel, "d", mode & 0o777, 0, ""))
            if watch is not None:
                new_dirs[rel] = mode & 0o777
        else:  # sockets, FIFOs and devices are not captured: named (CaptureStats.special), never in silence
            stats.special.append(rel)

    def work(batch: list[tuple[int, str, os.stat_result]]) -> list[tuple[int, str, str, int, os.stat_result, bool]]:
        out = []
        for idx, rel, st in batch:
            full = os.path.join(root, rel)
            try:  # the size recorded is the size of the bytes stored, whatever the file did meanwhile
                oid, stored = content.put_file(store, full)
            except FileNotFoundError:  # deleted since the scan: not part of this snapshot
                out.append((idx, rel, "", 0, st, True))
                continue
            # re-stat: a file that changed while we read it is recorded as racy
            try:
                changed = _stat_key(os.lstat(full)) != _stat_key(st) or stored != st.st_size
            except FileNotFoundError:
                changed = True
            out.append((idx, rel, oid, stored, st, changed))
        return out

    batches: list[list[tuple[int, str, os.stat_result]]] = []
    size = 0
    for item in todo:
        if not batches or len(batches[-1]) >= 512 or size >= 16 * 1024 * 1024:
            batches.append([])
            size = 0
        batches[-1].append(item)
        size += item[2].st_size
    if len(batches) < 2 or HASH_THREADS <= 1:  # a few changed files (status, small snapshots): no thread pool
        results: Iterable[list[tuple[int, str, str, int, os.stat_result, bool]]] = map(work, batches)
        pool = None
    else:
        from concurrent.futures import ThreadPoolExecutor  # (and its logging import) only when it pays

        pool = ThreadPoolExecutor(HASH_THREADS)
        results = pool.map(work, batches)
    vanished = 0
    with pool or nullcontext():
        for result in results:
            for idx, rel, oid, stored, st, changed in result:
                if not oid:
                    stats.files -= 1
                    vanished += 1
                    continue
                path, kind, mode, _, _ = entries[idx]
                entries[idx] = (path, kind, mode, stored, oid)
                key = _stat_key(st)
                racy = changed or key[1] >= start_ns - window or key[2] >= start_ns - window
                new[rel] = key + [oid, racy]
                stats.files_hashed += 1
                stats.bytes_hashed += st.st_size
                if progress:
                    progress(st.st_size)
    if vanished:  # files deleted while the snapshot ran (their entries have no content id)
        entries = [e for e in entries if e[1] != "f" or e[4]]
    if as_cached is not None:  # (journal) the cached entries of what nothing changed in, built at C speed
        _add_unchanged(entries, new, new_dirs, new_links, stats, old, listing, as_cached)  # type: ignore[arg-type]
    unchanged = stats.files_hashed == 0 and len(new) == len(old)
    out = StatCache(new, dirty=not unchanged, tree=cache.tree if cache else None, base=cache.base if cache else None,
                    changed=[r[1] for r in todo])  # (every other entry of new is a hit: old's own)
    if watch is not None:
        missing = watch.covers(["", *new_dirs])
        if missing:  # a directory not watched before this capture began: the journal cannot vouch for it yet
            token = None
            from agentsnap_core.layers import journal

            journal.want(str(root), missing)
        if token is not None:
            out.listing = {"t": token, "ig": ignore.key, "d": new_dirs, "l": new_links, "x": list(ignore.left_out),
                           "m": multi, "s": list(stats.special), "g": list(ignore.git_dirs)}  # (files of "m" are lstat-ed by _rescan: their st says again)
            out.dirty = out.dirty or cache is None or cache.listing is None or cache.listing["t"] != token
    return entries, out, stats


def _add_unchanged(
    entries: list[Entry], new: dict[str, list[Any]], new_dirs: dict[str, int], new_links: dict[str, str],
    stats: CaptureStats, old: dict[str, list[Any]], listing: dict[str, Any],
    as_cached: tuple[list[str], list[str], list[str]],
) -> None:
    """Add the entries ``_rescan`` left as cached (files, directories, links nothing changed around) to this
    capture, then put ``entries`` in path order: with maps and zips over the cached values (no Python step per
    entry: on a 100k-file tree 10 files away, these are nearly all of them)."""
    files, dirs, links = as_cached
    hits = list(map(old.__getitem__, files))
    entries.extend(zip(files, repeat("f"), map(and_, map(itemgetter(4), hits), repeat(0o777)),
                       map(itemgetter(0), hits), map(itemgetter(5), hits), strict=False))  # (repeat: endless)
    new.update(zip(files, hits, strict=True))
    stats.files += len(files)
    stats.bytes_total += sum(map(itemgetter(0), hits))
    modes = list(map(listing["d"].__getitem__, dirs))
    entries.extend(zip(dirs, repeat("d"), modes, repeat(0), repeat(""), strict=False))
    new_dirs.update(zip(dirs, modes, strict=True))
    stats.dirs += len(dirs)
    targets = list(map(listing["l"].__getitem__, links))
    entries.extend(zip(links, repeat("l"), repeat(0o777), repeat(0), targets, strict=False))
    new_links.update(zip(links, targets, strict=True))
    stats.links += len(links)
    entries.sort(key=_path)


def is_store_dir(rel: str) -> bool:
    """Whether ``rel`` (a directory's path in the tree) names a nested agentsnap store (``sub/.agentsnap``): never
    captured, listed with the ``.git`` directories left out (``git_dirs``) and said apart from them."""
    return rel.endswith("/.agentsnap")


def split_stores(names: list[str]) -> tuple[list[str], list[str]]:
    """``names`` of directories left out as ``(.git directories, nested agentsnap stores)``."""
    return [n for n in names if not is_store_dir(n)], [n for n in names if is_store_dir(n)]


def is_git_dir(rel: str) -> bool:
    """Whether ``rel`` (a directory's path in the tree) names a ``.git`` directory."""
    return rel == ".git" or rel.endswith("/.git")


def without_git_dirs(entries: list[Entry], target: list[Entry]) -> list[Entry]:
    """``entries`` (a working tree) without the ``.git`` directories ``target`` (a snapshot's tree) does not hold
    and what is below them (a ``.git`` file, a submodule's pointer, stays): for a restore of a snapshot taken
    without them, which leaves git's own history alone (rather than deleting it as files the snapshot lacks)."""
    dirs = [e[0] for e in entries if e[1] == "d" and is_git_dir(e[0])]
    if dirs:
        held = {e[0] for e in target if e[1] == "d" and is_git_dir(e[0])}
        dirs = [d for d in dirs if d not in held]
    if not dirs:
        return entries
    below = tuple(f"{d}/" for d in dirs)
    gone = set(dirs)
    return [e for e in entries if e[0] not in gone and not e[0].startswith(below)]


def runs_git_code(rel: str) -> bool:
    """Whether ``rel`` is a file git takes commands from: a repository's ``config`` (``core.fsmonitor``, filters,
    ``core.hooksPath``, aliases...; a submodule's under ``.git/modules``, a worktree's ``config.worktree``) or a hook.
    Git runs them without being asked to (``git status`` runs the fsmonitor command), so they come back only from a
    tree this store captured itself (:meth:`Repo.captured_here`)."""
    if ".git/" not in rel:  # (most entries: a substring test, before any split; a capture with .git asks each one)
        return False
    parts = rel.split("/")
    if ".git" not in parts:
        return False
    inner = parts[parts.index(".git") + 1:]
    if not inner:
        return False
    if "hooks" in inner[:-1]:
        return not inner[-1].endswith(".sample")  # (git runs a hook by its exact name: the samples never run)
    return inner[-1] in ("config", "config.worktree") and (len(inner) == 1 or inner[0] in ("modules", "worktrees"))


def without_git_code(target: list[Entry], current: list[Entry]) -> tuple[list[Entry], list[Entry], list[str]]:
    """``(target, current, held)``: the files of ``target`` where git takes commands from (:func:`runs_git_code`)
    that differ from what ``current`` has there are taken out of both, so that a restore leaves those paths as they
    are; ``held`` names them."""
    # (every restore of a tree not captured here asks: the substring test first, inline, for the trees without .git)
    git_code = [e for e in target if ".git/" in e[0] and e[1] != "d" and runs_git_code(e[0])]
    if not git_code:
        return target, current, []
    now = {e[0]: e for e in current if ".git/" in e[0] and runs_git_code(e[0])}
    held = [e[0] for e in git_code if now.get(e[0]) != e]
    if not held:
        return target, current, []
    out = set(held)
    return [e for e in target if e[0] not in out], [e for e in current if e[0] not in out], held


def through_a_link(root: str | os.PathLike[str], rel: str) -> bool:
    """Whether a directory above ``rel`` in the tree at ``root`` is a symlink now: then ``root/rel`` is not an entry of
    the tree but a path through the link (a directory the snapshot has, made a link to elsewhere since), and what is
    there is not the tree's (neither "still here" nor "in the way")."""
    d = os.fspath(root)
    for part in rel.split("/")[:-1]:
        d = os.path.join(d, part)
        try:
            if stat.S_ISLNK(os.lstat(d).st_mode):
                return True
        except OSError:
            return False
    return False


def _in_the_way(full: str) -> str:
    """What stands at ``full`` that the working tree's capture does not hold, in words for an error."""
    try:
        mode = os.lstat(full).st_mode
    except OSError:
        return "something"
    for test, what in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a device"),
                       (stat.S_ISBLK, "a device")):
        if test(mode):
            return f"{what} (never captured)"
    return "something ignored here"


def name_out(name: str) -> str | bytes:
    """A path or link target as stored: a str when it is UTF-8, else its raw bytes (git keeps any bytes too).

    Names read from disk that are not UTF-8 arrive as str with surrogate escapes, which msgpack cannot encode.
    """
    try:
        name.encode("utf-8")
        return name
    except UnicodeEncodeError:
        return os.fsencode(name)


def name_in(name: Any) -> Any:
    """Inverse of :func:`name_out`: raw bytes come back as the str the os module uses for them."""
    return os.fsdecode(name) if isinstance(name, bytes) else name


def _stored(e: Entry) -> list[Any]:
    path, kind, mode, size, ref = e
    return [name_out(path), kind, mode, size, name_out(ref) if kind == "l" else ref]


def _tree_bytes(entries: list[Entry]) -> bytes:
    # keys in sorted order and entries already sorted by path: the plain encoding is canonical
    try:  # names that are all UTF-8 (nearly always): stored as they are, tuples pack as the lists _stored makes
        return pack_plain({"entries": entries, "v": TREE_FORMAT})
    except UnicodeEncodeError:  # a name read from disk that is not UTF-8: its raw bytes (name_out)
        return pack_plain({"entries": [_stored(e) for e in entries], "v": TREE_FORMAT})


def is_memo_tree(entries: list[Entry], memo: StatCache | None, tree: str | None) -> bool:
    """True when ``entries`` are exactly tree ``tree``, as the stat cache's memo of the last stored tree says: status
    then knows the working tree equals HEAD's without loading and comparing HEAD's tree."""
    if memo is None or memo.tree is None or tree is None or memo.tree[1] != tree:
        return False
    return objects.digest(Kind.BLOB, _tree_bytes(entries)) == memo.tree[0]


def put_tree(store: ObjectStore, entries: list[Entry], memo: StatCache | None = None) -> str:
    """Store the tree of ``entries``; with ``memo`` (the working tree's stat cache), a tree identical to the last one
    stored from it is not chunked and stored again (an unchanged snapshot: one digest instead of the chunking)."""
    raw = _tree_bytes(entries)
    if memo is None:
        return content.put_bytes(store, raw)
    digest = objects.digest(Kind.BLOB, raw)
    if memo.tree is not None and memo.tree[0] == digest and store.has(memo.tree[1]):
        return memo.tree[1]
    oid = content.put_bytes(store, raw)
    memo.tree, memo.dirty = (digest, oid), True
    return oid


#: the version of :func:`validate_entries`'s rules: a tree found valid under other rules is validated again
VALIDATION_RULES = 1


def _plain(raw: list[Any]) -> bool:
    """Whether every entry of a tree as decoded is a list of five and no name is kept as bytes (not UTF-8): then each
    is the :data:`Entry` of its fields as they are. Checked with maps over the entries (no Python step per entry)."""
    return (set(map(type, raw)) <= {list} and set(map(len, raw)) <= {5}
            and bytes not in set(map(type, map(_path, raw))) and bytes not in set(map(type, map(_ref, raw))))


def load_tree(store: ObjectStore, oid: str, validated: bool = False) -> list[Entry]:
    """Load and validate a tree; hostile entries raise :class:`UnsafeSnapshot` before anything is written.

    ``validated``: this very tree (its id, which is the hash of its bytes: a read re-hashes them) was found valid
    before under :data:`VALIDATION_RULES`; only its shape is checked again."""
    doc = content.get_value(store, oid, "world tree")
    if not isinstance(doc, dict) or "v" not in doc:
        raise ObjectCorrupt(oid, "world tree", "malformed document")
    if doc["v"] != TREE_FORMAT:
        from agentsnap_core.errors import UnsupportedFormat

        raise UnsupportedFormat(f"world tree {oid[:12]}", doc["v"], TREE_FORMAT)
    raw = doc.get("entries")
    if not isinstance(raw, list):
        raise ObjectCorrupt(oid, "world tree", "entries missing")
    if _plain(raw):  # (the usual tree: its entries checked and made at C speed)
        entries: list[Entry] = list(map(tuple, raw))  # type: ignore[arg-type]
        if not validated:
            validate_entries(entries)
        return entries
    entries = []
    append = entries.append
    for e in raw:
        if type(e) is not list or len(e) != 5:
            raise UnsafeSnapshot(repr(e)[:80], "malformed tree entry")
        path, kind, mode, size, ref = e
        if type(path) is bytes or type(ref) is bytes:  # a name that is not UTF-8, kept as its bytes (name_out)
            append((name_in(path), kind, mode, size, name_in(ref) if kind == "l" else ref))
        else:
            append((path, kind, mode, size, ref))
    if not validated:
        validate_entries(entries)
    return entries


def validate_entries(entries: list[Entry]) -> None:
    """Refuse paths that escape the root, duplicates, and entries nested under files or links.

    One pass over the entries (the common case, a sorted tree, needs no second one): this runs on every tree
    a status, diff or restore loads, so the per-entry work is a handful of C-level checks.
    """
    seen: dict[str, str] = {}
    in_order = True
    last = ""
    for path, kind, mode, size, ref in entries:
        if not isinstance(path, str) or not path:
            raise UnsafeSnapshot(repr(path), "path is not a non-empty string")
        if len(path) > MAX_PATH or "\x00" in path:
            raise UnsafeSnapshot(path[:80], "path too long or contains NUL")
        if path[0] == "/" or (len(path) > 1 and path[1] == ":"):
            raise UnsafeSnapshot(path, "absolute path")
        parts = path.split("/")
        if "" in parts or "." in parts or ".." in parts:
            raise UnsafeSnapshot(path, "path escapes the root or is not normalised")
        if 4 * max(map(len, parts)) > NAME_MAX and any(len(p.encode("utf-8", "surrogatepass")) > NAME_MAX for p in parts):
            raise UnsafeSnapshot(path[:80], f"a path component is longer than {NAME_MAX} bytes")
        if ".agentsnap" in parts:  # like git's .git: a nested store (or worktree link) would redirect commands
            raise UnsafeSnapshot(path, "'.agentsnap' (a store directory or worktree link) as a path component")
        if kind not in ("f", "l", "d"):
            raise UnsafeSnapshot(path, f"unknown entry kind {kind!r} (devices, FIFOs and hard links are refused)")
        if type(mode) is not int or not 0 <= mode <= 0o777:
            if not isinstance(mode, int) or not 0 <= mode <= 0o777:
                raise UnsafeSnapshot(path, f"bad mode {mode!r}")
        if type(size) is not int or size < 0:
            if not isinstance(size, int) or size < 0:
                raise UnsafeSnapshot(path, f"bad size {size!r}")
        if kind == "f":
            if not is_oid(ref):
                raise UnsafeSnapshot(path, "file entry without a valid content id")
        elif kind == "l" and (not isinstance(ref, str) or not ref or "\x00" in ref):
            raise UnsafeSnapshot(path, "symlink without a valid target")
        if path in seen:
            raise UnsafeSnapshot(path, "duplicate path")
        if len(parts) > 1:  # every ancestor seen so far must be a directory
            i = path.find("/")
            while i != -1:
                pk = seen.get(path[:i])
                if pk is not None and pk != "d":
                    raise UnsafeSnapshot(path, f"nested under {'symlink' if pk == 'l' else 'file'} {path[:i]!r}")
                i = path.find("/", i + 1)
        seen[path] = kind
        if in_order:
            in_order = path > last
            last = path
    if in_order:  # sorted: every ancestor came before its descendants and was checked above
        return
    # a later entry could be the parent of an earlier one when the list is unsorted
    paths = sorted(seen)
    for a, b in zip(paths, paths[1:], strict=False):
        if b.startswith(a + "/") and seen[a] != "d":
            raise UnsafeSnapshot(b, f"nested under non-directory {a!r}")



def symlink_escapes(path: str, target: str) -> bool:
    """True when a link at ``path`` (relative to a root) points outside that root."""
    if target.startswith("/"):
        return True
    depth = len(path.split("/")) - 1
    for part in target.split("/"):
        if part == "..":
            depth -= 1
            if depth < 0:
                return True
        elif part not in ("", "."):
            depth += 1
    return False


@dataclass
class Changes:
    added: list[str] = field(default_factory=list)
    modified: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    mode_changed: list[str] = field(default_factory=list)

    def empty(self) -> bool:
        return not (self.added or self.modified or self.deleted or self.mode_changed)

    def as_dict(self) -> dict[str, list[str]]:
        return {"added": self.added, "modified": self.modified, "deleted": self.deleted, "mode": self.mode_changed}


def differing(old: Iterable[Entry], new: Iterable[Entry]) -> tuple[dict[str, Entry], dict[str, Entry]]:
    """The entries of ``old`` and of ``new`` that the other does not hold as they are, by path: what a comparison
    or a restore has to look at. Found with sets of entry tuples (C speed, no Python step per entry): on a 100k-entry
    tree 10 files away, that is 20 entries to look at, not 100k."""
    a, b = set(map(tuple, old)), set(map(tuple, new))
    return {e[0]: e for e in a.difference(b)}, {e[0]: e for e in b.difference(a)}  # type: ignore[misc]


def compare(old: list[Entry], new: list[Entry], dirs: bool = False) -> Changes:
    """What changed from ``old`` to ``new``. With ``dirs``, every directory entry that differs, by its path. Without
    (what ``status`` and ``diff`` show), a directory only where nothing else says it changed, as ``path/``: one
    added or deleted with no added or deleted path below it (an empty directory: a snapshot records it and a restore
    creates or removes it), or one whose mode changed. A file or link that became a directory (or the reverse) is
    said by both sides: ``D x`` and what lies below the new ``x/`` (``x/`` itself when that is empty)."""
    a, b = differing(old, new)
    if dirs:
        return _changes(a, b)
    a_dirs = {p for p, e in a.items() if e[1] == "d"}
    b_dirs = {p for p, e in b.items() if e[1] == "d"}
    a = {p: e for p, e in a.items() if p not in a_dirs}
    b = {p: e for p, e in b.items() if p not in b_dirs}
    ch = _changes(a, b)
    alone = a_dirs ^ b_dirs
    if alone:  # added or deleted directories: listed only when no added or deleted path lies below them
        below = {q for p in ch.added + ch.deleted + sorted(alone) for q in _parents(p)}
        for p in sorted(alone - below):
            if p in b_dirs:
                ch.added.append(p + "/")
            else:
                ch.deleted.append(p + "/")
        ch.added.sort(), ch.deleted.sort()
    ch.mode_changed += [p + "/" for p in sorted(a_dirs & b_dirs)]  # both directories and differing: their mode
    ch.mode_changed.sort()
    return ch


_QUOTED = {"\n": "\\n", "\t": "\\t", "\r": "\\r", '"': '\\"', "\\": "\\\\"}


def listing(items: list[str], shown: int = 5) -> str:
    """``a, b, c, d, e and 3 more``: the first ``shown`` items of a list a line names, and how many it left out."""
    return ", ".join(items[:shown]) + (f" and {len(items) - shown} more" if len(items) > shown else "")


def shown_path(path: str) -> str:
    """``path`` as a line of output shows it: as it is, or, when it holds a control character (a newline would read
    as two paths), a quote or a backslash, or bytes that are not UTF-8 (kept as surrogates), in double quotes with
    C escapes (``"new\\nline"``, ``"lat\\351"``), as git quotes such names."""
    if path.isprintable() and '"' not in path and "\\" not in path:
        return path
    out = []
    for ch in path:
        code = ord(ch)
        if ch in _QUOTED:
            out.append(_QUOTED[ch])
        elif 0xDC80 <= code <= 0xDCFF:  # a byte that was not UTF-8 (os.fsdecode's surrogateescape)
            out.append(f"\\{code - 0xDC00:03o}")
        elif code < 0x20 or code == 0x7F or not ch.isprintable():
            out.append("".join(f"\\{b:03o}" for b in ch.encode("utf-8", "surrogatepass")))
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def _parents(path: str) -> Iterator[str]:
    """``a/b/c`` -> ``a/b``, ``a``."""
    while "/" in path:
        path = path.rsplit("/", 1)[0]
        yield path


def _changes(a: dict[str, Entry], b: dict[str, Entry]) -> Changes:
    """:class:`Changes` from the differing entries of :func:`differing` (old ``a``, new ``b``)."""
    ch = Changes()
    for p, e in b.items():
        o = a.get(p)
        if o is None:
            ch.added.append(p)
        elif o[1] != e[1] or o[4] != e[4]:
            ch.modified.append(p)
        elif o[2] != e[2]:
            ch.mode_changed.append(p)
    ch.deleted = [p for p in a if p not in b]
    ch.added.sort(), ch.modified.sort(), ch.deleted.sort(), ch.mode_changed.sort()
    return ch


_KIND_NAMES = {"f": "file", "d": "directory", "l": "symlink"}


def _is_real_dir(path: str) -> bool:
    return os.path.isdir(path) and not os.path.islink(path)


def _holds_already(path: str, entry: Entry) -> bool:
    """Whether ``path`` (something ignored where the target puts a file) is a regular file holding exactly that
    file's bytes: restoring over it changes no byte, so it is not in the way (a snapshot taken before an ignore rule
    now covering its files restores; it was refused with "something ignored here is in the way")."""
    _path, kind, _mode, size, ref = entry
    if kind != "f":
        return False
    try:
        st = os.lstat(path)
        return stat.S_ISREG(st.st_mode) and st.st_size == size and content.put_file(None, path)[0] == ref
    except OSError:
        return False


def _temp_beside(full: str) -> str:
    """The temp file a restore writes ``full`` through: the name after a prefix, cut to 255 *bytes* (the limit of a
    name; a name of 240 bytes of UTF-8 - 80 CJK characters - was cut by characters and never restored)."""
    name = os.fsencode(f"{TEMP_PREFIX}{os.getpid()}-") + os.fsencode(os.path.basename(full))
    return os.path.join(os.path.dirname(full), os.fsdecode(name[:255]))


def materialize(
    store: ObjectStore,
    root: Path,
    target: list[Entry],
    current: list[Entry],
    allow_external_symlinks: bool = False,
    paths: list[str] | None = None,
    progress: Callable[[int], None] | None = None,
    validated: bool = False,
) -> Changes:
    """Make the directory ``root`` (whose non-ignored content is ``current``) equal ``target``.

    Ignored paths are never touched. Every path is checked before anything is written.
    With ``paths``, only entries at or below those paths are restored. Only what differs is written: an entry
    ``current`` already has (same kind, content and mode) costs nothing. ``validated``: ``target`` came from
    :func:`load_tree` (already validated; not checked again).
    """
    if not validated:
        validate_entries(target)
    if not allow_external_symlinks:
        for path, kind, _, _, ref in target:
            if kind == "l" and symlink_escapes(path, ref):
                raise UnsafeSnapshot(
                    path, f"symlink points outside the restore root ({ref!r}); pass allow_external_symlinks to permit"
                )

    def selected(p: str) -> bool:
        return paths is None or any(p == s or p.startswith(s + "/") or s.startswith(p + "/") for s in paths)

    # only the entries that differ are looked at below: an entry equal to the current one needs nothing, and where
    # either side differs at a path, both sides' entries there are in these maps (``cur``: what is there now)
    cur, tgt = differing(current if paths is None else (e for e in current if selected(e[0])),
                         target if paths is None else (e for e in target if selected(e[0])))
    changes = _changes(cur, tgt)
    order = sorted(tgt)
    # 0. every object the restore needs is present, verifies and has the size the tree says: nothing touched yet.
    # What was read (verified) is kept for step 2, up to RESTORE_KEEP_BYTES: a small object lies in a compressed
    # block of a pack, and reading it twice decompressed its block twice (half the file writing of a 10-file restore)
    kept: dict[str, list[bytes]] = {}
    budget = RESTORE_KEEP_BYTES
    for p in order:
        _path, kind, _mode, size, ref = tgt[p]
        c = cur.get(p)
        if kind == "f" and not (c is not None and c[1] == "f" and c[4] == ref):
            pieces = check_content(store, p, ref, size, keep=size <= budget)
            if pieces is not None:
                kept[p] = pieces
                budget -= size
    # 0b. nothing ignored stands where the target puts something (a planted link, an ignored file): every
    # non-ignored path is in ``cur``, so anything else that exists there is the user's and must not be removed
    for p in order:
        if p in cur:
            continue
        full = os.path.join(root, p)
        if (os.path.lexists(full) and not (tgt[p][1] == "d" and _is_real_dir(full))
                and not _holds_already(full, tgt[p]) and not through_a_link(root, p)):  # (a link step 1 replaces)
            exc = AgentSnapError(
                f"cannot restore {p!r}: {_in_the_way(full)} is in the way (the snapshot has a "
                f"{_KIND_NAMES[tgt[p][1]]} there); nothing was changed: move it and re-run"
            )
            exc.nothing_changed = True  # type: ignore[attr-defined]  # no rollback needed (Repo.restore)
            raise exc
    # 1. remove what the target does not have, or has with another kind (deepest first)
    gone = [p for p, old in cur.items() if (t := tgt.get(p)) is None or t[1] != old[1]]
    # a read-only directory (chmod a-w vendor/) whose entries change is opened for its owner meanwhile, before
    # anything is removed: not running as root, its unlink and the temp files beside it failed, and the restore
    # rolled back. Each gets its snapshot's mode (or its own, when the snapshot has it so) at the end
    opened = _open_directories(str(root), [*gone, *order])
    done = False
    try:
        changes = _materialize_changes(store, root, cur, tgt, gone, order, kept, changes, progress)
        done = True
    finally:
        for d, old_mode in opened.items():  # (a restore that failed leaves them as they were: its rollback follows)
            try:
                os.chmod(os.path.join(root, d) if d else root, tgt[d][2] if done and d in tgt else old_mode)
            except FileNotFoundError:
                pass  # (removed by the restore)
    return changes


def _open_directories(root: str, paths: list[str]) -> dict[str, int]:
    """Make each existing, real parent directory of ``paths`` that its owner cannot write writable and searchable
    for the restore; return ``{dir: its mode}``. A directory this process may not chmod (another user's) is refused
    before anything is changed."""
    opened: dict[str, int] = {}
    seen: set[str] = set()
    for p in paths:
        parent = p.rsplit("/", 1)[0] if "/" in p else ""
        if parent in seen:
            continue
        seen.add(parent)
        full = os.path.join(root, parent) if parent else root
        try:
            st = os.lstat(full)
        except OSError:
            continue  # (made by the restore)
        if not stat.S_ISDIR(st.st_mode) or (parent and through_a_link(root, parent + "/x")):
            continue
        mode = stat.S_IMODE(st.st_mode)
        if mode & 0o300 == 0o300 or os.access(full, os.W_OK | os.X_OK):
            continue
        try:
            os.chmod(full, mode | 0o300)
        except PermissionError:
            for d, m in opened.items():
                os.chmod(os.path.join(root, d) if d else root, m)
            exc = AgentSnapError(f"cannot restore into {parent or '.'!r}: the directory is read-only and not this "
                                 "user's to make writable; nothing was changed")
            exc.nothing_changed = True  # type: ignore[attr-defined]  # no rollback needed (Repo.restore)
            raise exc from None
        opened[parent] = mode
    return opened


def _materialize_changes(store: ObjectStore, root: Path, cur: dict[str, Entry], tgt: dict[str, Entry], gone: list[str],
                         order: list[str], kept: dict[str, list[bytes]], changes: Changes,
                         progress: Callable[[int], None] | None) -> Changes:
    """Steps 1 and 2 of :func:`materialize` (its checks done, the directories it writes in opened)."""
    for p in sorted(gone, key=lambda s: s.count("/"), reverse=True):
        old, t = cur[p], tgt.get(p)
        full = os.path.join(root, p)
        if old[1] == "d":
            try:
                os.rmdir(full)
            except OSError:
                if t is not None:
                    raise AgentSnapError(f"cannot replace directory {p!r}: it holds ignored files") from None
        else:
            try:
                os.unlink(full)
            except FileNotFoundError:
                pass
    # 2. create directories, files and links in path order; what is already there as the target has it is skipped
    real_dirs: set[str] = set()  # parents checked to be real directories (a restore writes ~ what differs)
    touched_dirs: list[str] = []
    for p in order:
        path, kind, mode, size, ref = tgt[p]
        c = cur.get(p)
        if c is not None and c[1] == kind and c[2] == mode and (kind == "d" or c[4] == ref):
            continue  # present with the same kind, mode and content (the stat walk just saw it there)
        full = os.path.join(root, p)
        _check_parents(root, p, real_dirs)
        if kind == "d":
            if (c is None or c[1] != "d") and not _is_real_dir(full):
                os.mkdir(full, 0o700)
            os.chmod(full, mode | 0o700)
            touched_dirs.append(p)
        elif kind == "l":
            if c is not None and c[1] == "l" and c[4] == ref:
                continue
            if os.path.lexists(full):
                os.unlink(full)
            os.symlink(ref, full)
        else:
            if c is not None and c[1] == "f" and c[4] == ref:
                if c[2] != mode:
                    os.chmod(full, mode)
                continue
            tmp = _temp_beside(full)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
            try:
                with os.fdopen(fd, "wb") as fh:
                    n = 0
                    holes = False
                    for piece in kept.pop(p, None) or content.iter_chunks(store, ref):  # stop at the declared size
                        n += len(piece)
                        if n > size:
                            break
                        if len(piece) >= SPARSE_MIN and piece == bytes(len(piece)):
                            fh.seek(len(piece), os.SEEK_CUR)  # a run of zeros stays a hole (sparse files)
                            holes = True
                        else:
                            fh.write(piece)
                    if holes and n <= size:
                        fh.truncate(n)
                if n != size:
                    raise ObjectCorrupt(ref, f"{size} bytes", f"{n}{'+' if n > size else ''} bytes",
                                        "file size differs from tree")
                os.chmod(tmp, mode)
                os.replace(tmp, full)
            except BaseException:  # a corrupt object, a full disk: no temp file left behind
                try:
                    os.unlink(tmp)
                except FileNotFoundError:
                    pass
                raise
            if progress:
                progress(size)
    # directory modes last (a read-only dir must be filled first); directories left as they were keep theirs
    for p in reversed(touched_dirs):
        os.chmod(os.path.join(root, p), tgt[p][2])
    return changes


#: bytes of file content a restore keeps in memory between checking the objects and writing the files (beyond it,
#: a file's content is read again when written)
RESTORE_KEEP_BYTES = 64 << 20


def check_content(store: ObjectStore, path: str, ref: str, size: int, keep: bool = False) -> list[bytes] | None:
    """Read the content of tree entry ``path`` through (every chunk verified); raise naming ``path``. ``keep``:
    return the verified pieces (else None)."""
    try:
        n = 0
        pieces: list[bytes] = []
        for piece in content.iter_chunks(store, ref):
            n += len(piece)
            if n > size:
                break
            if keep:
                pieces.append(piece)
        if n != size:
            raise ObjectCorrupt(ref, f"{size} bytes", f"{n}{'+' if n > size else ''} bytes", "file size differs from tree")
        return pieces if keep else None
    except AgentSnapError as exc:  # same class (callers can act on it), the message names the file
        exc.args = (f"cannot restore {path!r}: {exc}; nothing was changed",)
        exc.nothing_changed = True  # type: ignore[attr-defined]  # no rollback needed (Repo.restore)
        raise


def _check_parents(root: Path, rel: str, real_dirs: set[str] | None = None) -> None:
    parts = rel.split("/")[:-1]
    cur = str(root)
    for part in parts:
        cur = os.path.join(cur, part)
        if real_dirs is not None and cur in real_dirs:
            continue
        try:
            st = os.lstat(cur)
        except FileNotFoundError:
            raise UnsafeSnapshot(rel, f"parent {part!r} is not a directory entry of the tree") from None
        if not stat.S_ISDIR(st.st_mode):
            raise UnsafeSnapshot(rel, f"parent {cur!r} is not a real directory (a symlink would lead outside)")
        if real_dirs is not None:
            real_dirs.add(cur)
