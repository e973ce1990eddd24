"""gc drops from the store's own list the world trees it reclaimed; tokens and live trees stay.

The list (``.agentsnap/own-trees``: what only this store's own history may restore without asking, docs/SECURITY.md)
gained a line for every tree captured with a link pointing outside (a ``.venv``'s ``bin/python``) or git's config
and hooks - every snapshot of such a project, the Claude Code plugin's included - and never lost one, however many
of those snapshots gc had reclaimed: read whole at every restore, for good. Fails on the code before this change.
"""

from __future__ import annotations

import os
from pathlib import Path

from agentsnap_core import Repo
from agentsnap_core.layers import reach
from agentsnap_core.repository.retention import prune


def test_gc_forgets_the_trees_it_reclaimed_and_keeps_the_rest(tmp_path: Path) -> None:
    root = tmp_path / "proj"
    root.mkdir()
    os.symlink("/usr/bin/python3", root / "python")  # a link pointing outside: its trees are noted as own
    with Repo.init(root) as repo:
        for i in range(5):
            (root / "f.txt").write_text(f"version {i}\n")
            last = repo.snapshot(f"v{i}")
        reach.remember(repo, {"base_url": "https://llm.internal.example/v1"})  # a token (kind:digest)
        own = (repo.store_dir / "own-trees").read_text().split()
        assert len(own) == 6
        tree = last.layers["world"]["tree"]
        prune(repo, keep_last=1)
        report = repo.gc(0)
        assert report["own_dropped"] == 4
        left = (repo.store_dir / "own-trees").read_text().split()
        assert tree in left and len(left) == 2 and any(x.startswith("reach:") for x in left)
        assert repo.captured_here(tree)
        (root / "python").unlink()
        repo.restore(last.id)  # its link pointing outside comes back without being asked: still its own
        assert os.readlink(root / "python") == "/usr/bin/python3"
        assert repo.gc(0)["own_dropped"] == 0
