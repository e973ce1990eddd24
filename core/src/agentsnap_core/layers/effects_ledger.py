"""The effects ledger: an append-only, HMAC-chained log of tool calls (see docs/EFFECTS.md).

The ledger follows real time, not snapshot time: it lives beside the store (not inside a
snapshot), only ever grows, and every snapshot records the ledger length and head it saw.

Entry ``i`` is a canonical msgpack map ``body`` plus ``mac_i = HMAC-SHA256(key, tag | i | mac_{i-1} | body)``;
a *seal* ``(count, head, HMAC(key, count | head))`` is rewritten in the same transaction as every
append, so dropping trailing entries is detected even after the last snapshot. The key never enters
the store: ``AGENTSNAP_EFFECTS_KEY`` (hex or text), ``AGENTSNAP_EFFECTS_KEY_FILE``, or a 0600 file in
the user's config directory, created on first use.

Storage is behind :class:`LedgerStore` (four methods) so other stores (PostgreSQL) can hold it;
the embedded default is :class:`SqliteLedgerStore` (``.agentsnap/effects.sqlite``, WAL,
``synchronous=FULL``: an append is on disk when it returns).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentsnap_core.errors import AgentSnapError
from agentsnap_core.format import content
from agentsnap_core.format.encoding import pack, pack_value, unpack
from agentsnap_core.format.files import write_replacing
from agentsnap_core.stores.ledger import LEDGER_FILE, LedgerStore, SqliteLedgerStore

if TYPE_CHECKING:
    from agentsnap_core.repository.repo import Repo

KEY_ENV = "AGENTSNAP_EFFECTS_KEY"
KEY_FILE_ENV = "AGENTSNAP_EFFECTS_KEY_FILE"
ENTRY_FORMAT = 1
_TAG = b"agentsnap-effects/1\0"
_ZERO = b"\0" * 32
#: results whose msgpack form is larger than this are stored as content in the object store
INLINE_RESULT_BYTES = 64 * 1024
POLICIES = ("allow", "block", "defer")


class EffectKeyMissing(AgentSnapError):
    """The ledger must be extended but the HMAC key that signs it is not available."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(
            f"cannot sign the effects ledger: {reason}; set {KEY_ENV} (or {KEY_FILE_ENV}) to the key the "
            "ledger was started with (share it through your secret manager)"
        )


# ---------------------------------------------------------------------------------------------- key
def key_path() -> Path:
    """Where the key file lives: ``$AGENTSNAP_EFFECTS_KEY_FILE`` or ``<config dir>/agentsnap/effects.key``."""
    explicit = os.environ.get(KEY_FILE_ENV)
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "agentsnap" / "effects.key"


def _parse_key(text: str, where: str) -> bytes:
    text = text.strip()
    try:
        raw = bytes.fromhex(text) if len(text) >= 32 and len(text) % 2 == 0 else b""
    except ValueError:
        raw = b""
    raw = raw or text.encode()
    if len(raw) < 16:
        raise AgentSnapError(f"the effects key from {where} is shorter than 16 bytes; use e.g. 64 hex characters")
    return raw


def load_key(create: bool = False) -> bytes | None:
    """The HMAC key, or None when there is none (``create`` makes a 0600 key file)."""
    env = os.environ.get(KEY_ENV)
    if env:
        return _parse_key(env, KEY_ENV)
    path = key_path()
    try:
        st = path.stat()
    except FileNotFoundError:
        if not create:
            return None
        from agentsnap_core.format.crypto import write_key_file

        path.parent.mkdir(parents=True, exist_ok=True)
        write_key_file(path, secrets.token_hex(32) + "\n", 0o600)  # (whole, or a concurrent creator's: never half)
        return load_key(False)
    if st.st_mode & 0o077:
        raise AgentSnapError(f"effects key file {path} is readable by others; run: chmod 600 {path}")
    return _parse_key(path.read_text(), str(path))


def key_id(key: bytes) -> str:
    """A public fingerprint of the key (names it in entries; reveals nothing about it)."""
    return hmac.new(key, b"agentsnap-effects-key-id", hashlib.sha256).hexdigest()[:16]


def entry_mac(key: bytes, index: int, prev: bytes, body: bytes) -> bytes:
    return hmac.new(key, _TAG + index.to_bytes(8, "big") + prev + body, hashlib.sha256).digest()


def seal_mac(key: bytes, count: int, head: bytes) -> bytes:
    return hmac.new(key, _TAG + b"seal" + count.to_bytes(8, "big") + head, hashlib.sha256).digest()


# ---------------------------------------------------------------------------------------------- storage
# (the row storage lives with the stores: agentsnap_core.stores.ledger)


def store_for(repo: Repo) -> LedgerStore:
    """The ledger storage of a repository's store (a store may offer its own via ``effects_ledger()``)."""
    own = getattr(repo.store, "effects_ledger", None)
    if callable(own):
        return own()  # type: ignore[no-any-return]
    cached = getattr(repo, "_effects_ledger_store", None)
    if cached is None:
        cached = SqliteLedgerStore(repo.store_dir / LEDGER_FILE)
        repo._effects_ledger_store = cached  # type: ignore[attr-defined]
    return cached  # type: ignore[no-any-return]


# ---------------------------------------------------------------------------------------------- keys / positions
def position_key(lineage: str, step: int, tool: str, ordinal: int) -> str:
    """The idempotency key of the ``ordinal``-th call of ``tool`` in ``step`` of ``lineage``."""
    return f"{lineage}/{step}/{tool}#{ordinal}"


def user_key(key: str) -> str:
    return f"user:{key}"


@dataclass
class KeyState:
    """The folded history of one idempotency key (real effects only)."""

    key: str
    first: int  #: index of the first entry naming the key
    status: str = "none"  #: intent (in doubt) / done / failed / retry
    intent: dict[str, Any] | None = None
    outcome: dict[str, Any] | None = None  #: the result / resolve entry that settled it
    entries: list[int] = field(default_factory=list)


@dataclass
class Deferred:
    """A deferred effect: recorded in a fork, to run for real when the branch is merged or promoted."""

    lineage: str
    key: str
    entry: dict[str, Any]
    status: str = "deferred"  #: deferred / applied / conflict
    target: str | None = None
    detail: str = ""

    @property
    def first(self) -> int:
        return int(self.entry["i"])


@dataclass
class LineageInfo:
    lineage: str
    branch: str
    parent: str
    cutoff: int  #: entries of the parent before this index are inherited
    policy: str
    snapshot: str | None


class Ledger:
    """An in-memory, incrementally synced view of a :class:`LedgerStore` plus appending."""

    def __init__(self, store: LedgerStore, repo: Repo | None = None) -> None:
        self.store = store
        self.repo = repo
        self.entries: list[dict[str, Any]] = []
        self.macs: list[bytes] = []
        self.keys: dict[str, KeyState] = {}
        self.deferred: dict[tuple[str, str], Deferred] = {}
        self.lineages: dict[str, LineageInfo] = {}
        self.branch_lineage: dict[str, str] = {}
        self.policies: dict[str, str] = {}
        self.notes: list[dict[str, Any]] = []
        self._lock = threading.RLock()

    @classmethod
    def for_repo(cls, repo: Repo) -> Ledger:
        """The repository's ledger view, shared by its sessions (each sync reads only new entries)."""
        store = store_for(repo)
        cached: Ledger | None = getattr(repo, "_effects_ledger", None)
        if cached is None or cached.store is not store:
            cached = cls(store, repo)
            repo._effects_ledger = cached  # type: ignore[attr-defined]
        return cached

    # ------------------------------------------------------------------ reading
    def sync(self) -> Ledger:
        """Read entries appended since the last sync (by any process)."""
        with self._lock:
            for body, mac in self.store.read(len(self.entries)):
                i = len(self.entries)
                entry = dict(_decode(body, i))
                entry["i"] = i
                self.entries.append(entry)
                self.macs.append(mac)
                self._fold(entry)
        return self

    def _fold(self, e: dict[str, Any]) -> None:
        kind, i = e.get("kind"), e["i"]
        if kind in ("intent", "result", "resolve"):
            st = self.keys.get(e["key"])
            if st is None:
                st = self.keys[e["key"]] = KeyState(e["key"], i)
            st.entries.append(i)
            if kind == "intent":
                st.status, st.intent, st.outcome = "intent", e, None
            elif kind == "result":
                st.status, st.outcome = ("done" if e.get("ok") else "failed"), e
            else:
                st.status, st.outcome = ("done" if e.get("action") == "done" else "retry"), e
        elif kind == "defer":
            self.deferred[(e["lineage"], e["key"])] = Deferred(e["lineage"], e["key"], e)
        elif kind == "applied":
            d = self.deferred.get((e["lineage"], e["key"]))
            if d is not None:
                d.status, d.target, d.detail = e.get("status", "applied"), e.get("target"), e.get("detail", "")
        elif kind == "fork":
            lineage = fork_lineage(e, i)
            parent = e["parent"]
            self.lineages[lineage] = LineageInfo(lineage, e["branch"], parent, i, e.get("policy", "defer"), e.get("snapshot"))
            self.branch_lineage[e["branch"]] = lineage
        elif kind == "policy":
            self.policies[e["lineage"]] = e["policy"]
        elif kind == "note":
            self.notes.append(e)

    def lineage_of(self, branch: str) -> str:
        """The lineage id of a branch: ``branch@i`` when fork entry ``i`` created it, else the branch name."""
        return self.branch_lineage.get(branch, branch)

    def policy_of(self, lineage: str) -> str:
        if lineage in self.policies:
            return self.policies[lineage]
        info = self.lineages.get(lineage)
        return info.policy if info else "allow"

    def parent_of(self, lineage: str) -> str | None:
        info = self.lineages.get(lineage)
        return info.parent if info else None

    def lookup(self, lineage: str, key: str, position: tuple[int, str, int] | None) -> KeyState | Deferred | None:
        """What the ledger knows about ``key`` as seen from ``lineage`` (own entries, then inherited ones).

        A fork inherits every effect its ancestors *started* before the fork was made (real time).
        """
        st = self.keys.get(key)
        if st is not None:
            return st
        d = self.deferred.get((lineage, key))
        if d is not None:
            return d
        cutoff = 1 << 62
        info = self.lineages.get(lineage)
        while info is not None:
            cutoff = min(cutoff, info.cutoff)
            parent = info.parent
            pkey = position_key(parent, *position) if position else key
            pst = self.keys.get(pkey)
            if pst is not None and pst.first < cutoff:
                return pst
            pd = self.deferred.get((parent, pkey))
            if pd is not None and pd.first < cutoff:
                return pd
            info = self.lineages.get(parent)
        return None

    # ------------------------------------------------------------------ writing
    def signing_key(self) -> bytes:
        """The key to extend this ledger with; refuses a key other than the one that signed it."""
        return _signing_key(len(self.entries) or self.store.count(), self.entries[-1].get("kid") if self.entries else None)

    def try_append(self, record: dict[str, Any]) -> dict[str, Any] | None:
        """Append ``record`` if nobody appended since the last :meth:`sync`; return the entry or None."""
        done = self.try_append_many([record])
        return done[0] if done else None

    def try_append_many(self, records: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
        """Append ``records`` in order if nobody appended since the last :meth:`sync`; the entries appended, or None.

        A store with ``append_many`` (SQLite, PostgreSQL) takes them all in one transaction, or none; one without
        (S3: a conditional write per entry) takes them one by one, and this returns the prefix it took.
        """
        with self._lock:
            taken = _write_chained(self.store, self.signing_key(), len(self.entries),
                                   self.macs[-1] if self.macs else _ZERO, records)
            for entry, mac in taken:  # each entry a new dict (``{**record, ...}``), as the old single append
                self.entries.append(entry)
                self.macs.append(mac)
                self._fold(entry)
            return [entry for entry, _ in taken] or None

    def append(self, record: dict[str, Any]) -> dict[str, Any]:
        """Append ``record`` (retrying after concurrent appends)."""
        return self.append_many([record])[0]

    def append_many(self, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Append ``records`` in order, in one store transaction where the store has one (retrying after
        concurrent appends, which may then land between them); the entries."""
        out: list[dict[str, Any]] = []
        while len(out) < len(records):
            self.sync()
            before = len(self.entries)
            got = self.try_append_many(records[len(out) :])
            if got:
                out += got
                continue
            if len(self.sync().entries) == before:  # refused, yet no other writer appended: retrying cannot help
                raise AgentSnapError(
                    f"the effects ledger's store refused entry #{before} although it holds {before} entries and no "
                    f"other writer appended; nothing was appended. The ledger store is inconsistent: run "
                    f"'agentsnap verify'"
                )
        return out

    def put_result(self, value: Any) -> dict[str, Any]:
        """``{"result": value}`` inline, or ``{"result_ref": content id}`` for large values (made durable); either way
        the value's maps keep their order (a replayed result is the one the tool returned, not one with sorted keys)."""
        data = pack_value(value)
        if len(data) <= INLINE_RESULT_BYTES or self.repo is None:
            return {"result": value}
        oid = content.put_bytes(self.repo.objects, data)
        self.repo.objects.barrier()
        return {"result_ref": oid}

    def get_result(self, outcome: dict[str, Any] | None) -> Any:
        if not outcome:
            return None
        if "result_ref" in outcome:
            if self.repo is None:
                raise AgentSnapError("a stored effect result lives in the object store; open the ledger through a Repo")
            return unpack(content.get_bytes(self.repo.objects, outcome["result_ref"]), "effect result")
        return outcome.get("result")

    def blob_ids(self) -> list[str]:
        """Object ids of results kept in the object store (gc keeps them)."""
        return [e["result_ref"] for e in self.entries if isinstance(e.get("result_ref"), str)]

    # ------------------------------------------------------------------ views
    def head(self) -> str | None:
        return self.macs[-1].hex() if self.macs else None

    def binding(self) -> dict[str, Any]:
        """What a snapshot records: how long the ledger was and its head, when it was taken."""
        return {"count": len(self.entries), "head": self.head(), "kid": self.entries[-1].get("kid") if self.entries else None}

    def rows(self, upto: int | None = None) -> list[dict[str, Any]]:
        """One row per effect (real keys and deferred ones) with its status, in ledger order."""
        out: list[dict[str, Any]] = []
        limit = len(self.entries) if upto is None else upto
        for st in self.keys.values():
            if st.first >= limit:
                continue
            idx = [j for j in st.entries if j < limit]
            status = "none"
            intent = None
            outcome = None
            for j in idx:
                e = self.entries[j]
                if e["kind"] == "intent":
                    status, intent, outcome = "in-doubt", e, None
                elif e["kind"] == "result":
                    status, outcome = ("done" if e.get("ok") else "failed"), e
                else:
                    status, outcome = ("done" if e.get("action") == "done" else "retry"), e
            if status == "in-doubt" and intent is not None and _alive(intent) and upto is None:
                status = "intent"
            intent = intent or self.entries[idx[0]]
            out.append(_row(st.key, status, intent, outcome, st.first))
        for d in self.deferred.values():
            if d.first >= limit:
                continue
            status = d.status if upto is None else "deferred"
            row = _row(d.key, status, d.entry, None, d.first)
            row["lineage"] = d.lineage
            if d.target:
                row["target"] = d.target
            out.append(row)
        return sorted(out, key=lambda r: r["index"])


def _row(key: str, status: str, intent: dict[str, Any], outcome: dict[str, Any] | None, first: int) -> dict[str, Any]:
    return {
        "key": key,
        "status": status,
        "tool": intent.get("tool"),
        "class": intent.get("cls"),
        "lineage": intent.get("lineage"),
        "digest": intent.get("digest"),
        "index": first,
        "time": intent.get("time"),
        "error": (outcome or {}).get("error"),
    }


def _alive(intent: dict[str, Any]) -> bool:
    """True when the process that wrote an intent still runs on this host (the call may be in flight)."""
    if intent.get("host") != socket.gethostname() or not isinstance(intent.get("pid"), int):
        return False
    if intent["pid"] == os.getpid():
        return False
    try:
        os.kill(intent["pid"], 0)
    except (ProcessLookupError, PermissionError, OSError):
        return False
    return True


# ---------------------------------------------------------------------------------------------- snapshots
CORE_PAYLOAD = "agentsnap-effects"


#: where :func:`bind_snapshot` puts what :func:`~agentsnap_core.layers.effects.on_merge` did (see :func:`merge_reports`)
_MERGE_REPORTS: ContextVar[list[dict[str, Any]] | None] = ContextVar("agentsnap_merge_reports", default=None)


@contextmanager
def merge_reports() -> Iterator[list[dict[str, Any]]]:
    """Collect the reports of the deferred effects a merge snapshot made in this block ran (applied, failed, not
    run again...), for the merge to say them: they run once, inside :meth:`Repo.snapshot`, which returns a snapshot."""
    sink: list[dict[str, Any]] = []
    token = _MERGE_REPORTS.set(sink)
    try:
        yield sink
    finally:
        _MERGE_REPORTS.reset(token)


def bind_snapshot(
    repo: Repo,
    manifest_layers: dict[str, Any],
    target_ref: str | None,
    parents: list[str] | None = None,
    meta: dict[str, Any] | None = None,
) -> None:
    """Bind a snapshot to the ledger: its ``effects`` layer record gets the count + head it saw.

    Called by :meth:`Repo.snapshot`. A payload given by the caller (an adapter's view of its effects) is
    kept as it is; the binding lives in the manifest's layer record (``count``, ``head``, ``kid``,
    ``branch``, ``lineage``). A finished merge snapshot (two parents, ``meta["merge"]``) first applies
    the deferred effects of the merged branch (:func:`agentsnap_core.layers.effects.on_merge`).
    """
    branch = target_ref[len("refs/heads/") :] if target_ref and target_ref.startswith("refs/heads/") else None
    meta = meta or {}
    if parents and len(parents) == 2 and "merge" in meta and not meta.get("merge_pending"):
        from agentsnap_core.layers.effects import on_merge

        report = on_merge(repo, parents[0], parents[1], branch)
        sink = _MERGE_REPORTS.get()
        if sink is not None:
            sink.append(report)
    store = store_for(repo)
    given = manifest_layers.get("effects")
    if store.count() == 0 and given is None:
        return
    binding, lineages = binding_view(repo, store)
    lineage = lineages.get(branch, branch) if branch else None
    payload = content.get_value(repo.objects, given["content"], "effects layer") if given else None
    if given is None or (isinstance(payload, dict) and payload.get("format") == CORE_PAYLOAD):
        core = {"format": CORE_PAYLOAD, "ledger": binding, "branch": branch, "lineage": lineage}
        rec: dict[str, Any] = {"content": content.put_value(repo.objects, core)}
    else:
        rec = dict(given)
    rec.update(binding)
    rec.update({"branch": branch, "lineage": lineage})
    manifest_layers["effects"] = rec


def _signing_key(count: int, last_kid: str | None) -> bytes:
    """The key to extend a ledger of ``count`` entries whose last was signed by ``last_kid`` (made if it is empty)."""
    key = load_key(create=count == 0)
    if key is None:
        raise EffectKeyMissing(f"no key in {KEY_ENV} and no key file at {key_path()}")
    if count and last_kid not in (None, key_id(key)):
        raise EffectKeyMissing(f"the ledger is signed with key {last_kid}, the available key is {key_id(key)}")
    return key


def _write_chained(store: LedgerStore, key: bytes, start: int, prev: bytes,
                   records: list[dict[str, Any]]) -> list[tuple[dict[str, Any], bytes]]:
    """Write ``records`` as entries ``start``, ``start + 1``... chained after MAC ``prev``; the ``(entry, mac)``
    the store took: all or none where it has ``append_many``, else the prefix it took one by one (none when
    another writer appended since ``start`` was read)."""
    kid = key_id(key)
    made: list[tuple[dict[str, Any], bytes, bytes, bytes]] = []  # (entry, body, mac, seal after it)
    for k, record in enumerate(records):
        i = start + k
        body_map = {**record, "v": ENTRY_FORMAT, "i": i, "kid": kid, "time": record.get("time", time.time())}
        body = pack_value(body_map)  # (an inline result keeps its maps' order; the MAC covers these bytes)
        prev = entry_mac(key, i, prev, body)
        seal = pack({"count": i + 1, "head": prev, "kid": kid, "mac": seal_mac(key, i + 1, prev)})
        made.append((body_map, body, prev, seal))
    many = getattr(store, "append_many", None)
    if many is not None and len(made) > 1:
        return [(entry, mac) for entry, _, mac, _ in made] if many(start, [(b, m) for _, b, m, _ in made], made[-1][3]) else []
    taken: list[tuple[dict[str, Any], bytes]] = []
    for entry, body, mac, seal in made:
        if not store.append(start + len(taken), body, mac, seal):
            break
        taken.append((entry, mac))
    return taken


def _lineage_in(lineages: dict[str, str]) -> Callable[[str], str]:
    """``lineage_of`` for the branch lineages :func:`binding_view` folded (a branch never forked: its own name)."""
    return lambda branch: lineages.get(branch, branch)


def append_forks(repo: Repo, records: Callable[[Callable[[str], str]], list[dict[str, Any]]]) -> None:
    """Append the entries ``records(lineage_of)`` makes (``lineage_of(branch)``: a branch's lineage id) after the
    ledger's last entry, reading only the entries appended since the last snapshot or fork of this store
    (:func:`binding_view`), not the whole ledger as :meth:`Ledger.sync` does in a new process: a fork's cost stays
    flat as an agent's ledger grows. Another writer appending meanwhile: read again and append after it, as
    :meth:`Ledger.append_many` does."""
    cached: Ledger | None = getattr(repo, "_effects_ledger", None)
    store = store_for(repo)
    if cached is not None and cached.store is store and cached.entries:  # this process folds it already
        cached.sync()
        cached.append_many(records(cached.lineage_of))
        return
    todo: list[dict[str, Any]] | None = None
    while True:
        binding, lineages = binding_view(repo, store)
        count, head = binding["count"], binding["head"]
        if todo is None:
            todo = records(_lineage_in(lineages))
        taken = _write_chained(store, _signing_key(count, binding["kid"]), count,
                               bytes.fromhex(head) if head else _ZERO, todo)
        todo = todo[len(taken) :]  # a store without transactions may take a prefix: the rest goes after it
        if not todo:
            return
        if not taken and store.count() == count:  # refused, yet no other writer appended: retrying cannot help
            raise AgentSnapError(
                f"the effects ledger's store refused entry #{count} although it holds {count} entries and no other "
                f"writer appended; nothing was appended. The ledger store is inconsistent: run 'agentsnap verify'")


def _decode(body: bytes, index: int) -> dict[str, Any]:
    """Ledger entry ``index`` as stored (a map), or an error saying which."""
    entry = unpack(body, f"effects ledger entry #{index}")
    if not isinstance(entry, dict):
        raise AgentSnapError(f"effects ledger entry #{index} is not a map; run 'agentsnap verify'")
    return entry


def fork_lineage(entry: dict[str, Any], index: int) -> str:
    """The lineage id a fork entry at ``index`` gives its branch."""
    return f"{entry['branch']}@{index}"


#: in the store directory: what :func:`binding_view` folded of the ledger so far (a cache: deleted, it is rebuilt)
BINDING_CACHE = "effects-binding.msgpack"


def binding_view(repo: Repo, store: LedgerStore) -> tuple[dict[str, Any], dict[str, str]]:
    """What a snapshot binds to: the ledger's :meth:`Ledger.binding` and each forked branch's lineage id, reading
    only the entries appended since the last snapshot of this store (not the whole ledger at every snapshot: with
    20k entries that was ~0.2 s a snapshot).

    The fold so far is kept in :data:`BINDING_CACHE` with the MAC of its last entry; it is used only when the
    ledger still has that MAC at that index (the entries before it are then the ones folded: each MAC chains all
    before it), else the whole ledger is read again."""
    path = Path(repo.store_dir) / BINDING_CACHE
    start, head, kid, lineages = 0, None, None, {}
    try:
        doc = unpack(path.read_bytes(), "effects binding cache")
        if (isinstance(doc, dict) and isinstance(doc.get("n"), int) and doc["n"] > 0 and isinstance(doc.get("head"), str)
                and isinstance(doc.get("b"), dict)):
            start, head, kid, lineages = doc["n"], doc["head"], doc.get("kid"), dict(doc["b"])
    except (OSError, AgentSnapError):
        pass
    rows = store.read(start - 1) if start else []
    if start and (not rows or rows[0][1].hex() != head):  # not the ledger it was folded from: fold it all
        start, head, kid, lineages = 0, None, None, {}
    rows = rows[1:] if start else store.read(0)
    for j, (body, mac) in enumerate(rows):
        entry = _decode(body, start + j)
        if entry.get("kind") == "fork":
            lineages[entry["branch"]] = fork_lineage(entry, start + j)
        head, kid = mac.hex(), entry.get("kid")
    count = start + len(rows)
    if rows:
        try:
            write_replacing(path, pack({"n": count, "head": head, "kid": kid, "b": lineages}))
        except OSError:
            pass  # (a read-only store: folded again next time)
    return {"count": count, "head": head, "kid": kid}, lineages


# ---------------------------------------------------------------------------------------------- verify
def verify_ledger(repo: Repo, key: bytes | None = None, *, use_env_key: bool = True) -> dict[str, Any]:
    """Check the chain, the seal and every snapshot's binding.

    Returns ``{"status": ok|failed|unverifiable|empty, "entries", "problems": [{"entry", "error"}], "reason"}``.
    Without the key the HMACs cannot be checked (status ``unverifiable``) but the bindings still are.
    """
    store = store_for(repo)
    rows = store.read(0)
    problems: list[dict[str, Any]] = []
    out: dict[str, Any] = {"status": "ok", "entries": len(rows), "problems": problems, "reason": ""}
    if key is None and use_env_key:
        try:
            key = load_key(False)
        except AgentSnapError as exc:
            out["reason"] = str(exc)
    kids: set[str] = set()
    bodies: list[dict[str, Any] | None] = []
    for i, (body, _mac) in enumerate(rows):
        try:
            doc = unpack(body, f"effects ledger entry #{i}")
            if not isinstance(doc, dict):
                raise AgentSnapError("not a map")
            bodies.append(doc)
            kids.add(str(doc.get("kid")))
            if doc.get("i") != i:
                problems.append({"entry": i, "error": f"entry #{i} says it is #{doc.get('i')} (reordered or inserted)"})
        except AgentSnapError as exc:
            bodies.append(None)
            problems.append({"entry": i, "error": f"entry #{i} cannot be decoded ({exc}): edited"})
    checkable = key is not None and (not kids or key_id(key) in kids)
    if key is not None and not checkable:
        out["reason"] = f"the ledger is signed with key {sorted(kids)[0]}, the available key is {key_id(key)}"
    if key is None and not out["reason"]:
        out["reason"] = f"no effects key: set {KEY_ENV} or put the key file at {key_path()}"
    if checkable and key is not None:
        prev = _ZERO
        for i, (body, mac) in enumerate(rows):
            want = entry_mac(key, i, prev, body)
            if not hmac.compare_digest(want, mac):
                doc = bodies[i] or {}
                what = f"{doc.get('kind', '?')} {doc.get('key') or doc.get('branch') or ''}".strip()
                problems.append({"entry": i, "error": f"entry #{i} ({what}) fails its HMAC: edited, reordered or inserted"})
            prev = mac
        _check_seal(store.seal(), rows, key, problems)
    _check_bindings(repo, rows, problems)
    problems.sort(key=lambda p: (p["entry"] if isinstance(p.get("entry"), int) else 1 << 62))
    if not rows and not problems:
        out["status"] = "empty"
    elif problems:
        out["status"] = "failed"
    elif not checkable:
        out["status"] = "unverifiable"
    return out


def _check_seal(seal: bytes | None, rows: list[tuple[bytes, bytes]], key: bytes, problems: list[dict[str, Any]]) -> None:
    n = len(rows)
    if seal is None:
        if n:
            problems.append({"entry": n - 1, "error": "the ledger seal is missing"})
        return
    try:
        doc = unpack(seal, "effects ledger seal")
        count, head, mac = int(doc["count"]), bytes(doc["head"]), bytes(doc["mac"])
    except (AgentSnapError, KeyError, TypeError, ValueError):
        problems.append({"entry": max(n - 1, 0), "error": "the ledger seal cannot be decoded: edited"})
        return
    if not hmac.compare_digest(seal_mac(key, count, head), mac):
        problems.append({"entry": max(n - 1, 0), "error": "the ledger seal fails its HMAC: edited"})
        return
    if count > n:
        problems.append({"entry": n, "error": f"entries #{n}..#{count - 1} are missing: the seal records {count} entries, the ledger has {n} (truncated)"})
    elif count < n:
        problems.append({"entry": count, "error": f"entries #{count}..#{n - 1} are not covered by the seal (appended without the key)"})
    elif n and not hmac.compare_digest(rows[-1][1], head):
        problems.append({"entry": n - 1, "error": f"entry #{n - 1} is not the head the seal records (replaced)"})


def _check_bindings(repo: Repo, rows: list[tuple[bytes, bytes]], problems: list[dict[str, Any]]) -> None:
    n = len(rows)
    seen: set[tuple[int, str]] = set()
    for snap in _all_manifests(repo):
        rec = snap[1].get("layers", {}).get("effects")
        if not isinstance(rec, dict) or not isinstance(rec.get("count"), int):
            continue
        count, head = rec["count"], rec.get("head")
        if (count, str(head)) in seen:
            continue
        seen.add((count, str(head)))
        if count > n:
            problems.append({"entry": n, "error": f"entries #{n}..#{count - 1} are missing: snapshot {snap[0][:12]} saw {count} entries (truncated)"})
        elif count > 0 and rows[count - 1][1].hex() != head:
            problems.append({"entry": count - 1, "error": f"entry #{count - 1} differs from the head snapshot {snap[0][:12]} recorded"})


def _all_manifests(repo: Repo) -> Iterator[tuple[str, dict[str, Any]]]:
    for row in repo.refs.list_snapshots():
        try:
            yield row.id, repo.manifest(row.id)
        except AgentSnapError:
            continue
