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
        found = git_dirs(root)
        rel = os.path.relpath(store_dir, found[0]) if found is not None else ".."
        if found is not None and not rel.startswith(".."):  # (a store outside the git work tree is not git's)
            common = found[1]
            line = "/" + Path(rel).as_posix() + "/"
            exclude = common / "info" / "exclude"
            text = exclude.read_text() if exclude.exists() else ""
            if line not in text.splitlines():
                exclude.parent.mkdir(parents=True, exist_ok=True)
                with open(exclude, "a") as f:
                    f.write(("" if not text or text.endswith("\n") else "\n") + f"# agentsnap's store\n{line}\n")
                out["exclude"] = str(exclude)
    except OSError as exc:
        out["problem"] = f"{exc.strerror or exc}: {exc.filename or store_dir}"
    return out


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
