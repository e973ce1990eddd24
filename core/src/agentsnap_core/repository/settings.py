"""The store settings a user changes with ``agentsnap config`` (kept in the store's config table, read when a
repository is opened): each one's kind, default and meaning, and the check of a new value. Settings agentsnap
manages itself (``store.url``, ``crypto.*``, ``remotes``) can be read, not changed, here."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from agentsnap_core.errors import InvalidInput

if TYPE_CHECKING:
    from agentsnap_core.repository.repo import Repo


@dataclass(frozen=True)
class Setting:
    kind: str  #: "bool" (true/false), "switch" (on/off), "int" (bytes), "lines" (gitignore patterns)
    default: str
    help: str


SETTINGS: dict[str, Setting] = {
    "world.include_git": Setting(
        "bool", "false", "capture .git directories (git's history: branches, stashes, the index) in snapshots; a "
        "restore of a snapshot taken without them leaves the .git directories as they are"),
    "world.trust_git": Setting(
        "bool", "false", "write git's config and hooks (.git/config, .git/hooks/*) from snapshots this store did not "
        "capture itself (pulled, cloned): they name commands git runs on its own (core.fsmonitor at git status, "
        "hooks), so only for a store whose every writer you trust; without it they are left as they were and said"),
    "world.include_secrets": Setting(
        "bool", "false", "capture credential files (.env, private keys) in snapshots (docs/SECURITY.md)"),
    "world.ignore": Setting(
        "lines", "", "gitignore-style patterns kept in the store, not in the tree (one per line), beside "
        ".agentsnapignore"),
    "world.vault": Setting(
        "switch", "on", "keep the secret files a snapshot leaves out encrypted in the local store, so a restore "
        "brings them back"),
    "du.warn_bytes": Setting("int", str(1 << 30), "'agentsnap du' warns when the store is larger than this (bytes)"),
}

#: settings agentsnap keeps for itself: shown by ``config KEY``, never changed by it
MANAGED = {
    "store.url": "Repo.init(store=...) or the Claude Code plugin's store_url",
    "store.project": "'agentsnap init --store-dir' (the tree a store outside it was made for)",
    "remotes": "'agentsnap remote add/remove'",
    "crypto.encrypt": "agentsnap_core.format.crypto.enable_encryption",
    "crypto.key_id": "agentsnap_core.format.crypto.enable_encryption",
    "crypto.signing_key": "agentsnap_core.format.crypto.enable_signing",
    "crypto.trusted_keys": "agentsnap_core.format.crypto.trust",
}

_TRUE = ("true", "yes", "on", "1")
_FALSE = ("false", "no", "off", "0")


def check(key: str, value: str) -> str:
    """The value to store for ``key`` (normalised), or :class:`InvalidInput` saying what is wrong."""
    setting = SETTINGS.get(key)
    if setting is None:
        if key in MANAGED:
            raise InvalidInput(f"'{key}' is managed by agentsnap (set through {MANAGED[key]}), not by 'agentsnap config'")
        raise InvalidInput(f"unknown setting '{key}'; the settings are: {', '.join(sorted(SETTINGS))}")
    v = value.strip()
    if setting.kind in ("bool", "switch"):
        if v.lower() not in _TRUE + _FALSE:
            raise InvalidInput(f"'{key}' is {'true or false' if setting.kind == 'bool' else 'on or off'}, not {value!r}")
        yes = v.lower() in _TRUE
        return ("true" if yes else "false") if setting.kind == "bool" else ("on" if yes else "off")
    if setting.kind == "int":
        if not v.isdigit():
            raise InvalidInput(f"'{key}' is a number of bytes, not {value!r}")
        return str(int(v))
    lines = [line for line in value.splitlines() if line.strip()]
    import pathspec

    for line in lines:
        try:
            pathspec.GitIgnoreSpec.from_lines([line])
        except Exception as exc:  # noqa: BLE001 - pathspec raises several kinds for a bad pattern
            raise InvalidInput(f"'{key}': {line!r} is not a gitignore pattern ({exc})") from None
    return "\n".join(lines)


def current(repo: Repo, key: str) -> str | None:
    """The value stored for ``key`` (None: not set, the default applies)."""
    value = repo.refs.get_config(key)
    return value if value not in (None, "") else None


def change(repo: Repo, key: str, value: str | None) -> str:
    """Set ``key`` to ``value`` (checked, normalised; nothing is written when it is refused) or back to its default
    (``value`` None); return the value now in effect."""
    if value is None:
        check(key, SETTINGS[key].default if key in SETTINGS else "")  # (an unknown or managed key: the same refusal)
        repo.refs.set_config(key, "")
        return SETTINGS[key].default
    stored = check(key, value)
    repo.refs.set_config(key, stored)
    return stored
