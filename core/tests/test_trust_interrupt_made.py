"""A Ctrl-C that lands after a snapshot's manifest was written: the snapshot is committed (the batch commits what it
holds on any exit), so the command must say it was made, by id - "the store is unchanged" alone read as "no
snapshot", and a user who re-ran it got two."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from trust_kit import cli, new_work

#: runs one CLI command line in a process where the vault step (after the manifest, before the command returns)
#: is interrupted, as a Ctrl-C there would be
_INTERRUPTED = """
import sys
from agentsnap_core.repository import vault
def keep(*args, **kwargs):
    raise KeyboardInterrupt
vault.keep = keep
if sys.argv[1] == "fast":
    from agentsnap_core.cli import run
    run(sys.argv[2:], resident=False)
else:
    from agentsnap_core.cli.app import main
    main(sys.argv[2:])
"""


@pytest.mark.parametrize("path", ["fast", "click"])
def test_an_interrupt_after_the_manifest_names_the_snapshot_it_made(tmp_path: Path, path: str) -> None:
    """Before: exit 130 and "agentsnap: interrupted; the store is unchanged past the last completed step", while
    ``agentsnap log`` showed the new snapshot at HEAD. Now the line names the snapshot made (id and message)."""
    root = new_work(tmp_path, {"a.txt": "one\n"})
    (root / "a.txt").write_text("two\n")
    proc = subprocess.run([sys.executable, "-c", _INTERRUPTED, path, "snapshot", "-m", "big one"], cwd=root,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 130, proc.stderr
    code, out, _ = cli(root, "log", "--json")
    made = json.loads(out)[0]
    assert made["message"] == "big one"
    assert f"interrupted after it made snapshot {made['id'][:12]} ('big one')" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


def test_an_interrupt_before_the_manifest_says_the_store_is_unchanged(tmp_path: Path) -> None:
    """An interrupt before the snapshot's manifest (here: while binding the effects ledger) makes nothing: the line
    says the store is unchanged, and the log is as it was."""
    root = new_work(tmp_path, {"a.txt": "one\n"})
    (root / "a.txt").write_text("two\n")
    script = _INTERRUPTED.replace(
        "from agentsnap_core.repository import vault", "from agentsnap_core.layers import effects_ledger as vault"
    ).replace("vault.keep = keep", "vault.bind_snapshot = keep")
    proc = subprocess.run([sys.executable, "-c", script, "fast", "snapshot", "-m", "never"], cwd=root,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 130, proc.stderr
    assert "agentsnap: interrupted; the store is unchanged past the last completed step" in proc.stderr, proc.stderr
    code, out, err = cli(root, "log", "--json")
    assert code == 2 and "no snapshot yet" in err, (out, err)


def test_a_handle_that_saves_for_days_keeps_a_bounded_record_of_what_it_made(tmp_path: Path) -> None:
    """What an interrupt names is kept per handle: a ``Client`` that saves every step of a long run must not grow
    it without bound (it kept every id and message it ever made); the count stays exact."""
    from agentsnap_core import Repo

    root = tmp_path / "work"
    root.mkdir()
    repo = Repo.init(root)
    for i in range(12):
        (root / "a.txt").write_text(f"{i}\n")
        repo.snapshot(f"step {i}")
    assert len(repo.made) <= 3 and repo.made_count == 12
    assert [m for _oid, m in repo.made] == ["step 9", "step 10", "step 11"]
    repo.close()
