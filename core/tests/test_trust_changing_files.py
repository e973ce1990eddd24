"""Files that change while ``snapshot`` reads them never yield a snapshot that cannot be restored.

An agent appends to its log or rewrites a file while a snapshot runs. Whatever bytes the snapshot
stored, the tree records their size, ``restore`` brings them back and ``verify`` checks tree sizes
against the stored content. A file truncated while it is read never kills the process (no mmap).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from agentsnap_core import Repo
from agentsnap_core.cli import main
from agentsnap_core.format import content, objects
from agentsnap_core.layers import world
from click.testing import CliRunner
from trust_kit import cli, commit_tree, new_work


@pytest.fixture
def work(tmp_path: Path) -> Path:
    return new_work(tmp_path, {"agent.log": b"line 0\n" * 20_000, "notes.txt": "short\n"})  # chunked + small


def snapshot_while(work: Path, monkeypatch, agent) -> None:
    """``agentsnap snapshot`` in ``work``, with ``agent()`` run just after the scan listed the tree."""
    real_scan = world.scan

    def scan_then_agent(root, ignore):
        listed = real_scan(root, ignore)
        agent()
        return listed

    monkeypatch.setattr(world, "scan", scan_then_agent)
    monkeypatch.chdir(work)
    result = CliRunner().invoke(main, ["snapshot", "-m", "while the agent works", "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    monkeypatch.undo()


def test_file_appended_between_scan_and_read_restores(work: Path, tmp_path: Path, monkeypatch) -> None:
    """The file grows after snapshot listed it: the tree must record the size of the bytes stored."""

    def agent_appends() -> None:
        with open(work / "agent.log", "ab") as f:
            f.write(b"appended while the snapshot ran\n" * 100)
        with open(work / "notes.txt", "ab") as f:
            f.write(b"more\n")

    snapshot_while(work, monkeypatch, agent_appends)
    code, out, err = cli(work, "restore", "HEAD", "--to", str(tmp_path / "copy"))
    assert code == 0, err
    for name in ("agent.log", "notes.txt"):
        assert (tmp_path / "copy" / name).read_bytes() == (work / name).read_bytes()
    code, out, err = cli(work, "verify", "--json")
    assert code == 0 and json.loads(out)["ok"], out + err


def test_a_file_deleted_after_the_scan_listed_it_is_not_in_the_snapshot(work: Path, tmp_path: Path, monkeypatch) -> None:
    """The agent removes a file the snapshot listed before it was read: the tree leaves it out (no entry without
    content), the snapshot says one file fewer, and a restore elsewhere gives the tree as the snapshot found it."""
    snapshot_while(work, monkeypatch, (work / "notes.txt").unlink)
    snap = Repo.open(work).get("HEAD")
    names = [e[0] for e in Repo.open(work).world_entries(snap)]
    assert "notes.txt" not in names and "agent.log" in names
    code, out, err = cli(work, "restore", "HEAD", "--to", str(tmp_path / "copy"))
    assert code == 0, err
    assert sorted(p.name for p in (tmp_path / "copy").iterdir()) == ["agent.log"]
    code, out, err = cli(work, "verify", "--json")
    assert code == 0 and json.loads(out)["ok"], out + err


def test_verify_reports_a_tree_size_that_differs_from_the_stored_content(work: Path) -> None:
    """A snapshot written by an older agentsnap (size taken from stat, bytes read later) is caught by verify."""
    assert cli(work, "snapshot", "-m", "ok")[0] == 0
    with Repo.open(work) as repo:
        entries = [list(e) for e in repo.world_entries("HEAD")]
    for e in entries:
        if e[0] == "notes.txt":
            e[3] += 5  # what a stat taken before an append recorded
    commit_tree(work, entries, "an old snapshot with stat sizes")
    code, out, err = cli(work, "verify", "--json")
    assert code != 0
    problems = json.loads(out)["problems"]
    assert any("notes.txt" in json.dumps(p) and "size" in json.dumps(p) for p in problems), problems


TRUNCATE_DURING_READ = textwrap.dedent(
    """
    import os, sys
    from agentsnap_core.format import objects
    from agentsnap_core.cli import main

    real_cut = objects.cut
    def cut_after_truncation(data):
        if len(data) > 1024 * 1024:  # the agent truncates its big file while snapshot is reading it
            os.truncate("big.bin", 0)
        return real_cut(data)
    objects.cut = cut_after_truncation
    sys.argv = ["agentsnap", "snapshot", "-m", "truncated"]
    main()
    """
)


def test_file_truncated_while_read_does_not_kill_the_process(work: Path, tmp_path: Path) -> None:
    (work / "big.bin").write_bytes(os.urandom(1024) * 8 * 1024)  # 8 MiB
    proc = subprocess.run(
        [sys.executable, "-c", TRUNCATE_DURING_READ], cwd=work, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode != -signal.SIGBUS, "killed by SIGBUS: the file was read through mmap"
    assert proc.returncode == 0, proc.stderr
    code, _, err = cli(work, "restore", "HEAD", "--to", str(tmp_path / "copy"))
    assert code == 0, err
    code, out, err = cli(work, "verify", "--json")
    assert code == 0 and json.loads(out)["ok"], out + err


@pytest.mark.parametrize("size", [0, 1, objects.SMALL_FILE, objects.SMALL_FILE + 1, 3 * 1024 * 1024 + 17])
def test_streamed_file_has_the_same_content_id_as_the_bytes(tmp_path: Path, size: int) -> None:
    """Reading files in blocks keeps the chunk boundaries (dedup with put_bytes) exactly."""
    data = os.urandom(size)
    f = tmp_path / "f.bin"
    f.write_bytes(data)
    oid, stored = content.put_file(None, f)
    assert (oid, stored) == (content.put_bytes(None, data), size)


AGENT = textwrap.dedent(
    """
    import os, sys, time
    stop = sys.argv[1]
    i = 0
    while not os.path.exists(stop):
        i += 1
        with open("agent.log", "ab") as f:  # an agent appending to its log
            f.write(b"step %d " % i + b"x" * (i % 4096) + b"\\n")
        with open("state.json", "wb") as f:  # rewritten in place: truncate, then write
            f.write(b'{"step": %d, "pad": "' % i + b"y" * (i * 997 % 300_000) + b'"}')
        if i % 7 == 0:
            with open("big.bin", "r+b") as f:  # a large file rewritten in the middle
                f.seek(i * 4099 % (4 << 20))
                f.write(os.urandom(8192))
        if i % 11 == 0:
            os.truncate("agent.log", 0)  # log rotation: truncated while a snapshot may read it
        time.sleep(0.001)
    """
)


def test_stress_agent_writes_while_snapshots_and_restores_run(work: Path, tmp_path: Path) -> None:
    """N rounds (200 with AGENTSNAP_LONG=1; 4 by default so CI stays fast) of snapshot + restore beside a writer.

    Every committed snapshot must restore byte-identically to what it recorded, and ``verify`` must agree.
    """
    rounds = 200 if os.environ.get("AGENTSNAP_LONG") == "1" else 4
    (work / "big.bin").write_bytes(os.urandom(4 << 20))
    (work / "state.json").write_text("{}")
    stop = tmp_path / "stop"
    agent = subprocess.Popen([sys.executable, "-c", AGENT, str(stop)], cwd=work)
    committed: list[str] = []
    restores: list[tuple[subprocess.Popen, Path]] = []
    try:
        for i in range(rounds):
            code, out, err = cli(work, "snapshot", "-m", f"round {i}", "--json")
            assert code == 0, err
            committed.append(json.loads(out)["id"])
            dest = tmp_path / f"during-{i}"  # a restore of the previous snapshot runs beside the next snapshot
            restores.append((subprocess.Popen(
                [sys.executable, "-m", "agentsnap_core", "restore", committed[-1], "--to", str(dest)],
                cwd=work, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True), dest))
            while len(restores) > 2:
                proc, _ = restores.pop(0)
                assert proc.wait(timeout=300) == 0, proc.stderr.read() if proc.stderr else ""
    finally:
        stop.touch()
        agent.wait(timeout=60)
        for proc, _ in restores:
            proc.wait(timeout=300)
    assert all(proc.returncode == 0 for proc, _ in restores)
    repo = Repo.open(work)
    identical = 0
    try:
        for i, oid in enumerate(committed):
            dest = tmp_path / f"during-{i}"
            for path, kind, _mode, size, ref in repo.world_entries(oid):
                if kind == "f":
                    data = (dest / path).read_bytes()
                    assert len(data) == size and data == content.get_bytes(repo.objects, ref), (oid, path)
            identical += 1
    finally:
        repo.close()
    code, out, err = cli(work, "verify", "--json")
    assert code == 0 and json.loads(out)["ok"], out + err
    print(f"\nfiles changed during snapshot: {rounds} rounds, {len(committed)} snapshots committed, "
          f"{identical} restored byte-identically, verify ok")
    assert identical == rounds
