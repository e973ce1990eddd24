"""`agentsnap merge` on a real working tree: clean merges, conflicts, --continue, --abort, world edge cases."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from agentsnap_core import Repo
from agentsnap_core.format import content
from agentsnap_core.operations import merge as merge_mod
from agentsnap_core.operations.merge_world import marker_lines
from conftest import tree_fingerprint

BASE = "".join(f"line {i}\n" for i in range(1, 11))


def run(root: Path, *args: str) -> tuple[int, str, str]:
    """The real console entry point in a subprocess: exit code and output as a user sees them."""
    proc = subprocess.run([sys.executable, "-m", "agentsnap_core", *args], cwd=root, capture_output=True, text=True, timeout=120)
    return proc.returncode, proc.stdout, proc.stderr


def edit(path: Path, lineno: int, text: str) -> None:
    lines = path.read_text().splitlines(keepends=True)
    lines[lineno - 1] = text + "\n"
    path.write_text("".join(lines))


def two_forks(root: Path, ours: dict[str, bytes | None], theirs: dict[str, bytes | None],
              base: dict[str, bytes] | None = None) -> Repo:
    """main at a base snapshot, then branch `a` (checked out at the end) and branch `b` with their edits."""
    repo = Repo.init(root)
    for name, data in (base if base is not None else {"f.txt": BASE.encode()}).items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    repo.snapshot("base")
    repo.fork(n=1, prefix="b")
    for branch, changes in (("b-1", theirs), ("main", ours)):
        repo.switch(branch)
        for name, data in changes.items():
            p = root / name
            if data is None:
                p.unlink()
            else:
                p.parent.mkdir(parents=True, exist_ok=True)
                p.write_bytes(data)
        repo.snapshot(f"edit on {branch}")
    return repo


def with_line(n: int, text: str, src: str = BASE) -> bytes:
    lines = src.splitlines(keepends=True)
    lines[n - 1] = text + "\n"
    return "".join(lines).encode()


# ------------------------------------------------------------------ the "Must show" flow
def test_forks_editing_different_lines_merge_cleanly_into_a_two_parent_snapshot(tmp_path: Path) -> None:
    root = tmp_path / "w"
    repo = two_forks(root, {"f.txt": with_line(2, "ours two")}, {"f.txt": with_line(8, "theirs eight")})
    ours, theirs = repo.resolve("main"), repo.resolve("b-1")
    code, out, err = run(root, "merge", "b-1")
    assert code == 0, out + err
    text = (root / "f.txt").read_text()
    assert "ours two\n" in text and "theirs eight\n" in text and not marker_lines(text.encode())
    merged = Repo.open(root).get("main")
    assert merged.parents == [ours, theirs]
    assert merged.manifest["meta"]["merge"]["base"] == repo.resolve("b-1~1")
    assert run(root, "status", "--json")[1] and json.loads(run(root, "status", "--json")[1])["clean"]
    assert Repo.open(root).verify()["ok"]


def test_same_line_conflict_writes_git_markers_and_exits_1(tmp_path: Path) -> None:
    root = tmp_path / "w"
    repo = two_forks(root, {"f.txt": with_line(5, "ours five")}, {"f.txt": with_line(5, "theirs five")})
    head = repo.resolve("main")
    code, out, _ = run(root, "merge", "b-1")
    assert code == 1
    assert "CONFLICT (content) world: f.txt" in out
    text = (root / "f.txt").read_text()
    assert "<<<<<<< main\nours five\n=======\ntheirs five\n>>>>>>> b-1\n" in text
    assert text.startswith("line 1\n") and text.endswith("line 10\n")
    assert Repo.open(root).resolve("main") == head  # nothing committed yet
    code, out, _ = run(root, "merge", "--status", "--json")
    state = json.loads(out)
    assert state["in_progress"] and [c["path"] for c in state["conflicts"]] == ["f.txt"]


def test_continue_after_editing_creates_a_snapshot_with_two_parents(tmp_path: Path) -> None:
    root = tmp_path / "w"
    repo = two_forks(root, {"f.txt": with_line(5, "ours five")}, {"f.txt": with_line(5, "theirs five")})
    ours, theirs = repo.resolve("main"), repo.resolve("b-1")
    assert run(root, "merge", "b-1")[0] == 1
    code, _, err = run(root, "merge", "--continue")
    assert code == 2 and "conflict markers remain: f.txt" in err  # refuses while markers are there
    (root / "f.txt").write_bytes(with_line(5, "both fives"))
    code, out, err = run(root, "merge", "--continue", "--json")
    assert code == 0, err
    res = json.loads(out)
    assert res["status"] == "merged"
    snap = Repo.open(root).get("main")
    assert snap.id == res["snapshot"] and snap.parents == [ours, theirs]
    entries = {e[0]: e for e in Repo.open(root).world_entries(snap)}
    assert content.get_bytes(Repo.open(root).objects, entries["f.txt"][4]) == with_line(5, "both fives")
    assert merge_mod.merge_state(Repo.open(root)) is None
    assert Repo.open(root).refs.get_ref("refs/merge/_") is None
    assert run(root, "merge", "--continue")[0] == 2  # nothing left to continue


def test_abort_restores_the_pre_merge_tree_byte_identically(tmp_path: Path) -> None:
    root = tmp_path / "w"
    repo = two_forks(
        root,
        {"f.txt": with_line(5, "ours five"), "bin.dat": b"\x00ours\x01", "tool.sh": b"#!/bin/sh\necho ours\n"},
        {"f.txt": with_line(5, "theirs five"), "bin.dat": b"\x00theirs\x02", "extra/new.txt": b"theirs only\n"},
        base={"f.txt": BASE.encode(), "bin.dat": b"\x00base", "tool.sh": b"#!/bin/sh\necho base\n"},
    )
    os.chmod(root / "tool.sh", 0o755)
    repo.snapshot("mode")
    repo.append_message("user", "hello")
    repo.snapshot("trace")
    before = tree_fingerprint(root)
    trace_before = Repo.open(root).messages()
    head = repo.resolve("main")
    assert run(root, "merge", "b-1")[0] == 1
    assert tree_fingerprint(root) != before
    (root / "scratch.txt").write_text("written while resolving\n")
    code, out, _ = run(root, "merge", "--abort")
    assert code == 0 and "aborted" in out
    assert tree_fingerprint(root) == before
    again = Repo.open(root)
    assert again.messages() == trace_before
    assert again.resolve("main") == head
    assert again.status()["clean"]
    assert merge_mod.merge_state(again) is None


# ------------------------------------------------------------------ whole-file conflicts
def test_binary_conflict_keeps_both_versions_and_continue_waits_for_a_choice(tmp_path: Path) -> None:
    root = tmp_path / "w"
    repo = two_forks(root, {"img.png": b"\x89PNG\x00ours"}, {"img.png": b"\x89PNG\x00theirs"},
                     base={"img.png": b"\x89PNG\x00base"})
    code, out, _ = run(root, "merge", "b-1", "--json")
    assert code == 1
    (conflict,) = json.loads(out)["conflicts"]
    assert conflict["kind"] == "binary" and conflict["path"] == "img.png"
    assert (root / "img.png~ours").read_bytes() == b"\x89PNG\x00ours"
    assert (root / "img.png~theirs").read_bytes() == b"\x89PNG\x00theirs"
    assert not (root / "img.png").exists()  # no placeholder
    code, _, err = run(root, "merge", "--continue")
    assert code == 2 and "img.png~ours" in err
    os.replace(root / "img.png~theirs", root / "img.png")
    (root / "img.png~ours").unlink()
    assert run(root, "merge", "--continue")[0] == 0
    entries = {e[0]: e for e in Repo.open(root).world_entries("main")}
    assert set(entries) == {"img.png"}
    del repo


def test_binary_changed_on_one_side_only_merges_cleanly(tmp_path: Path) -> None:
    root = tmp_path / "w"
    two_forks(root, {"f.txt": with_line(1, "x")}, {"img.png": b"\x00new"}, base={"f.txt": BASE.encode(), "img.png": b"\x00old"})
    assert run(root, "merge", "b-1")[0] == 0
    assert (root / "img.png").read_bytes() == b"\x00new"


def test_modify_delete_and_add_add_are_reported_by_path(tmp_path: Path) -> None:
    root = tmp_path / "w"
    two_forks(
        root,
        {"gone.txt": None, "new.txt": b"ours\n", "del2.txt": b"changed by ours\n"},
        {"gone.txt": b"changed by theirs\n", "new.txt": b"theirs\n", "del2.txt": None},
        base={"gone.txt": b"base\n", "del2.txt": b"base2\n", "keep.txt": b"k\n"},
    )
    code, out, _ = run(root, "merge", "b-1", "--json")
    assert code == 1
    got = {(c["kind"], c["path"]): c for c in json.loads(out)["conflicts"]}
    assert got[("modify/delete", "gone.txt")]["deleted_by"] == "ours"
    assert got[("modify/delete", "del2.txt")]["deleted_by"] == "theirs"
    assert ("add/add", "new.txt") in got
    assert (root / "gone.txt").read_text() == "changed by theirs\n"  # the changed side is kept
    assert (root / "del2.txt").read_text() == "changed by ours\n"
    assert "<<<<<<< main\nours\n=======\ntheirs\n>>>>>>> b-1\n" == (root / "new.txt").read_text()
    _, text, _ = run(root, "merge", "--status")
    assert "CONFLICT (modify/delete) world: gone.txt" in text and "CONFLICT (add/add) world: new.txt" in text


def test_file_directory_and_mode_conflicts_are_reported(tmp_path: Path) -> None:
    root = tmp_path / "w"
    repo = Repo.init(root)
    (root / "x").write_text("a file\n")
    (root / "run.sh").write_text("echo\n")
    os.chmod(root / "run.sh", 0o644)
    repo.snapshot("base")
    repo.fork(n=1, prefix="b")
    repo.switch("b-1")
    (root / "x").unlink()
    (root / "x").mkdir()
    (root / "x" / "inside.txt").write_text("theirs\n")
    os.chmod(root / "run.sh", 0o755)
    repo.snapshot("theirs")
    repo.switch("main")
    (root / "x").write_text("ours changed the file\n")
    os.chmod(root / "run.sh", 0o600)
    repo.snapshot("ours")
    res = merge_mod.merge(repo, "b-1")
    kinds = {(c["kind"], c["path"]) for c in res.conflicts}
    assert ("file/directory", "x") in kinds and ("mode", "run.sh") in kinds
    assert (root / "x" / "inside.txt").read_text() == "theirs\n"
    assert (root / "x~ours").read_text() == "ours changed the file\n"
    assert os.stat(root / "run.sh").st_mode & 0o777 == 0o600  # ours until resolved
    merge_mod.merge_abort(repo)


def test_identical_content_rename_is_followed(tmp_path: Path) -> None:
    root = tmp_path / "w"
    repo = two_forks(root, {"f.txt": with_line(3, "ours three")}, {"f.txt": None, "moved/g.txt": BASE.encode()})
    res = merge_mod.merge(repo, "b-1")
    assert res.status == "merged", res.conflicts
    assert not (root / "f.txt").exists()
    assert "ours three" in (root / "moved" / "g.txt").read_text()
    assert any("followed rename f.txt -> moved/g.txt" in n for n in res.notes)


def test_rename_to_two_names_is_a_conflict(tmp_path: Path) -> None:
    root = tmp_path / "w"
    repo = two_forks(root, {"f.txt": None, "a.txt": BASE.encode()}, {"f.txt": None, "b.txt": BASE.encode()})
    res = merge_mod.merge(repo, "b-1")
    (c,) = res.conflicts
    assert c["kind"] == "rename/rename" and c["paths"] == ["f.txt", "a.txt", "b.txt"]


# ------------------------------------------------------------------ strategies, guards, fast paths
@pytest.mark.parametrize("strategy", ["ours", "theirs"])
def test_strategy_settles_conflicts_to_one_side(tmp_path: Path, strategy: str) -> None:
    root = tmp_path / "w"
    two_forks(root, {"f.txt": with_line(5, "ours five"), "b.bin": b"\x00o"},
              {"f.txt": with_line(5, "theirs five"), "b.bin": b"\x00t"}, base={"f.txt": BASE.encode(), "b.bin": b"\x00"})
    code, out, _ = run(root, "merge", "b-1", "--strategy", strategy, "--json")
    assert code == 0
    res = json.loads(out)
    assert {c["path"] for c in res["resolved"]} == {"f.txt", "b.bin"}
    assert f"{strategy} five\n" in (root / "f.txt").read_text()
    assert (root / "b.bin").read_bytes() == (b"\x00o" if strategy == "ours" else b"\x00t")


def test_merge_refuses_a_dirty_tree_and_a_second_merge(tmp_path: Path) -> None:
    root = tmp_path / "w"
    two_forks(root, {"f.txt": with_line(5, "o")}, {"f.txt": with_line(5, "t")})
    (root / "f.txt").write_text("uncommitted\n")
    code, _, err = run(root, "merge", "b-1")
    assert code == 2 and "changes since the last snapshot" in err
    assert (root / "f.txt").read_text() == "uncommitted\n"
    Repo.open(root).snapshot("commit it")
    assert run(root, "merge", "b-1")[0] == 1
    code, _, err = run(root, "merge", "b-1")
    assert code == 2 and "merge is in progress" in err


def test_fast_forward_and_up_to_date(tmp_path: Path) -> None:
    root = tmp_path / "w"
    repo = Repo.init(root)
    (root / "f.txt").write_text(BASE)
    base = repo.snapshot("base").id
    repo.fork(n=1, prefix="b")
    repo.switch("b-1")
    (root / "f.txt").write_text("changed\n")
    tip = repo.snapshot("tip").id
    repo.switch("main")
    res = merge_mod.merge(repo, "b-1")
    assert res.status == "fast-forward" and repo.resolve("main") == tip
    assert (root / "f.txt").read_text() == "changed\n"
    assert merge_mod.merge(repo, base).status == "up-to-date"


def test_no_ff_makes_a_merge_snapshot(tmp_path: Path) -> None:
    root = tmp_path / "w"
    repo = Repo.init(root)
    (root / "f.txt").write_text(BASE)
    base = repo.snapshot("base").id
    repo.fork(n=1, prefix="b")
    repo.switch("b-1")
    (root / "f.txt").write_text("changed\n")
    tip = repo.snapshot("tip").id
    repo.switch("main")
    res = merge_mod.merge(repo, "b-1", no_ff=True)
    assert res.status == "merged" and repo.get("main").parents == [base, tip]


def test_diff_conflict_shows_base_ours_and_theirs(tmp_path: Path) -> None:
    root = tmp_path / "w"
    two_forks(root, {"f.txt": with_line(5, "ours five")}, {"f.txt": with_line(5, "theirs five")})
    assert run(root, "merge", "b-1")[0] == 1
    code, out, _ = run(root, "diff", "--conflict", "f.txt")
    assert code == 0
    assert "--- base/f.txt\n+++ ours/f.txt (main)" in out and "+ours five" in out
    assert "+++ theirs/f.txt (b-1)" in out and "+theirs five" in out and "-line 5" in out
    code, out, _ = run(root, "diff", "--conflict", "f.txt", "--json")
    view = json.loads(out)
    assert view["base"] == BASE and "<<<<<<<" in view["working"]
    code, _, err = run(root, "diff", "--conflict", "nope.txt")
    assert code == 2 and "not part of the merge" in err


def test_symlink_changed_on_both_sides_keeps_both_links(tmp_path: Path) -> None:
    root = tmp_path / "w"
    repo = Repo.init(root)
    (root / "a.txt").write_text("a\n")
    (root / "b.txt").write_text("b\n")
    (root / "c.txt").write_text("c\n")
    os.symlink("a.txt", root / "link")
    repo.snapshot("base")
    repo.fork(n=1, prefix="b")
    repo.switch("b-1")
    (root / "link").unlink()
    os.symlink("c.txt", root / "link")
    repo.snapshot("theirs")
    repo.switch("main")
    (root / "link").unlink()
    os.symlink("b.txt", root / "link")
    repo.snapshot("ours")
    res = merge_mod.merge(repo, "b-1")
    (c,) = res.conflicts
    assert c["kind"] == "symlink" and c["files"] == ["link~ours", "link~theirs"]
    assert os.readlink(root / "link~ours") == "b.txt" and os.readlink(root / "link~theirs") == "c.txt"


def test_criss_cross_history_merges_against_the_newest_common_ancestor(tmp_path: Path) -> None:
    root = tmp_path / "w"
    repo = Repo.init(root)
    (root / "f.txt").write_text(BASE)
    base = repo.snapshot("base").id
    # two snapshots that each have both x and y as parents -> two lowest common ancestors
    (root / "f.txt").write_bytes(with_line(1, "x"))
    x = repo.snapshot("x", parents=[base], ref="refs/heads/x", move_head=False).id
    (root / "f.txt").write_bytes(with_line(10, "y"))
    y = repo.snapshot("y", parents=[base], ref="refs/heads/y", move_head=False).id
    (root / "f.txt").write_bytes(with_line(10, "y", with_line(1, "x").decode()))
    m1 = repo.snapshot("m1", parents=[x, y], ref="refs/heads/m1", move_head=False).id
    (root / "f.txt").write_bytes(with_line(5, "five", with_line(10, "y", with_line(1, "x").decode()).decode()))
    m2 = repo.snapshot("m2", parents=[y, x], ref="refs/heads/m2", move_head=False).id
    assert sorted(merge_mod.merge_bases(repo, m1, m2)) == sorted([x, y])
    repo.restore(m1)
    res = merge_mod.merge(repo, "m2")
    assert res.status == "merged" and any("criss-cross" in n for n in res.notes)
    assert "five\n" in (root / "f.txt").read_text()


def test_unrelated_histories_merge_from_an_empty_base(tmp_path: Path) -> None:
    root = tmp_path / "w"
    repo = Repo.init(root)
    (root / "mine.txt").write_text("mine\n")
    (root / "both.txt").write_text("same\n")
    repo.snapshot("ours")
    (root / "mine.txt").unlink()
    (root / "theirs.txt").write_text("theirs\n")
    lone = repo.snapshot("unrelated root", parents=[], ref="refs/heads/lone", move_head=False).id
    repo.restore("main~0")
    res = merge_mod.merge(repo, lone)
    assert res.status == "merged" and res.base is None
    assert any("no common ancestor" in n for n in res.notes)
    assert {p.name for p in root.iterdir() if p.name != ".agentsnap"} == {"mine.txt", "theirs.txt", "both.txt"}


def test_abort_keeps_the_work_done_while_resolving_in_an_undo_snapshot(tmp_path: Path) -> None:
    """``merge --abort`` put the tree back and threw away what was done meanwhile (a conflict resolved by hand, a
    file written): now that state is snapshotted first, as restore does, and the abort names it."""
    root = tmp_path / "w"
    two_forks(root, {"f.txt": with_line(5, "ours five")}, {"f.txt": with_line(5, "theirs five")})
    assert run(root, "merge", "b-1")[0] == 1
    (root / "f.txt").write_bytes(with_line(5, "resolved by hand"))
    (root / "notes.txt").write_text("written while resolving\n")
    resolving = tree_fingerprint(root)
    code, out, err = run(root, "merge", "--abort", "--json")
    assert code == 0, err
    res = json.loads(out)
    assert (root / "f.txt").read_bytes() == with_line(5, "ours five") and not (root / "notes.txt").exists()
    with Repo.open(root) as repo:
        assert repo.refs.get_ref("refs/undo/restore") == res["undo"]
    code, out, err = run(root, "merge", "--abort")
    assert code == 2  # (nothing left to abort)
    code, _, err = run(root, "restore", res["undo"])
    assert code == 0, err
    assert tree_fingerprint(root) == resolving


def test_abort_right_after_the_conflict_names_an_undo_too(tmp_path: Path) -> None:
    root = tmp_path / "w"
    two_forks(root, {"f.txt": with_line(5, "ours five")}, {"f.txt": with_line(5, "theirs five")})
    assert run(root, "merge", "b-1")[0] == 1
    code, out, err = run(root, "merge", "--abort")
    assert code == 0, err
    assert "agentsnap restore" in out, out


def test_status_says_a_merge_is_in_progress_and_a_snapshot_is_refused_until_it_ends(tmp_path: Path) -> None:
    """While a merge waits on conflicts, `status` said only "M f.txt", and `snapshot` stored the conflict markers as
    an ordinary snapshot and moved HEAD, after which `merge --continue` refused ("HEAD moved") and only an abort
    was left. Now status names the merge and its conflicts, and snapshot, a whole-tree restore and switch refuse
    (as git refuses to commit or check out over unmerged paths) until --continue or --abort (a path restore, taking
    one side of a file, is allowed); the merge then finishes as usual."""
    root = tmp_path / "w"
    two_forks(root, {"f.txt": with_line(5, "ours five")}, {"f.txt": with_line(5, "theirs five")})
    with Repo.open(root) as repo:
        theirs = repo.resolve("b-1")
    assert run(root, "merge", "b-1")[0] == 1
    code, out, _ = run(root, "status")
    assert f"merge of {theirs[:12]} in progress" in out and "f.txt" in out and "merge --continue" in out, out
    code, out, _ = run(root, "status", "--json")
    st = json.loads(out)
    assert st["merge"]["theirs"] == theirs and st["merge"]["conflicts"] == ["f.txt"]
    for args in (["snapshot", "-m", "oops"], ["snapshot", "-m", "oops", "--agent", "x"]):  # fast path and click's
        code, out, err = run(root, *args)
        assert code == 2 and "merge" in err and "--continue" in err and "Traceback" not in err, err
    with Repo.open(root) as repo:
        assert len(repo.log("main")) == 2  # base, edit on main: nothing stored
    for args in (["restore", "main"], ["restore", "--json", "main"], ["switch", "b-1"]):  # would move HEAD too
        code, out, err = run(root, *args)
        assert code == 2 and "merge" in err and "--continue" in err and "Traceback" not in err, (args, err)
    assert marker_lines((root / "f.txt").read_bytes())  # (nothing was touched)
    code, _, err = run(root, "restore", "main", "--", "f.txt")  # one side of a conflicted file: allowed, as git
    assert code == 0, err
    assert (root / "f.txt").read_bytes() == with_line(5, "ours five")
    (root / "f.txt").write_bytes(with_line(5, "resolved"))
    code, out, err = run(root, "merge", "--continue")
    assert code == 0, err
    code, out, _ = run(root, "status", "--json")
    assert "merge" not in json.loads(out)
    assert run(root, "snapshot", "-m", "after")[0] == 0
