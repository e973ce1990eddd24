"""A file the last snapshot holds that an ignore rule now leaves out is not reported as deleted while it is still there.

Reported: ``agentsnap config world.ignore '*.log'`` with ``a.log`` in HEAD: ``status`` said ``D a.log`` though the
file was on disk and untouched (the user looks for what deleted it). The next snapshot does leave it out, so it stays
in the ``deleted`` list of ``--json`` (what a snapshot would record), and is also listed in ``now_ignored``; the
line says why: ``D a.log (still here, now ignored: the next snapshot leaves it out)``. A file that is really gone
is still a plain ``D``.
"""

from __future__ import annotations

import json
from pathlib import Path

from trust_kit import cli, new_work


def test_a_file_an_ignore_rule_now_leaves_out_is_said_to_be_still_here(tmp_path: Path) -> None:
    root = new_work(tmp_path, {"a.log": "a\n", "b.txt": "b\n", "c.log": "c\n"})
    assert cli(root, "snapshot", "-m", "one")[0] == 0
    code, _, err = cli(root, "config", "world.ignore", "*.log")
    assert code == 0, err
    (root / "c.log").unlink()
    code, out, err = cli(root, "status")
    assert code == 0, err
    lines = out.splitlines()
    assert "  D a.log (still here, now ignored: the next snapshot leaves it out)" in lines, out
    assert "  D c.log" in lines, out
    st = json.loads(cli(root, "status", "--json")[1])
    assert st["world"]["deleted"] == ["a.log", "c.log"] and st["now_ignored"] == ["a.log"], st


def test_a_snapshot_from_before_an_ignore_rule_restores_over_ignored_files_that_already_hold_its_bytes(
        tmp_path: Path) -> None:
    """``echo '*.log' > .agentsnapignore`` after a snapshot that holds ``app.log``: ``restore`` of that snapshot was
    refused - "cannot restore 'app.log': something ignored here is in the way" - though the ignored file held
    exactly the snapshot's bytes (restoring it changes nothing). An ignored file whose bytes differ is still
    refused: it is the user's, and the restore must not overwrite it."""
    root = new_work(tmp_path, {"app.log": "line 1\n", "a.txt": "one\n"})
    code, old, err = cli(root, "snapshot", "-m", "with the log")
    assert code == 0, err
    (root / ".agentsnapignore").write_text("*.log\n")
    (root / "a.txt").write_text("two\n")
    assert cli(root, "snapshot", "-m", "log ignored now")[0] == 0
    code, out, err = cli(root, "restore", old.strip())
    assert code == 0, err
    assert (root / "a.txt").read_text() == "one\n" and (root / "app.log").read_text() == "line 1\n"
    (root / "a.txt").write_text("three\n")
    (root / ".agentsnapignore").write_text("*.log\n")
    assert cli(root, "snapshot", "-m", "again")[0] == 0
    (root / "app.log").write_text("line 1\nline 2, the user's\n")
    code, out, err = cli(root, "restore", old.strip())
    assert code == 2 and "app.log" in err and "in the way" in err, err
    assert (root / "app.log").read_text() == "line 1\nline 2, the user's\n" and (root / "a.txt").read_text() == "three\n"
