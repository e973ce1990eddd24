"""FIFOs, sockets and devices in the working tree: no snapshot can hold them, so each one is named (snapshot, status,
their --json), a restore leaves them as they are, and one standing where a snapshot has a file is named in the
refusal. Before, they were skipped in silence."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pytest
from trust_kit import cli, new_work

pytestmark = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs and UNIX sockets are POSIX")


@pytest.fixture
def work(tmp_path: Path) -> Path:
    root = new_work(tmp_path, {"app.py": "print('hi')\n", "run/notes.txt": "n\n"})
    os.mkfifo(root / "run" / "pipe")
    with socket.socket(socket.AF_UNIX) as s:  # a dev server's socket, left behind in the project
        s.bind(str(root / "run" / "server.sock"))
    return root


SPECIAL = ["run/pipe", "run/server.sock"]


def test_snapshot_and_status_name_every_special_file(work: Path) -> None:
    code, out, err = cli(work, "snapshot", "-m", "s")
    assert code == 0 and len(out.strip()) == 64, err  # stdout stays the id
    assert "not captured: 2 FIFO(s), socket(s) or device(s)" in err and all(p in err for p in SPECIAL), err
    code, out, err = cli(work, "snapshot", "-m", "again", "--json")
    assert code == 0, err
    world = json.loads(out)["world"]
    assert world["not_captured"] == SPECIAL and world["files"] == 2
    code, out, err = cli(work, "status")
    assert code == 0 and "nothing changed" in out and all(p in err for p in SPECIAL), out + err
    assert json.loads(cli(work, "status", "--json")[1])["not_captured"] == SPECIAL
    code, out, err = cli(work, "show", "HEAD", "--json")
    assert code == 0 and json.loads(out)["manifest_layers"]["world"]["not_captured"] == SPECIAL, err


def test_a_restore_leaves_them_as_they_are_and_names_one_in_the_way(work: Path) -> None:
    assert cli(work, "snapshot", "-m", "with app.py")[0] == 0
    (work / "app.py").unlink()
    os.mkfifo(work / "app.py")  # where the snapshot has a file: a restore would block writing into it
    code, _out, err = cli(work, "restore", "HEAD")
    assert code != 0 and "'app.py': a FIFO (never captured) is in the way" in err and "nothing was changed" in err, err
    assert (work / "app.py").is_fifo() and (work / "run" / "pipe").is_fifo()
    (work / "app.py").unlink()
    code, _out, err = cli(work, "restore", "HEAD")
    assert code == 0, err
    assert (work / "app.py").read_text() == "print('hi')\n"
    assert (work / "run" / "pipe").is_fifo() and (work / "run" / "server.sock").is_socket()
