"""``restore_world(config, to=DIR)`` with DIR inside ``world_root`` is refused, as ``fork_thread(worktrees=DIR)`` is.

Reported (tried as a user, langgraph 1.2.22): ``PFSaver("state", world_root="workspace")``, then
``saver.restore_world(old_config, to="workspace/before")`` to look at the files of an earlier checkpoint beside the
current ones. It wrote them where the saver captures: the thread's next checkpoint captured the whole copy as the
agent's own files, and a ``restore_world`` (in place) to any checkpoint taken before the copy deleted it - the
hazard ``fork_thread(worktrees=...)`` and ``agentsnap fork --worktrees`` refuse (``tests/test_trust_world_root_rules.py``);
nothing said so. It is refused the same way now, before a file is written, naming a directory outside and the ignore
line that makes DIR safe; a DIR outside ``world_root``, or one its ``.agentsnapignore`` leaves out, is restored to as
before.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from agentsnap_core.errors import InvalidInput
from agentsnap_langgraph import PFSaver
from test_trust_world_root_rules import _checkpoint, _names, workspace  # noqa: F401  (a fixture)


def test_restore_world_to_a_directory_inside_the_world_root_is_refused_before_a_file_is_written(
        tmp_path: Path, workspace: Path) -> None:  # noqa: F811
    with PFSaver(tmp_path / "state", world_root=workspace) as saver:
        cfg: dict[str, Any] = _checkpoint(saver, "t")
        (workspace / "notes.txt").write_text("edited\n")
        with pytest.raises(InvalidInput, match=r"inside this working tree .*choose a directory outside it") as err:
            saver.restore_world(cfg, to=workspace / "before")
        assert "'before/' in .agentsnapignore" in str(err.value)
        assert not (workspace / "before").exists()
        after = _checkpoint(saver, "t")  # the next checkpoint captures the agent's files, no copy of old ones
        assert _names(saver, after) == [".agentsnapignore", "notes.txt"]


def test_restore_world_to_a_directory_outside_or_ignored_is_written(tmp_path: Path, workspace: Path) -> None:  # noqa: F811
    with PFSaver(tmp_path / "state", world_root=workspace) as saver:
        cfg = _checkpoint(saver, "t")
        (workspace / "notes.txt").write_text("edited\n")
        saver.restore_world(cfg, to=tmp_path / "before")
        assert (tmp_path / "before" / "notes.txt").read_text() == "mine\n"
        saver.restore_world(cfg, to=workspace / "data" / "before")  # data/ is ignored
        assert (workspace / "data" / "before" / "notes.txt").read_text() == "mine\n"
        assert (workspace / "notes.txt").read_text() == "edited\n"  # (the world itself is left as it is)
