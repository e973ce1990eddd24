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
import json
import os
from pathlib import Path

from agentsnap_core import Repo
from agentsnap_core.errors import AgentSnapError
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
    """Write ``<root>/.agentsnap`` (a link to the store) unless something is there; keep it out of git."""
    marker = root / STORE_DIR
    if marker.exists():
        return
    try:
        marker.write_text(json.dumps({"store": str(store), "worktree": PRIMARY}) + "\n")
        exclude = root / ".git" / "info" / "exclude"
        if exclude.parent.is_dir():
            text = exclude.read_text() if exclude.exists() else ""
            if f"/{STORE_DIR}" not in text.split():
                exclude.write_text(text + ("" if text.endswith("\n") or not text else "\n") + f"/{STORE_DIR}\n")
    except OSError:
        pass  # the link is a convenience for the core CLI; the plugin finds its store by the project path


def open_project_repo(cwd: str | os.PathLike[str], settings: Settings, *, create: bool | None = None) -> Repo:
    """The plugin's store for the project holding ``cwd``; created when ``auto_init`` allows (or ``create``)."""
    root = project_root_for(str(cwd))
    store = store_dir_for(root, settings)
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
    return Repo(root, store, PRIMARY)


def bulky_ignored(root: Path, limit: int) -> list[str]:
    """Folders git ignores (``.gitignore``, ``.git/info/exclude``, the global excludes) holding more than ``limit`` files.

    Build output and dependency folders (``node_modules/``, ``target/``, ``.venv/``) can be rebuilt and would
    make the first snapshot of a big project miss the hook's time limit. Empty when ``root`` is not a git work tree.
    """
    if not (root / ".git").exists():
        return []
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
    return out


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
