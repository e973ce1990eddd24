"""What a destructive command reaches that a snapshot of the project cannot bring back.

Two questions the hook asks before promising an undo: would the command delete the plugin's own
store (``rm -rf ~``, ``rm -rf ~/.local/share``, ``find / -delete``), and does it destroy something
outside the project (an absolute path elsewhere, a database through a SQL client)? Either way the
user is asked instead of being told "undo with". Standard library only.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path

from .matcher import Finding, _split, _tokens, _unwrap

_GLOB = "*?["
#: rules whose operands name the files they destroy
_PATH_RULES = {"rm", "shred", "find-delete", "truncate", "in-place-edit", "overwrite", "rsync-delete", "dd", "redirect-overwrite"}


def _resolve(word: str, cwd: str) -> Path | None:
    """The path a shell word names, cut at the first glob character; ``None`` when it depends on a variable."""
    home = str(Path.home())
    word = word.replace("${HOME}", home).replace("$HOME", home)
    if "$" in word or "`" in word:
        return None
    for i, ch in enumerate(word):
        if ch in _GLOB:
            word = word[:i].rsplit("/", 1)[0] if "/" in word[:i] else "."
            break
    word = os.path.expanduser(word) if word.startswith("~") else word
    return Path(os.path.normpath(os.path.join(cwd, word or ".")))


def _words(command: str) -> list[list[str]]:
    try:
        return [_unwrap(cmd)[0] for cmd in _split(_tokens(command))]
    except ValueError:
        return [command.split()]


def deletes_store(command: str, cwd: str, store: Path) -> Path | None:
    """The operand of ``command`` that is the store or one of its parents, if any."""
    for words in _words(command):
        for word in words[1:]:
            if word.startswith("-") and word != "-":
                continue
            path = _resolve(word.split("=", 1)[1] if word.startswith("of=") else word, cwd)
            if path is not None and (path == store or path in store.parents):
                return path
    return None


def _operands(finding: Finding) -> list[str]:
    if finding.rule == "redirect-overwrite":
        return [finding.command[2:]]
    try:
        words = shlex.split(finding.command)
    except ValueError:
        return []
    if finding.rule == "dd":
        return [w[3:] for w in words if w.startswith("of=")]
    operands = [w for w in words[1:] if not w.startswith("-")]
    if finding.rule in ("overwrite", "rsync-delete"):
        return operands[-1:]
    if finding.rule == "find-delete":
        ops = []
        for w in words[1:]:
            if w.startswith(("-", "(", "!")):
                break
            ops.append(w)
        return ops or ["."]
    if finding.rule == "in-place-edit":
        return operands[1:]  # the first operand is the script
    return operands


def unrestorable(findings: list[Finding], cwd: str, root: Path) -> list[str]:
    """What the command destroys outside ``root`` (the snapshot holds ``root`` only), in words."""
    return destroyed(findings, cwd, root)[0]


def destroyed(findings: list[Finding], cwd: str, root: Path) -> tuple[list[str], list[Path]]:
    """(what the command destroys outside ``root``, in words; the paths inside ``root`` it names to destroy)."""
    out: list[str] = []
    inside: list[Path] = []
    for f in findings:
        if f.rule == "sql-drop":
            out.append("a database (DROP/TRUNCATE/DELETE through a SQL client)")
            continue
        here = cwd if f.where == "" else f.where  # (after a cd, a script's folder: where it runs)
        if f.rule == "git-clean" and here is not None:
            removed = git_clean_would_remove(f.command, here)
            if removed is None:  # cannot be told: ask rather than promise an undo of what it takes
                out.append(f"what `{f.command[:80]}` removes (git's dry run of the same options failed)")
                continue
            inside += [p for p in removed if p == root or root in p.parents]
            continue
        if f.rule not in _PATH_RULES:
            continue
        for word in _operands(f):
            if here is None and not word.startswith(("/", "~", "$HOME", "${HOME}")):
                out.append(f"{word} (after a cd to a directory that cannot be told)")
                continue
            path = _resolve(word, here or cwd)
            if path is None or str(path).startswith("/dev/"):
                continue
            if path != root and root not in path.parents:
                out.append(str(path))
            else:
                inside.append(path)
    return list(dict.fromkeys(out)), list(dict.fromkeys(inside))


def git_clean_would_remove(command: str, cwd: str) -> list[Path] | None:
    """What ``git clean -f...`` (``command``) would remove, from git's own dry run of the same options (``-n``).

    The snapshot holds what agentsnap captures, not what git tracks: a folder ``.agentsnapignore`` names that git
    does not track is deleted by ``git clean -fd`` and comes back from no snapshot. None when git cannot tell.
    """
    import subprocess

    try:
        words = shlex.split(command)
    except ValueError:
        return None
    if "clean" not in words:
        return None
    at = words.index("clean")
    before = [w for w in words[1:at]]
    args: list[str] = ["-n"]
    for w in words[at + 1:]:
        if w in ("--force", "--interactive", "-i"):
            continue
        if w.startswith("-") and not w.startswith("--") and len(w) > 1:
            w = "-" + "".join(c for c in w[1:] if c not in "fi")
            if w == "-":
                continue
        args.append(w)
    try:
        proc = subprocess.run(["git", *before, "clean", *args], cwd=cwd, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    if proc.returncode != 0:
        return None
    base = Path(cwd)
    if "-C" in before[:-1]:
        base = Path(os.path.normpath(os.path.join(cwd, before[before.index("-C") + 1])))
    return [Path(os.path.normpath(base / line[len("Would remove "):].rstrip("/")))
            for line in proc.stdout.splitlines() if line.startswith("Would remove ")]
