"""The working directory is the world layer: ``rm -rf`` by the agent is undone by a checkout."""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

from agentsnap_openinterpreter import attach, session_of
from conftest import scripted


def tree(root: Path) -> dict[str, tuple[str, int, str]]:
    """Every path under ``root`` (the store excluded) -> (kind, mode, content digest or link target)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != ".agentsnap"]
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            rel = p.relative_to(root).as_posix()
            st = p.lstat()
            if p.is_symlink():
                out[rel] = ("link", 0, os.readlink(p))
            elif p.is_dir():
                out[rel] = ("dir", stat.S_IMODE(st.st_mode), "")
            else:
                out[rel] = ("file", stat.S_IMODE(st.st_mode), hashlib.sha256(p.read_bytes()).hexdigest())
    return out


def populate(root: Path) -> None:
    (root / "src" / "pkg").mkdir(parents=True)
    (root / "src" / "pkg" / "__init__.py").write_text("VALUE = 1\n")
    (root / "src" / "pkg" / "data.bin").write_bytes(bytes(range(256)) * 400)
    (root / "run.sh").write_text("#!/bin/sh\necho hi\n")
    (root / "run.sh").chmod(0o755)
    (root / ".config").mkdir()
    (root / ".config" / "settings.toml").write_text("[a]\nb = 1\n")
    (root / "empty-dir").mkdir()
    (root / "latest").symlink_to("src/pkg/__init__.py")
    (root / "README.md").write_text("# project\n" * 50)


def test_checkout_after_rm_rf_of_the_working_dir_brings_every_file_back(work, repo, interpreters):
    populate(work)
    before = tree(work)
    script = {"clean everything": "```shell\nrm -rf ./* .config\n```"}
    interp = attach(interpreters(scripted(script)), repo)
    interp.snapshot("pre-rm-rf")

    interp.chat("clean everything", display=False)
    assert tree(work) == {}  # the agent really deleted the working directory's contents
    cell = session_of(interp).cells[-1]
    assert (cell["kind"], cell["reason"]) == ("irreversible", "runs rm")

    report = interp.checkout("pre-rm-rf")
    assert tree(work) == before  # every file, directory, mode and symlink is back
    assert interp.messages == []  # the conversation is rewound to the snapshot too
    assert report.world is not None and report.world["undo"]  # the deletion itself can be restored again


def test_a_bad_restore_request_changes_nothing(work, repo, interpreters):
    import pytest
    from agentsnap_core.errors import AgentSnapError, InvalidInput
    from agentsnap_openinterpreter import restore

    populate(work)
    interp = attach(interpreters(scripted({})), repo)
    interp.snapshot("good")
    (work / "README.md").write_text("changed\n")
    with pytest.raises(InvalidInput, match="replay must be one of none, pure"):
        restore(repo, "good", interp, replay="everything")
    other = repo.snapshot("not an interpreter", layers={"state": {"counter": 1}})
    with pytest.raises(AgentSnapError, match="not taken from an Open Interpreter session"):
        restore(repo, other.id, interp)
    assert (work / "README.md").read_text() == "changed\n"
