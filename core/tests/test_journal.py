"""The change journal (inotify) behind the resident process's captures: a capture that reads only the directories
the kernel reported changed must give exactly what a full walk gives, whatever happened to the tree."""

from __future__ import annotations

import os
import random
import shutil
import sys
from pathlib import Path

import pytest
from agentsnap_core.layers import journal, world

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify is Linux's")


@pytest.fixture
def keeper(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """This test process plays both the resident process (keeps watches, reads events, takes requests) and its
    child (captures with the watch)."""
    monkeypatch.setattr(journal, "_ACTIVE", True)
    monkeypatch.setattr(journal, "REQUESTS", str(tmp_path / "requests"))
    monkeypatch.setattr(journal, "WATCHES", {})
    yield tmp_path / "requests"
    for w in journal.WATCHES.values():
        w.close()


class Spy:
    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.rescans: list[set[str]] = []
        real = world._rescan

        def rescan(root, ignore, cache, listing, changed, special, *rest):  # type: ignore[no-untyped-def]
            self.rescans.append(set(changed))
            return real(root, ignore, cache, listing, changed, special, *rest)

        monkeypatch.setattr(world, "_rescan", rescan)


def _capture(root: Path, cache_file: Path, requests: Path) -> tuple[list[world.Entry], list[str], list[str], list[str]]:
    """One command of the resident process: read events, capture (with the stat cache on disk), save the cache,
    then let the parent take what the capture asked to watch."""
    journal.drain_all()
    cache = world.StatCache.load(cache_file)
    ignore = world.Ignore(root)
    entries, new, stats = world.capture(root, None, ignore, cache, watch=journal.lookup(str(root)))
    new.save(cache_file)
    journal.take_requests(str(requests))
    return entries, sorted(ignore.left_out), sorted(stats.special), sorted(ignore.git_dirs)


def _truth(root: Path) -> tuple[list[world.Entry], list[str], list[str], list[str]]:
    ignore = world.Ignore(root)
    entries, _, stats = world.capture(root, None, ignore)
    return entries, sorted(ignore.left_out), sorted(stats.special), sorted(ignore.git_dirs)


def build_tree(root: Path) -> None:
    """Four packages of five modules and five notes each, and a file at the top (41 files)."""
    for i in range(4):
        sub = root / f"pkg{i}" / "inner"
        sub.mkdir(parents=True)
        for j in range(5):
            (sub / f"m{j}.py").write_text(f"# {i} {j}\n" * (j + 1))
            (sub.parent / f"n{j}.txt").write_text(str(j))
    (root / "top.txt").write_text("top")


def _files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink() and ".agentsnap" not in p.parts)


def _dirs(root: Path) -> list[Path]:
    return [root] + sorted(p for p in root.rglob("*") if p.is_dir() and not p.is_symlink() and ".agentsnap" not in p.parts)


OPS = ["new", "new", "edit", "edit", "same_size", "delete", "mkdirs", "rmtree", "rename", "move", "chmod", "chmod_dir",
       "link", "relink", "secret", "hardlink", "via_link", "via_link", "mvdir", "remake", "move_in", "out_and_back",
       "fifo", "fifo_gone", "gitdir", "gitdir_gone", "nothing"]


def _mutate(root: Path, rng: random.Random, n: int, ops: list[str] = OPS) -> None:
    for _ in range(rng.randint(1, 4)):
        files, dirs = _files(root), _dirs(root)
        op = rng.choice(ops)
        d = rng.choice(dirs)
        if op == "new" or (not files and op in ("edit", "same_size", "delete", "rename", "move", "chmod", "hardlink")):
            (d / f"f{n}_{rng.randint(0, 999)}.txt").write_bytes(os.urandom(rng.randint(0, 300)))
        elif op == "edit":
            rng.choice(files).write_bytes(os.urandom(rng.randint(1, 300)))
        elif op == "same_size":  # same size, same second: only the content differs
            f = rng.choice(files)
            st = f.stat()
            f.write_bytes(os.urandom(st.st_size))
            os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
        elif op == "delete":
            rng.choice(files).unlink()
        elif op == "mkdirs":
            deep = d / f"d{n}" / "a" / "b"
            deep.mkdir(parents=True, exist_ok=True)
            (deep / "x.txt").write_text(f"made in round {n}")
            (deep.parent / "y.txt").write_text("y")
        elif op == "rmtree" and d != root:
            shutil.rmtree(d)
        elif op == "rename":
            f = rng.choice(files)
            f.rename(f.with_name(f"r{n}_{f.name}"))
        elif op == "move":
            rng.choice(files).rename(d / f"m{n}.bin")
        elif op == "chmod":
            f = rng.choice(files)
            f.chmod(f.stat().st_mode ^ 0o111)
        elif op == "chmod_dir" and d != root:
            d.chmod(0o700 if d.stat().st_mode & 0o077 else 0o755)
        elif op == "link":
            target = d / f"l{n}"
            if not target.exists() and not target.is_symlink():
                target.symlink_to(f"somewhere/{n}")
        elif op == "relink":
            links = [p for p in root.rglob("l*") if p.is_symlink()]
            if links:
                p = rng.choice(links)
                p.unlink()
                p.symlink_to(f"elsewhere/{n}")
        elif op == "secret":
            (d / ".env").write_text(f"TOKEN={n}")
        elif op == "hardlink":  # a second name; written through the first, in another directory
            f = rng.choice(files)
            other = d / f"h{n}"
            if not other.exists():
                os.link(f, other)
                with open(f, "r+b") as fh:
                    fh.write(b"changed through the other name " + str(n).encode())
        elif op == "via_link":  # a file with two names, written through one: no event where the other lives
            linked = [f for f in files if f.stat().st_nlink > 1]
            if linked:
                with open(rng.choice(linked), "ab") as fh:
                    fh.write(b"appended through one name " + str(n).encode())
        elif op == "mvdir" and d != root:
            d.rename(d.with_name(f"{d.name}_mv{n}"))
        elif op == "fifo" and not (d / f"p{n}").exists():  # a named pipe: never captured, always named
            os.mkfifo(d / f"p{n}")
        elif op == "gitdir" and not (d / ".git").exists():  # a repository made inside: its .git left out, named
            (d / ".git" / "objects").mkdir(parents=True)
            (d / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
        elif op == "gitdir_gone":
            gits = [p for p in root.rglob(".git") if p.is_dir()]
            if gits:
                shutil.rmtree(rng.choice(gits))
        elif op == "fifo_gone":
            pipes = [p for p in root.rglob("p*") if p.is_fifo()]
            if pipes:
                rng.choice(pipes).unlink()
        elif op == "move_in" and not (d / f"in{n}").exists():  # a directory made outside the tree (never watched),
            outside = root.parent / f"outside{n}"  # then moved into it
            (outside / "a" / "b").mkdir(parents=True)
            (outside / "a" / "b" / "deep.txt").write_text(f"from outside {n}")
            (outside / "top.txt").write_text("t")
            outside.rename(d / f"in{n}")
        elif op == "out_and_back" and d != root and not d.with_name(f"{d.name}_back{n}").exists():  # moved out of the tree, changed there, moved back under a new name
            away = root.parent / f"away{n}"
            d.rename(away)
            inside = [p for p in away.rglob("*") if p.is_file() and not p.is_symlink()]
            if inside:
                rng.choice(inside).write_bytes(b"changed while outside " + str(n).encode())
            (away / f"made_outside{n}.txt").write_text("o")
            away.rename(d.with_name(f"{d.name}_back{n}"))
        elif op == "remake" and d != root:  # rm -rf d, then the same directories again, a file in the deepest
            subs = sorted(p.relative_to(d) for p in d.rglob("*") if p.is_dir() and not p.is_symlink())
            shutil.rmtree(d)
            for sub in [Path("."), *subs]:
                (d / sub).mkdir(parents=True, exist_ok=True)
            ((d / subs[-1]) if subs else d).joinpath(f"remade{n}.txt").write_text(str(n))


@pytest.mark.parametrize("racy", ["racy window", "no racy window"])
@pytest.mark.parametrize("seed", range(int(os.environ.get("JSEEDS", 5))))
def test_a_capture_from_the_journal_equals_a_full_walk_after_any_change(
    tmp_path: Path, keeper: Path, monkeypatch: pytest.MonkeyPatch, seed: int, racy: str
) -> None:
    """Random changes (files, directories made and removed, renames and moves, modes, links, secrets, hard links
    written through their other name), a capture after each round: the journal's equals a full walk's. Without the
    racy window (every file just written counts as settled) nothing but the journal tells a change apart."""
    if racy == "no racy window":
        monkeypatch.setattr(world, "RACY_WINDOW_NS", -1)
    root = tmp_path / "tree"
    build_tree(root)
    cache_file = tmp_path / "statcache.msgpack"
    spy = Spy(monkeypatch)
    rng = random.Random(seed)
    assert _capture(root, cache_file, keeper) == _truth(root)  # first: walks, asks for a watch
    assert _capture(root, cache_file, keeper) == _truth(root)  # second: walks under the watch, keeps its token
    assert not spy.rescans
    for n in range(40):
        _mutate(root, rng, n)
        assert _capture(root, cache_file, keeper) == _truth(root), f"seed {seed}, round {n}"
    assert len(spy.rescans) >= 10  # the journal served many rounds (a moved directory makes the next one walk)


def test_unchanged_tree_reads_no_directory_and_a_change_reads_only_its_directory(
    tmp_path: Path, keeper: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "tree"
    for i in range(20):
        (root / f"d{i}").mkdir(parents=True)
        (root / f"d{i}" / "f.txt").write_text(str(i))
    cache_file = tmp_path / "statcache.msgpack"
    _capture(root, cache_file, keeper)
    _capture(root, cache_file, keeper)
    spy = Spy(monkeypatch)
    scanned: list[str] = []
    real_scandir = os.scandir
    monkeypatch.setattr(os, "scandir", lambda p: (scanned.append(str(p)), real_scandir(p))[1])
    assert _capture(root, cache_file, keeper) == _truth(root)
    assert spy.rescans == [set()]
    scanned.clear()
    (root / "d7" / "f.txt").write_text("changed")
    entries, _, _, _ = _capture(root, cache_file, keeper)
    assert spy.rescans[-1] == {"d7"}
    assert scanned == [str(root / "d7")]
    assert entries == _truth(root)[0]


def test_a_changed_ignore_file_or_an_overflow_makes_the_capture_walk(
    tmp_path: Path, keeper: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "tree"
    (root / "build").mkdir(parents=True)
    (root / "build" / "out.o").write_text("o")
    (root / "src.c").write_text("c")
    cache_file = tmp_path / "statcache.msgpack"
    _capture(root, cache_file, keeper)
    _capture(root, cache_file, keeper)
    spy = Spy(monkeypatch)
    (root / world.IGNORE_FILE).write_text("build/\n")
    assert _capture(root, cache_file, keeper) == _truth(root)
    assert not spy.rescans  # other rules: the listing is not theirs
    assert "build/out.o" not in [e[0] for e in _truth(root)[0]]
    monkeypatch.setattr(journal, "_log", lambda m: None)
    w = journal.WATCHES[str(root)]
    w.stop("the kernel's event queue overflowed")  # as drain does on IN_Q_OVERFLOW
    (root / "src.c").write_text("changed")
    assert _capture(root, cache_file, keeper) == _truth(root)
    assert not spy.rescans  # walked
    assert journal.WATCHES[str(root)] is not w  # and asked for a new watch, which the parent made


@pytest.mark.parametrize("how", ["an empty directory", "a directory with files", "nested directories"])
def test_a_directory_removed_and_made_again_before_the_events_are_read_is_read_whole(
    tmp_path: Path, keeper: Path, how: str
) -> None:
    """``rm -rf a && mkdir -p a/b && echo > a/b/f`` between two commands: the kernel reports ``a`` made again, but
    ``a/b`` (which the last listing also had) is made before anything watches it, so no event ever names it. Every
    directory the watch adds below a new one must be read by the next capture, or ``a/b/f`` is silently missing."""
    root = tmp_path / "tree"
    (root / "a" / "b").mkdir(parents=True)
    if how == "a directory with files":
        (root / "a" / "b" / "old.txt").write_text("old")
    if how == "nested directories":
        (root / "a" / "b" / "c").mkdir()
    (root / "top.txt").write_text("top")
    cache_file = tmp_path / "statcache.msgpack"
    _capture(root, cache_file, keeper)
    _capture(root, cache_file, keeper)
    shutil.rmtree(root / "a")
    (root / "a" / "b").mkdir(parents=True)
    (root / "a" / "b" / "f.txt").write_text("made before any watch")
    if how == "nested directories":
        (root / "a" / "b" / "c").mkdir()
        (root / "a" / "b" / "c" / "g.txt").write_text("deeper")
    assert _capture(root, cache_file, keeper) == _truth(root)
    assert _capture(root, cache_file, keeper) == _truth(root)


def test_a_tree_with_another_filesystem_mounted_inside_is_never_watched(
    tmp_path: Path, keeper: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A network or FUSE filesystem mounted inside the project changes without an inotify event here: such a tree
    is walked at every capture, never trusted to the journal (the mount table is this test's: mounting needs
    privileges CI does not have)."""
    root = tmp_path / "tree"
    (root / "data").mkdir(parents=True)
    (root / "data" / "f.txt").write_text("1")
    real = str(root.resolve())
    table = [("/", "ext4"), (real + "/data", "nfs4"), (real + "-other", "nfs4")]
    monkeypatch.setattr(journal, "_mounts", lambda: table)
    assert not journal.watchable(real)
    table[1] = (real + "/data", "ext4")  # any filesystem mounted inside: refused, whatever its kind
    assert not journal.watchable(real)
    del table[1]
    assert journal.watchable(real)  # a mount beside the tree (same prefix, other folder) is not inside it
    table[0] = ("/", "nfs4")
    assert not journal.watchable(real)
    table[:] = [("/", "ext4"), (real + "/data", "fuse.sshfs")]
    cache_file = tmp_path / "statcache.msgpack"
    spy = Spy(monkeypatch)
    for n in range(4):
        (root / "data" / "f.txt").write_text(str(n))
        assert _capture(root, cache_file, keeper) == _truth(root)
    assert not spy.rescans and not journal.WATCHES  # never asked for a watch: every capture walked


def test_status_keeps_the_journal_listing_of_a_clean_tree_and_never_of_a_changed_one(
    tmp_path: Path, keeper: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After the resident process restarts (a new watch), `status` alone brings the journal back into use on a
    clean tree (the first asks for the watch, the second keeps its listing, the third reads only what changed), and
    what it reports is a full walk's. With a change in the tree it keeps nothing: the cache would name content
    that was never stored."""
    from agentsnap_core import Repo

    monkeypatch.setattr(world, "RACY_WINDOW_NS", -1)  # files just written count as settled (else each is re-hashed)
    root = tmp_path / "tree"
    for i in range(6):
        (root / f"d{i}").mkdir(parents=True)
        (root / f"d{i}" / "f.txt").write_text(str(i))
    repo = Repo.init(root)
    cache_file = repo.wt_dir / "statcache.msgpack"

    def command(what: str):  # type: ignore[no-untyped-def]
        journal.drain_all()
        out = repo.snapshot("s") if what == "snapshot" else repo.status()
        journal.take_requests(str(keeper))
        return out

    for _ in range(3):
        command("snapshot")
    for w in journal.WATCHES.values():  # the resident process restarts: a new watch, the listing's token is stale
        w.close()
    journal.WATCHES.clear()
    spy = Spy(monkeypatch)
    command("status")
    command("status")
    assert not spy.rescans  # both walked: the first asked for the watch, the second kept the listing
    (root / "d3" / "f.txt").write_text("changed")
    st = command("status")
    assert spy.rescans == [{"d3"}]
    assert st["world"]["modified"] == ["d3/f.txt"]
    before = cache_file.read_bytes()
    command("status")  # a changed file: hashed, not stored, so the cache is left as it was
    assert cache_file.read_bytes() == before
    (root / "d3" / "f.txt").write_text("3")  # back as it was: clean again
    assert command("status")["clean"]
    assert spy.rescans[-1] == {"d3"}
    repo.close()


@pytest.mark.parametrize("racy", ["racy window", "no racy window"])
@pytest.mark.parametrize("seed", range(int(os.environ.get("JSEEDS", 3))))
def test_a_snapshot_from_the_tip_records_what_a_full_walk_gives(
    tmp_path: Path, keeper: Path, monkeypatch: pytest.MonkeyPatch, seed: int, racy: str
) -> None:
    """An unchanged tree's snapshot in the resident process is answered from the tip beside the stat cache (the
    journal says no directory changed since): neither the cache nor the tree is read. Random rounds of changes,
    or none, each then snapshot and status through the Repo: what the snapshot records (tree, counts, files left
    out, FIFOs named) always equals a full walk's, status agrees, and rounds without a change are the tip's."""
    from agentsnap_core import Repo

    if racy == "no racy window":  # files just written count as settled (with the window they are racily clean)
        monkeypatch.setattr(world, "RACY_WINDOW_NS", -1)
    root = tmp_path / "tree"
    for i in range(3):
        (root / f"pkg{i}" / "inner").mkdir(parents=True)
        for j in range(3):
            (root / f"pkg{i}" / "inner" / f"m{j}.py").write_text(f"{i} {j}\n")
    (root / "top.txt").write_text("top")
    repo = Repo.init(root)
    loads: list[int] = []
    real_load = world.StatCache.load.__func__  # type: ignore[attr-defined]
    monkeypatch.setattr(world.StatCache, "load", classmethod(lambda cls, p: loads.append(1) or real_load(cls, p)))
    rng = random.Random(seed)
    from_tip = 0
    for n in range(45):
        if n > 3 and rng.random() < 0.4:
            pass  # no change: the tip answers
        else:
            _mutate(root, rng, n, [op for op in OPS if op not in ("hardlink", "via_link")])  # (files with other
        journal.drain_all()  # names are stat-ed again at every capture: a tree holding one makes no tip)
        loads.clear()
        snap = repo.snapshot(f"s{n}")
        status = repo.status()
        journal.take_requests(str(keeper))
        from_tip += not loads
        entries, left_out, special, git_dirs = _truth(root)
        rec = snap.layers["world"]
        assert repo.world_entries(snap) == entries, f"seed {seed}, round {n}"
        assert (rec["files"], rec.get("left_out", []), rec.get("not_captured", []), rec.get("git_not_captured", [])) == (
            sum(1 for e in entries if e[1] == "f"), left_out, special, git_dirs), f"seed {seed}, round {n}"
        assert status["world"] == {"added": [], "modified": [], "deleted": [], "mode": []}, f"seed {seed}, round {n}"
        assert (status["left_out"], status["not_captured"], status["git_not_captured"]) == (left_out, special, git_dirs)
    assert from_tip >= 5  # the rounds without a change (after the journal engaged) read no stat cache
    repo.close()


def test_relisted_names_the_directories_an_entry_was_made_in_or_left_and_nothing_else(tmp_path: Path) -> None:
    """``Watch.relisted_since``: a directory whose files were only written (or their modes changed) is changed but
    not relisted; one where an entry was created, deleted, moved in or out is both. (The Claude Code helper reuses
    what git ignores while no directory was relisted.)"""
    root = tmp_path / "tree"
    for d in ("write", "mode", "make", "remove", "move_out", "move_in", "quiet"):
        (root / d).mkdir(parents=True)
        (root / d / "f.txt").write_text("x")
    w = journal.Watch(str(root))
    try:
        w.add([""], recurse=True)
        token = w.token()
        (root / "write" / "f.txt").write_text("written")
        (root / "mode" / "f.txt").chmod(0o600)
        (root / "make" / "new.txt").write_text("new")
        (root / "remove" / "f.txt").unlink()
        (root / "move_out" / "f.txt").rename(root / "move_in" / "g.txt")
        w.drain()
        assert w.since(token) == {"write", "mode", "make", "remove", "move_out", "move_in"}
        assert w.relisted_since(token) == {"make", "remove", "move_out", "move_in"}
        later = w.token()
        assert w.relisted_since(later) == set() and w.since(later) == set()
        assert w.relisted_since(["another watch", 0]) is None
        assert journal.Unwatched(str(root)).relisted_since(token) is None
    finally:
        w.close()
