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
