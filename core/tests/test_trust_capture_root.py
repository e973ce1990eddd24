"""A capture (or restore) of a directory other than the store's tree uses that directory's ignore rules.

Adapters capture the files an agent works on through the ``agentsnap_capture_world(root=...)`` hook with a store
that lives elsewhere (LangGraph's ``PFSaver(store, world_root=dir)``). Core built the ignore rules of the store's own
tree for every root, so ``dir/.agentsnapignore`` was never read: its paths were captured and rewound by a restore,
and the store tree's lines applied to ``dir`` instead (``adapters/langgraph/tests/test_trust_world_root_rules.py``
shows it as a user meets it). These pin the contract at the hook, for every adapter.
"""

from __future__ import annotations

from pathlib import Path

from agentsnap_core import Repo
from agentsnap_core.layers import world
from agentsnap_core.plugins import get_plugin_manager


def _capture(repo: Repo, root: Path) -> dict:
    pm = get_plugin_manager()
    return dict(pm.hook.agentsnap_capture_world(root=str(root), context={"repo": repo, "pm": pm}))


def _setup(tmp_path: Path) -> tuple[Repo, Path]:
    repo = Repo.init(tmp_path / "store-tree")
    (tmp_path / "store-tree" / world.IGNORE_FILE).write_text("keep.txt\n")  # about the store tree's own files
    work = tmp_path / "work"
    (work / "data").mkdir(parents=True)
    (work / "data" / "big.csv").write_text("v1\n")
    (work / "keep.txt").write_text("mine\n")
    (work / world.IGNORE_FILE).write_text("data/\n")
    return repo, work


def test_a_capture_of_another_directory_follows_that_directorys_ignore_file(tmp_path: Path) -> None:
    repo, work = _setup(tmp_path)
    with repo:
        rec = _capture(repo, work)
        names = [e[0] for e in world.load_tree(repo.objects, rec["tree"])]
        assert names == [world.IGNORE_FILE, "keep.txt"]


def test_a_restore_of_another_directory_leaves_what_its_ignore_file_names(tmp_path: Path) -> None:
    repo, work = _setup(tmp_path)
    with repo:
        rec = _capture(repo, work)
        (work / "data" / "big.csv").write_text("v2\n")
        (work / "keep.txt").write_text("edited\n")
        pm = get_plugin_manager()
        pm.hook.agentsnap_restore_world(root=str(work), world=rec, context={"repo": repo, "pm": pm, "paths": None})
        assert (work / "keep.txt").read_text() == "mine\n"
        assert (work / "data" / "big.csv").read_text() == "v2\n"


def test_inside_tree_of_another_directory_reads_its_rules(tmp_path: Path) -> None:
    repo, work = _setup(tmp_path)
    with repo:
        assert repo.inside_tree(work / "forks", work) == "forks"
        assert repo.inside_tree(work / "data" / "forks", work) is None  # ignored there
        assert repo.inside_tree(work / "forks") is None  # outside the store's own tree
        line = repo.inside_tree_line(work / "forks", "fork", "forks", work)
        assert line is not None and str(work.resolve()) in line and "'forks/' in .agentsnapignore" in line
