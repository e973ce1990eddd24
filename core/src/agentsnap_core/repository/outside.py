"""A store kept outside its working tree (``agentsnap init --store-dir DIR``), found again whatever the tree goes
through.

A store inside the tree (``.agentsnap/``) goes with the tree: ``rm -rf`` of the project, ``find . -delete``,
``git clean -ffdx`` - what an agent running shell commands may do - delete every snapshot with the files they were
meant to bring back. With ``--store-dir`` the store lives elsewhere and the tree holds only a one-line link file,
``.agentsnap`` (the linked-worktree marker: ``{"store": ..., "worktree": "_"}``). The link is also recorded under the
user's data directory (``$XDG_DATA_HOME`` or ``~/.local/share``, ``agentsnap/links/<hash of the tree's path>``), so a
command run in the tree after the link went with the files finds the store again, makes the link again and says so.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from agentsnap_core.repository import gitshield

LINK_NAME = ".agentsnap"  #: (repo.STORE_DIR and repo.PRIMARY: repo imports this module, not the other way)
PRIMARY = "_"
#: the store's config key naming the tree it was made for (a second tree is refused while that one links to it)
PROJECT_KEY = "store.project"


def registry() -> Path:
    """Where links are recorded: ``<user data dir>/agentsnap/links``."""
    base = os.environ.get("XDG_DATA_HOME")
    return (Path(base).expanduser() if base else Path.home() / ".local" / "share") / "agentsnap" / "links"


def _entry(root: Path) -> Path:
    return registry() / hashlib.sha256(str(root).encode("utf-8", "surrogateescape")).hexdigest()[:32]


def _write(path: Path, text: str) -> None:
    """Write ``path`` atomically (a file a crash leaves half-written is never read as the link)."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def link(root: Path, store: Path) -> dict[str, str]:
    """Make ``root``'s link file to ``store`` and record it in the registry; keep the link out of git. Returns what
    :func:`gitshield.shield` returns (``exclude`` when listed now, ``problem`` when that could not be done)."""
    _write(root / LINK_NAME, json.dumps({"store": str(store), "worktree": PRIMARY}) + "\n")
    remember(root, store)
    try:
        listed = gitshield.exclude(root, root / LINK_NAME)
    except OSError as exc:
        return {"problem": f"{exc.strerror or exc}: {exc.filename or root}"}
    return {"exclude": listed} if listed else {}


def remember(root: Path, store: Path) -> None:
    """Record in the registry that the tree ``root`` is kept by ``store`` (outside it)."""
    entry = _entry(root)
    entry.parent.mkdir(parents=True, exist_ok=True)
    _write(entry, json.dumps({"root": str(root), "store": str(store)}) + "\n")


def recall(start: Path) -> tuple[Path, Path] | None:
    """``(tree, store)`` recorded for ``start`` or the nearest directory above it whose store still exists."""
    for d in (start, *start.parents):
        try:
            doc = json.loads(_entry(d).read_text())
        except (OSError, ValueError):
            continue
        if isinstance(doc, dict) and doc.get("root") == str(d) and isinstance(doc.get("store"), str) \
                and (Path(doc["store"]) / "format.json").is_file():
            return d, Path(doc["store"])
    return None


def linked_to(root: Path, store: Path) -> bool:
    """Whether ``root`` holds a link file naming ``store`` (that tree still uses it)."""
    try:
        info = json.loads((root / LINK_NAME).read_text())
        return Path(info["store"]).resolve() == store.resolve()
    except (OSError, ValueError, KeyError, TypeError):
        return False


def other_tree(project: str | None, root: Path, store: Path) -> str | None:
    """The tree ``store`` was made for (its ``store.project`` value ``project``) when that is not ``root`` and still
    links to it - a second tree must not share it - else None."""
    if project and project != str(root) and linked_to(Path(project), store):
        return project
    return None
