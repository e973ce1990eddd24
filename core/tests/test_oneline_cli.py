"""One line, never a traceback: what the machine, the disk or a forged object does to a verb.

Each case runs the real ``agentsnap`` command in a subprocess and checks what a user sees: exit status 2,
exactly one line on stderr that says what to do, and nothing half written.
"""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from agentsnap_core import Repo
from agentsnap_core.format import content, objects
from agentsnap_core.format.encoding import pack
from agentsnap_core.format.objects import Kind
from agentsnap_core.stores.base import RefUpdate

NOBODY = 65534


def run(root: Path, *args: str, as_nobody: bool = False, home: Path | None = None) -> tuple[int, str, str]:
    """The real console entry point in a subprocess; ``as_nobody`` drops root's privileges with setpriv(1)."""
    cmd = [sys.executable, "-m", "agentsnap_core", *args]
    if as_nobody:
        cmd = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", *cmd]
    env = dict(os.environ, HOME=str(home)) if home else None
    proc = subprocess.run(cmd, cwd=root, capture_output=True, text=True, timeout=120, env=env)
    return proc.returncode, proc.stdout, proc.stderr


def one_line(code: int, err: str, *words: str) -> None:
    assert code == 2, err
    assert "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("agentsnap: error: "), err
    for w in words:
        assert w in lines[0], err


def need_root_and_setpriv() -> None:
    """Permission cases: tests run as root (which may read anything), so they drop to uid 65534 with setpriv."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        from agentsnap_core.testing.servers import need

        need(False, "root and setpriv(1), to run the command as an unprivileged user")


@pytest.fixture
def work(tmp_path: Path) -> Path:
    root = tmp_path / "work"
    root.mkdir()
    (root / "a.txt").write_text("one\n")
    assert run(root, "init")[0] == 0
    assert run(root, "snapshot", "-m", "one")[0] == 0
    (root / "a.txt").write_text("two\n")
    assert run(root, "trace", "add", "user", "hello")[0] == 0
    assert run(root, "snapshot", "-m", "two")[0] == 0
    return root


def _store_files(root: Path) -> dict[str, bytes]:
    out = {}
    for dirpath, _dirs, files in os.walk(root / ".agentsnap"):
        for f in files:
            if not f.endswith(("-wal", "-shm")):
                out[os.path.join(dirpath, f)] = Path(dirpath, f).read_bytes()
    return out


def _nobody_home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    os.chown(home, NOBODY, NOBODY)
    return home


@pytest.fixture
def open_dir() -> Path:
    """A directory the unprivileged user can reach (pytest's tmp_path sits below a 0700 directory)."""
    path = Path(tempfile.mkdtemp(prefix="agentsnap-oneline-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_read_only_store_reads_work_and_writes_say_one_line(work: Path, open_dir: Path) -> None:
    need_root_and_setpriv()
    home = _nobody_home(open_dir)
    work = Path(shutil.copytree(work, open_dir / "work", symlinks=True))
    for dirpath, dirs, files in os.walk(work):
        for name in dirs + files:
            os.chmod(os.path.join(dirpath, name), 0o555 if name in dirs else 0o444)
    work.chmod(0o555)
    before = _store_files(work)
    for verb in (["log"], ["verify"], ["status"], ["show"], ["diff", "HEAD~1", "HEAD"], ["trace", "show", "HEAD"]):
        code, out, err = run(work, *verb, as_nobody=True, home=home)
        assert code == 0 and out and not err, (verb, code, err)
    for verb in (["snapshot", "-m", "x"], ["branch", "b"], ["tag", "t"], ["trace", "add", "user", "x"]):
        code, _out, err = run(work, *verb, as_nobody=True, home=home)
        one_line(code, err, "not writable" if verb[0] in ("snapshot", "trace") else "read-only")
    assert _store_files(work) == before


def _forged_zstd_blob(data: bytes) -> bytes:
    """A stored blob whose zstd frame header declares 1 TiB of content (one raw block of ``data``)."""
    frame = b"\x28\xb5\x2f\xfd" + bytes([0xC0, 0x00]) + struct.pack("<Q", 1 << 40)
    frame += struct.pack("<I", (len(data) << 3) | 1)[:3] + data
    return objects.HEADER.pack(objects.MAGIC, objects.OBJECT_FORMAT, Kind.BLOB, 1, len(data)) + frame


def test_zstd_frame_declaring_a_tebibyte_is_refused_everywhere_and_verify_goes_on(work: Path, tmp_path: Path) -> None:
    data = b"forged content\n" * 8
    oid = objects.digest(Kind.BLOB, data)
    with Repo.open(work) as r:
        good = r.get("HEAD")
        tree = content.put_value(r.objects, {"v": 1, "entries": [["a.txt", "f", 0o644, len(data), oid]]})
        path = Path(r.objects._path(oid))
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(_forged_zstd_blob(data))
        world = dict(good.layers["world"], tree=tree, files=1, bytes=len(data))
        manifest = dict(good.manifest, layers={**good.layers, "world": world}, parents=[good.id], message="bomb")
        bomb = r.objects.put(Kind.MANIFEST, pack(manifest))
        r.update_refs([RefUpdate("refs/heads/bomb", bomb, None)], "test: plant a decompression bomb")
        (work / "zzz.txt").write_text("a file verify must still reach\n")
        r.objects.put(Kind.BLOB, b"later object\n")
    for args in (("restore", "bomb", "--to", str(tmp_path / "out")), ("diff", "HEAD", "bomb"), ("restore", "bomb")):
        code, _, err = run(work, *args)
        one_line(code, err, "corrupt", oid)
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())
    assert (work / "a.txt").read_text() == "two\n"
    code, out, err = run(work, "verify", "--json")
    assert code == 1 and "Traceback" not in err, err
    import json

    rep = json.loads(out)
    assert oid in {p["id"] for p in rep["problems"]}, rep["problems"]  # the object itself, and the snapshot using it
    assert all(oid in p["error"] and "corrupt" in p["error"] for p in rep["problems"]), rep["problems"]
    assert rep["objects"] >= 8  # it went on to check the rest of the store


def _plant_trace(work: Path, value: object) -> None:
    with Repo.open(work) as r:
        good = r.get("HEAD")
        trace = dict(good.layers["trace"], content=content.put_value(r.objects, value))
        manifest = dict(good.manifest, layers={**good.layers, "trace": trace}, parents=[good.id], message="garbage")
        bad = r.objects.put(Kind.MANIFEST, pack(manifest))
        r.update_refs([RefUpdate("refs/heads/garbage", bad, ANY_NEW)], "test: plant a garbage trace layer")


ANY_NEW = None  # the branch must not exist yet


@pytest.mark.parametrize("value", [42, ["not a message", 7], {"role": "user"}], ids=["int", "list-of-scalars", "map"])
def test_garbage_trace_layer_in_diff_and_trace_show(work: Path, value: object) -> None:
    _plant_trace(work, value)
    for args in (("diff", "HEAD", "garbage"), ("trace", "show", "garbage"), ("diff", "garbage")):
        code, _, err = run(work, *args)
        one_line(code, err, "trace layer", "not a list of messages")


def test_log_negative_count_and_unknown_diff_layer_are_refused(work: Path) -> None:
    code, out, err = run(work, "log", "-n", "-1")
    one_line(code, err, "-n")
    assert out == ""
    code, out, err = run(work, "diff", "HEAD~1", "HEAD", "--layer", "nosuch")
    one_line(code, err, "nosuch", "world", "trace")
    assert out == ""
    code, out, _ = run(work, "diff", "HEAD~1", "HEAD", "--layer", "trace")
    assert code == 0 and "hello" in out


def test_schema_errors_do_not_say_digest_mismatch(work: Path) -> None:
    with Repo.open(work) as r:
        good = r.get("HEAD")
        manifest = dict(good.manifest, layers={**good.layers, "state": {"content": 7}}, parents=[good.id])
        bad = r.objects.put(Kind.MANIFEST, pack(manifest))
        r.update_refs([RefUpdate("refs/heads/bad", bad, None)], "test: plant a malformed manifest")
    code, _, err = run(work, "show", "bad")
    one_line(code, err, "malformed manifest")
    assert "digest mismatch" not in err


@pytest.mark.parametrize("worktrees", [False, True], ids=["branches", "worktrees"])
def test_long_fork_prefix_is_refused_and_leaves_no_branches(work: Path, tmp_path: Path, worktrees: bool) -> None:
    before = run(work, "branch", "--json")[1]
    args = ["fork", "--prefix", "p" * 300] + (["--worktrees", str(tmp_path / "wt")] if worktrees else [])
    code, out, err = run(work, *args)
    one_line(code, err, "at most 200")
    assert out == "" and run(work, "branch", "--json")[1] == before
    assert not (tmp_path / "wt").exists() or not any((tmp_path / "wt").iterdir())


@pytest.fixture
def tiny_disk(tmp_path: Path) -> Path:
    """A real 3 MiB tmpfs (mount(8), as root): the disk fills up for real, no fake write()."""
    mnt = tmp_path / "tiny"
    mnt.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(mnt)], capture_output=True, text=True)
    if proc.returncode != 0:
        from agentsnap_core.testing.servers import need

        need(False, f"a tmpfs mount for the ENOSPC case ({proc.stderr.strip()})")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_disk_full_during_snapshot_is_one_line_and_commits_nothing(tiny_disk: Path) -> None:
    root = tiny_disk / "work"
    root.mkdir()
    assert run(root, "init")[0] == 0
    (root / "small.txt").write_text("small\n")
    code, first, _ = run(root, "snapshot", "-m", "fits")
    assert code == 0
    (root / "big.bin").write_bytes(os.urandom(2 * 1024 * 1024))  # its copy in the store cannot fit
    code, out, err = run(root, "snapshot", "-m", "too big")
    one_line(code, err, "no space left", "free space and re-run")
    assert out == ""
    assert run(root, "log", "--json")[1].count('"id"') == 1  # no ref moved: HEAD is still the first snapshot
    (root / "big.bin").write_bytes(os.urandom(512 * 1024))
    run(root, "gc", "--prune", "now")
    code, _, err = run(root, "snapshot", "-m", "fits again")
    assert code == 0, err


def test_unreadable_file_in_the_tree_is_named_in_one_line(work: Path, open_dir: Path) -> None:
    """An unprivileged user (setpriv) snapshots a tree holding a file only root may read (chmod 000)."""
    need_root_and_setpriv()
    home = _nobody_home(open_dir)
    work = Path(shutil.copytree(work, open_dir / "work", symlinks=True))
    subprocess.run(["chown", "-R", f"{NOBODY}:{NOBODY}", str(work)], check=True)
    secret = work / "locked.txt"
    secret.write_text("root only\n")
    os.chown(secret, 0, 0)
    secret.chmod(0)
    before = run(work, "log", "--json", as_nobody=True, home=home)[1]
    code, out, err = run(work, "snapshot", "-m", "x", as_nobody=True, home=home)
    one_line(code, err, "permission denied", "locked.txt")
    assert out == "" and run(work, "log", "--json", as_nobody=True, home=home)[1] == before


@pytest.mark.parametrize("target", ["under-a-file/out", "/proc/agentsnap-nope/out"], ids=["under-a-file", "in-proc"])
def test_restore_to_a_path_that_cannot_be_created(work: Path, tmp_path: Path, target: str) -> None:
    (tmp_path / "under-a-file").write_text("a file, not a directory\n")
    dest = target if target.startswith("/") else str(tmp_path / target)
    code, out, err = run(work, "restore", "HEAD", "--to", dest)
    one_line(code, err, "agentsnap-nope" if "proc" in target else "under-a-file", "re-run")
    assert out == ""


def test_planted_symlink_on_an_ignored_path_stops_restore_without_writing_through_it(work: Path, tmp_path: Path) -> None:
    (work / "cache").mkdir()
    (work / "cache" / "data.txt").write_text("cached\n")
    assert run(work, "snapshot", "-m", "with cache")[0] == 0
    outside = tmp_path / "outside"
    outside.mkdir()
    shutil.rmtree(work / "cache")
    (work / "cache").symlink_to(outside)
    (work / ".agentsnapignore").write_text("cache\n")
    code, out, err = run(work, "restore", "HEAD")
    one_line(code, err, "cache")  # the link is named; the in-place restore rolls back (part A) or stops before it
    assert list(outside.iterdir()) == []
    assert (work / "a.txt").read_text() == "two\n"
    assert (work / "cache").is_symlink() and (work / ".agentsnapignore").exists()  # the user's ignored link survives


def test_every_verb_takes_json_as_the_docs_say() -> None:
    """docs/CLI.md and the README promise it; `remote add/remove` and `ui` did not."""
    import click
    from agentsnap_core.cli import main

    def leaves(cmd: click.Command, path: tuple[str, ...]) -> list[tuple[str, ...]]:
        if isinstance(cmd, click.Group):
            return [leaf for name, sub in cmd.commands.items() for leaf in leaves(sub, (*path, name))]
        return [] if any("--json" in p.opts for p in cmd.params) else [path]

    main.list_commands(click.Context(main))  # loads the verbs the CLI imports only when they run
    assert leaves(main, ()) == []


def test_remote_add_and_remove_speak_json(work: Path, tmp_path: Path) -> None:
    import json

    code, out, err = run(work, "remote", "add", "origin", str(tmp_path / "remote"), "--json")
    assert code == 0 and json.loads(out)["remote"] == "origin", err
    code, out, err = run(work, "remote", "remove", "origin", "--json")
    assert code == 0 and json.loads(out) == {"v": 1, "removed": "origin"}, err


def test_format_doc_states_the_chunker_the_code_uses() -> None:
    import re

    text = (Path(__file__).parents[2] / "docs" / "FORMAT.md").read_text()
    found = re.search(r"min (\d+) KiB, average ~(\d+) KiB, max (\d+) KiB", text)
    assert found, "docs/FORMAT.md no longer states the FastCDC sizes"
    assert tuple(int(g) * 1024 for g in found.groups()) == (objects.CDC_MIN, objects.CDC_AVG, objects.CDC_MAX)
    assert "one SQLite transaction" not in text  # a snapshot commits its index row and its ref in two


def test_merge_says_fast_forward_once(work: Path) -> None:
    assert run(work, "branch", "side")[0] == 0
    assert run(work, "switch", "side")[0] == 0
    (work / "a.txt").write_text("three\n")
    assert run(work, "snapshot", "-m", "side")[0] == 0
    assert run(work, "switch", "main")[0] == 0
    code, out, err = run(work, "merge", "side")
    assert code == 0, err
    assert sum("fast-forward" in line for line in out.splitlines()) == 1, out
