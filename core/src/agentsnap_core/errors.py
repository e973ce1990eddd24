"""The errors agentsnap raises.

One root, :class:`AgentSnapError`; subclasses exist only where a caller can act on them.
Every message says what happened and, where it can, what to do next.
"""

from __future__ import annotations


class Terminated(KeyboardInterrupt):
    """SIGTERM to a command (a process manager, ``timeout``, a hook runner stopping it): handled as Ctrl-C is - it
    stops, removes what it was half-way through writing, says what it left - and the command exits 143."""


class AgentSnapError(Exception):
    """Root of every error agentsnap raises on purpose."""


class StoreNotFound(AgentSnapError):
    def __init__(self, path: str) -> None:
        self.path = path
        super().__init__(f"no agentsnap store found at or above {path!r}; run 'agentsnap init' first")


class StoreGone(AgentSnapError):
    """The store directory (or its index) an open store handle uses was deleted or replaced since it was opened:
    what it wrote now would go into deleted files, or half into another store."""

    def __init__(self, path: str, what: str = "") -> None:
        self.path = path
        super().__init__(
            what or f"the store {path} was deleted or replaced while it was open here; nothing more is written to it. "
            "Open the store again (a new Repo / Client) to go on"
        )


class UnsupportedFormat(AgentSnapError):
    def __init__(self, what: str, version: object, supported: object) -> None:
        self.what, self.version, self.supported = what, version, supported
        super().__init__(
            f"{what} has format version {version!r}, this agentsnap understands {supported!r}; "
            "upgrade agentsnap to read it"
        )


class ObjectMissing(AgentSnapError):
    def __init__(self, oid: str) -> None:
        self.oid = oid
        super().__init__(f"object {oid} is missing from the store; run 'agentsnap verify'")


class ObjectCorrupt(AgentSnapError):
    def __init__(self, oid: str, expected: str, got: str, reason: str = "digest mismatch") -> None:
        self.oid, self.expected, self.got, self.reason = oid, expected, got, reason
        if reason == "digest mismatch" and not _is_digest(expected):  # a schema error: what it should be, what is wrong
            self.reason = f"malformed {expected}"
            super().__init__(f"object {oid} is corrupt (malformed {expected}: {got}); run 'agentsnap verify'")
        elif got == "?":
            super().__init__(f"object {oid} is corrupt ({reason}); run 'agentsnap verify'")
        else:
            super().__init__(f"object {oid} is corrupt ({reason}: expected {expected}, got {got})")


class EncryptedObject(AgentSnapError):
    def __init__(self, oid: str) -> None:
        self.oid = oid
        super().__init__(
            f"object {oid[:12]} is encrypted; set AGENTSNAP_ENCRYPTION_KEY (or AGENTSNAP_ENCRYPTION_KEY_FILE) "
            "to the store's key to read it"
        )


class UntrustedSnapshot(AgentSnapError):
    def __init__(self, oid: str, reason: str) -> None:
        self.oid, self.reason = oid, reason
        super().__init__(f"snapshot {oid[:12]} is not signed by a trusted key ({reason}); nothing was changed")


class UnknownSnapshot(AgentSnapError):
    def __init__(self, spec: str) -> None:
        self.spec = spec
        super().__init__(f"unknown snapshot, branch or tag: {spec!r} (see 'agentsnap log --all')")


class HistoryTooShort(UnknownSnapshot):
    """``NAME~N`` where NAME is known but its first-parent history has fewer than N earlier snapshots, or
    ``NAME^N`` where NAME has fewer than N parents (``nth``)."""

    def __init__(self, spec: str, base: str, earlier: int, nth: int = 0) -> None:
        self.spec = spec
        if nth:
            said = (f"{base} has no parent" if earlier == 0 else
                    f"{base} has {earlier} parent{'s' if earlier != 1 else ''}, not {nth}")
            AgentSnapError.__init__(self, f"{spec!r}: {said} ('agentsnap show {base}' lists them)")
            return
        AgentSnapError.__init__(
            self, f"{spec!r}: {base} has {'no' if earlier == 0 else f'only {earlier}'} earlier snapshot"
            f"{'s' if earlier != 1 else ''} ('agentsnap log {base}' lists them)")


class AmbiguousId(AgentSnapError):
    def __init__(self, prefix: str, candidates: list[str]) -> None:
        self.prefix, self.candidates = prefix, candidates
        shown = ", ".join(c[:12] for c in candidates[:5])
        super().__init__(f"short id {prefix!r} is ambiguous ({shown}); give more characters")


class AmbiguousName(AmbiguousId):
    """A name that is a branch and a tag (or a remote-tracking branch) at different snapshots: which one a restore
    took could not be told from the command, so neither is taken."""

    def __init__(self, name: str, found: list[tuple[str, str]]) -> None:
        self.name, self.found = name, found
        kinds = {"refs/heads/": "branch", "refs/tags/": "tag", "refs/remotes/": "remote-tracking branch"}

        def said(ref: str, oid: str) -> str:
            prefix = next((p for p in kinds if ref.startswith(p)), None)
            return f"{kinds[prefix]} {ref[len(prefix):]} (at {oid[:12]})" if prefix else f"ref {ref} (at {oid[:12]})"

        AgentSnapError.__init__(
            self, f"{name!r} names both " + " and ".join(said(ref, oid) for ref, oid in found)
            + "; say which: " + " or ".join(ref for ref, _ in found))
        self.prefix, self.candidates = name, [oid for _, oid in found]


class RefConflict(AgentSnapError):
    def __init__(self, name: str, expected: str | None, actual: str | None) -> None:
        self.name, self.expected, self.actual = name, expected, actual
        super().__init__(
            f"ref {name} moved while you worked (expected {_short(expected)}, found {_short(actual)}); "
            "another writer won the race - nothing was lost, re-run the command"
        )


class RefExists(AgentSnapError):
    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(f"ref {name} already exists; pick another name or delete it first")


class InvalidRefName(AgentSnapError):
    def __init__(self, name: str, reason: str) -> None:
        self.name = name
        super().__init__(f"invalid name {name!r}: {reason}")


class UnsafeSnapshot(AgentSnapError):
    def __init__(self, path: str, reason: str) -> None:
        self.path, self.reason = path, reason
        super().__init__(f"refusing unsafe snapshot entry {path!r}: {reason}; nothing was written")


class TargetNotEmpty(AgentSnapError):
    def __init__(self, path: str) -> None:
        self.path = path
        super().__init__(f"restore target {path!r} exists and is not empty; choose an empty or new directory")


class TreeBusy(AgentSnapError):
    """Another process is snapshotting or restoring this working tree; retry when it is done."""

    def __init__(self, root: str, holder: str, waited: float = 0.0) -> None:
        self.root, self.holder = root, holder
        after = f" (still after waiting {waited:g} s)" if waited else ""
        super().__init__(
            f"another agentsnap process ({holder or 'unknown'}) is working on the tree {root}{after}; "
            "wait for it to finish and re-run"
        )


class InvalidInput(AgentSnapError):
    """A value given by the user cannot be used (the message says which and why)."""


def _is_digest(value: str) -> bool:
    return len(value) == 64 and all(c in "0123456789abcdef" for c in value)


def _short(oid: str | None) -> str:
    return "nothing" if oid is None else oid[:12]
