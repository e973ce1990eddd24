"""One damaged snapshot in the middle of the history must not hide the rest of it.

Reported: with the manifest of one snapshot corrupt (a flipped bit on disk), ``agentsnap log`` and ``log --all``
printed nothing at all - not even the readable snapshot on top - and exited 2 naming the object: the user could not
find the id of the older, intact snapshot to restore, though ``restore <that id>`` works. ``git log`` prints what it
can read before it stops. Now ``log`` lists every snapshot, the unreadable one as the index records it (marked
``[UNREADABLE]``, with its message and parents, so the walk goes on past it), then exits 2 saying which cannot be read.
"""

from __future__ import annotations

import json
from pathlib import Path

from trust_kit import cli, new_work, snapshots


def _corrupt(root: Path, oid: str) -> None:
    from agentsnap_core import Repo

    with Repo.open(root) as repo:
        path = Path(repo.objects.loose_copy(oid))  # (reads take the loose copy first)
    path.chmod(0o644)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def test_log_lists_the_history_around_a_corrupt_snapshot_and_says_which_cannot_be_read(tmp_path: Path) -> None:
    root = new_work(tmp_path, {"a.txt": "one\n"})
    ids = snapshots(root, ["one", "two", "three"])
    _corrupt(root, ids[1])
    for args in (["log"], ["log", "--all"], ["log", "--graph"]):
        code, out, err = cli(root, *args)
        assert code == 2, (args, out, err)
        lines = out.splitlines()
        assert len(lines) == 3, (args, out)
        assert ids[2][:12] in lines[0] and "three" in lines[0], (args, out)
        assert ids[1][:12] in lines[1] and "[UNREADABLE]" in lines[1] and "two" in lines[1], (args, out)
        assert ids[0][:12] in lines[2] and "one" in lines[2] and "UNREADABLE" not in lines[2], (args, out)
        assert "1 snapshot(s) cannot be read" in err and "corrupt" in err and "Traceback" not in err, err
    code, out, err = cli(root, "log", "--json")
    rows = json.loads(out)
    assert [r["id"] for r in rows] == ids[::-1] and code == 2
    assert "unreadable" in rows[1] and "unreadable" not in rows[0] and rows[1]["message"] == "two"
    code, out, err = cli(root, "restore", ids[0][:12])  # the intact snapshot found through the log still restores
    assert code == 0 and (root / "a.txt").read_text() == "one\n", err


def test_log_of_an_intact_history_is_unchanged(tmp_path: Path) -> None:
    root = new_work(tmp_path, {"a.txt": "one\n"})
    assert cli(root, "snapshot", "-m", "one")[0] == 0
    code, out, err = cli(root, "log")
    assert code == 0 and "UNREADABLE" not in out and err == "", (out, err)
