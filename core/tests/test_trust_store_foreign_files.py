"""A file in the store's object directories that is not an object (a note, an editor's swap file, a copy a user left
there) is nobody's object: ``verify`` and ``gc`` name it and leave it alone.

Reported: ``echo x > .agentsnap/objects/a0/notes.txt``, then ``agentsnap verify`` exited 1 with "problem: object
a0notes.txt: object a0notes.txt is missing from the store; run 'agentsnap verify'" (run what was just run), and
``agentsnap gc --prune now`` counted and deleted the file as an unreachable object.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from trust_kit import cli, new_work


def _store_with_loose_objects(tmp_path: Path) -> tuple[Path, Path]:
    root = new_work(tmp_path, {"a.txt": "a\n"})
    (root / "big.bin").write_bytes(os.urandom(300_000))
    assert cli(root, "snapshot", "-m", "one")[0] == 0
    fanout = root / ".agentsnap" / "objects" / "ab"  # a fan-out directory (one per first two hex digits of an id)
    fanout.mkdir(exist_ok=True)
    return root, fanout


def test_verify_names_a_foreign_file_and_finds_the_store_fine(tmp_path: Path) -> None:
    root, fanout = _store_with_loose_objects(tmp_path)
    (fanout / "notes.txt").write_text("mine\n")
    (fanout / ".notes.txt.swp").write_bytes(b"\0vim")
    code, out, err = cli(root, "verify")
    assert code == 0, (out, err)
    assert "missing from the store" not in out + err and "ok" in out, (out, err)
    assert f"{fanout.name}/notes.txt" in err and f"{fanout.name}/.notes.txt.swp" in err and "left as they are" in err, err
    rep = json.loads(cli(root, "verify", "--json")[1])
    assert rep["ok"] and rep["foreign_files"] == [f"{fanout.name}/.notes.txt.swp", f"{fanout.name}/notes.txt"], rep


def test_gc_leaves_a_foreign_file_alone_and_says_so(tmp_path: Path) -> None:
    root, fanout = _store_with_loose_objects(tmp_path)
    (fanout / "notes.txt").write_text("mine\n")
    code, out, err = cli(root, "gc", "--prune", "now", "--json")
    assert code == 0, err
    rep = json.loads(out)
    assert rep["removed"] == 0 and rep["foreign_files"] == [f"{fanout.name}/notes.txt"], rep
    assert (fanout / "notes.txt").read_text() == "mine\n"
    code, out, err = cli(root, "gc", "--prune", "now")
    assert code == 0 and "removed 0 objects" in out and "notes.txt" in err, (out, err)
    assert (fanout / "notes.txt").exists()
    assert cli(root, "restore", "HEAD")[0] == 0  # the store still works
