"""Shared by the test_trust_*.py files: the real CLI in a subprocess, and a fresh working tree with a store."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any


def cli(root: Path, *args: str) -> tuple[int, str, str]:
    """Run ``python -m agentsnap_core ARGS`` in ``root`` (what a user sees): ``(exit status, stdout, stderr)``."""
    proc = subprocess.run(
        [sys.executable, "-m", "agentsnap_core", *args], cwd=root, capture_output=True, text=True, timeout=300
    )
    return proc.returncode, proc.stdout, proc.stderr


def new_work(tmp_path: Path, files: dict[str, str | bytes]) -> Path:
    """``tmp_path/work`` holding ``files``, with a store made by ``agentsnap init``."""
    root = tmp_path / "work"
    root.mkdir()
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data if isinstance(data, bytes) else data.encode())
    code, _, err = cli(root, "init")
    assert code == 0, err
    return root


def snapshots(root: Path, texts: list[str], path: str = "a.txt") -> list[str]:
    """One snapshot per text, ``path`` holding that text and the message being it; the new ids, oldest first."""
    ids = []
    for text in texts:
        (root / path).write_text(text + "\n")
        code, out, err = cli(root, "snapshot", "-m", text)
        assert code == 0, err
        ids.append(out.strip())
    return ids


def commit_tree(root: Path, entries: list[list[Any]], message: str = "crafted") -> str:
    """Move main to a child of HEAD whose world tree is ``entries`` as given (what a crafted, foreign or old
    snapshot may hold: no validation on the way in); return the new snapshot id."""
    from agentsnap_core import Repo
    from agentsnap_core.format import content
    from agentsnap_core.format.encoding import pack, pack_plain
    from agentsnap_core.format.objects import Kind
    from agentsnap_core.layers import world
    from agentsnap_core.stores.base import RefUpdate

    with Repo.open(root) as repo:
        snap = repo.get("HEAD")
        tree = content.put_bytes(repo.objects, pack_plain({"entries": sorted(entries), "v": world.TREE_FORMAT}))
        manifest = repo.manifest(snap.id)
        manifest["layers"]["world"]["tree"] = tree
        manifest["parents"] = [snap.id]
        oid = repo.objects.put(Kind.MANIFEST, pack(manifest))
        repo.update_refs([RefUpdate("refs/heads/main", oid, snap.id)], message)
        return oid
