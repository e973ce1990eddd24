"""Keep a store inside a git work tree out of git's way: not added by ``git add -A``, not deleted by ``git clean``.

A store made by ``agentsnap init`` in a git project is ``.agentsnap/``, an untracked directory: ``git add -A`` then
committed the whole store (its packs and index) into the project's history, and ``git clean -fdx`` - which agents
run to get a clean build - deleted every snapshot. git itself leaves two things alone: paths its exclude file lists
(``add``, ``status``), and nested repositories (``clean`` removes an untracked directory holding a ``.git`` only when
told ``-f`` twice). So the store gets both: a line in the repository's ``info/exclude`` (local, never committed) and
a minimal ``.git`` marker (``HEAD``, ``objects/``, ``refs/`` - what git checks - and a ``description`` saying why).
"""

from __future__ import annotations

import os
from pathlib import Path

MARKER_NOTE = ("Not a repository of yours: this marker makes 'git clean -fdx' leave the agentsnap store alone, as git "
               "does for nested repositories ('git clean -ffdx' still deletes it). Made by agentsnap init.\n")


def shield(root: Path, store_dir: Path) -> dict[str, str]:
    """Give ``store_dir`` (the store of the work tree ``root``) the marker, and list it in the exclude file of the
    git repository ``root`` lies in, if any. Returns what was done: ``{"marker": path, "exclude": path}`` (each only
    when made now) and ``{"problem": text}`` when a step could not be done (said, never silent)."""
    out: dict[str, str] = {}
    marker = store_dir / ".git"
    try:
        if not (marker / "HEAD").exists():
            for sub in ("objects", "refs"):
                (marker / sub).mkdir(parents=True, exist_ok=True)
            (marker / "description").write_text(MARKER_NOTE)
            (marker / "HEAD").write_text("ref: refs/heads/agentsnap-store\n")
            out["marker"] = str(marker)
        listed = exclude(root, store_dir, "/")
        if listed:
            out["exclude"] = listed
    except OSError as exc:
        out["problem"] = f"{exc.strerror or exc}: {exc.filename or store_dir}"
    return out


def exclude(root: Path, path: Path, suffix: str = "") -> str | None:
    """List ``path`` (``suffix`` "/": a directory) in the exclude file of the git repository ``root`` lies in, if it
    lies in one and is not listed yet; return the exclude file's path when a line was added (OSError: not done)."""
    found = git_dirs(root)
    rel = os.path.relpath(path, found[0]) if found is not None else ".."
    if found is None or rel.startswith(".."):  # (a path outside the git work tree is not git's)
        return None
    line = "/" + Path(rel).as_posix() + suffix
    excludes = found[1] / "info" / "exclude"
    text = excludes.read_text() if excludes.exists() else ""
    if line in text.splitlines():
        return None
    excludes.parent.mkdir(parents=True, exist_ok=True)
    with open(excludes, "a") as f:
        f.write(("" if not text or text.endswith("\n") else "\n") + f"# agentsnap's store\n{line}\n")
    return str(excludes)


def keep_out(root: Path, store_dir: Path) -> dict[str, str]:
    """What opening a store does: the store of ``root`` (its own ``.agentsnap/``, not a linked worktree's) gets what
    :func:`shield` gives, if it lacks it - a store made before this protection existed, or before ``git init`` ran
    above it. Both halves matter there: the marker alone would make ``git add -A`` fail ("'.agentsnap/' does not have
    a commit checked out"), as git refuses a nested repository without a commit. A step that cannot be done now (a
    read-only or full disk) is left for a later command and not reported: ``init`` reports it."""
    if store_dir != root / ".agentsnap":
        return {}
    done = shield(root, store_dir)
    done.pop("problem", None)
    return done


def git_dirs(root: Path) -> tuple[Path, Path] | None:
    """``(work tree top, common git directory)`` of the git repository ``root`` lies in, or None. A linked worktree
    or a submodule (``.git`` is a file, ``gitdir: ...``) has its exclude file in the common directory."""
    for top in (root, *root.parents):
        dot = top / ".git"
        if dot.is_dir():
            gitdir = dot
        elif dot.is_file():
            try:
                first = dot.read_text().splitlines()[0]
            except (OSError, IndexError, UnicodeDecodeError):
                return None
            if not first.startswith("gitdir:"):
                return None
            gitdir = (top / first[len("gitdir:") :].strip()).resolve()
        else:
            continue
        common = gitdir
        try:
            common = (gitdir / (gitdir / "commondir").read_text().strip()).resolve()
        except (OSError, UnicodeDecodeError):
            pass
        return top, common
    return None
