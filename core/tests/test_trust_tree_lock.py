"""One process at a time snapshots or restores a working tree; the second gets one clear line, exit 2."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from trust_kit import cli, new_work

SLOW_RESTORE = textwrap.dedent(
    """
    import os, sys, time
    from agentsnap_core.layers import world
    from agentsnap_core.cli import main

    real = world.materialize
    def materialize_slowly(*a, **kw):  # a restore that takes a while (a big tree)
        open("../ready", "w").close()
        while not os.path.exists("../go"):
            time.sleep(0.05)
        return real(*a, **kw)
    world.materialize = materialize_slowly
    sys.argv = ["agentsnap", "restore", sys.argv[1]]
    main()
    """
)


@pytest.fixture
def work(tmp_path: Path) -> Path:
    return new_work(tmp_path, {"a.txt": "one\n"})


def test_snapshot_during_restore_is_refused_with_one_line(work: Path, tmp_path: Path) -> None:
    first = json.loads(cli(work, "snapshot", "-m", "one", "--json")[1])["id"]
    (work / "a.txt").write_text("two\n")
    assert cli(work, "snapshot", "-m", "two")[0] == 0
    restore = subprocess.Popen([sys.executable, "-c", SLOW_RESTORE, first], cwd=work, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300
        while not (tmp_path / "ready").exists():
            assert restore.poll() is None, restore.stderr.read() if restore.stderr else ""
            assert time.monotonic() < deadline
            time.sleep(0.05)
        before = json.loads(cli(work, "log", "--json")[1])
        code, out, err = cli(work, "snapshot", "-m", "beside the restore")
        assert code == 2, "a snapshot ran while a restore was rewriting the tree"
        assert err.startswith("agentsnap: error:") and err.count("\n") == 1, err
        assert "restore" in err and "re-run" in err, err
        assert json.loads(cli(work, "log", "--json")[1]) == before  # nothing recorded
        code, _, err = cli(work, "restore", "HEAD")
        assert code == 2 and "restore" in err, err
    finally:
        (tmp_path / "go").touch()
        assert restore.wait(timeout=300) == 0, restore.stderr.read() if restore.stderr else ""
    assert (work / "a.txt").read_text() == "one\n"
    assert cli(work, "snapshot", "-m", "after")[0] == 0  # the lock went with the process
