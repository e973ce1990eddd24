"""push / fetch / pull / clone against real remote stores: a directory, S3 (SeaweedFS) and PostgreSQL+S3."""

from __future__ import annotations

import hashlib
import os
import signal
import stat
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from agentsnap_core import Repo
from agentsnap_core.operations.remote import PushRejected, add_remote, clone, fetch, pull, push
from agentsnap_core.stores import open_store


def fingerprint(root: Path) -> dict[str, tuple[Any, ...]]:
    """Kind, mode bits and content digest (or link target) of everything but .agentsnap."""
    out: dict[str, tuple[Any, ...]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        if Path(dirpath) == root:
            dirnames[:] = [d for d in dirnames if d != ".agentsnap"]
        for name in dirnames + filenames:
            full = os.path.join(dirpath, name)
            rel = os.path.relpath(full, root)
            st = os.lstat(full)
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("l", os.readlink(full))
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("d", stat.S_IMODE(st.st_mode))
            else:
                out[rel] = ("f", stat.S_IMODE(st.st_mode), hashlib.sha256(Path(full).read_bytes()).hexdigest())
    return out


def make_agent(root: Path, seed: int = 0, big: int = 600_000) -> Repo:
    """A repository with a realistic tree (text, big binary, exec bit, symlink, empty dir) and a trace."""
    repo = Repo.init(root)
    (root / "src").mkdir()
    (root / "src" / "main.py").write_text(f"print('agent {seed}')\n" * 50)
    (root / "run.sh").write_text("#!/bin/sh\necho hi\n")
    os.chmod(root / "run.sh", 0o755)
    (root / "data.bin").write_bytes(hashlib.shake_256(f"seed{seed}".encode()).digest(big))
    (root / "empty").mkdir()
    os.symlink("src/main.py", root / "link")
    repo.append_message("user", "build it")
    repo.append_message("assistant", "done", tool_calls=[{"name": "write", "args": {"path": "src/main.py"}}])
    repo.snapshot("first", agent="tester", layers={"state": {"step": 1, "notes": ["a", "b"]},
                                                   "effects": {"sent": ["mail-1"]}})  # fmt: skip
    return repo


@pytest.fixture(params=["file", "s3", "combined"])
def remote_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "file":
        return (tmp_path / "remote-store").as_uri()
    return str(request.getfixturevalue(f"{request.param}_url"))


def test_push_clone_restore_is_byte_identical_and_second_push_sends_nothing(tmp_path: Path, remote_url: str) -> None:
    src = make_agent(tmp_path / "a")
    add_remote(src, "origin", remote_url)
    first = push(src)
    assert first.objects > 10 and first.snapshots == 1 and "refs/heads/main" in first.updated

    dst, fetched = clone(remote_url, tmp_path / "b")
    assert fetched.objects == first.objects
    assert fingerprint(tmp_path / "b") == fingerprint(tmp_path / "a")
    assert dst.messages() == src.messages()
    head = src.get("HEAD")
    assert dst.get("HEAD").id == head.id
    for layer in ("trace", "state", "effects"):
        assert dst.read_layer("HEAD", layer) == src.read_layer(head, layer)
    assert dst.verify()["ok"]
    assert dst.status()["clean"]

    again = push(src)
    assert (again.objects, again.snapshots, again.bytes) == (0, 0, 0)
    assert again.up_to_date == ["refs/heads/main"]
    src.close()
    dst.close()


def test_effects_ledger_travels_with_push_and_clone(
    tmp_path: Path, remote_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tool call recorded before the push is replayed (not re-run) by the clone; its ledger verifies."""
    from agentsnap_core.layers.effects import Effects

    monkeypatch.setenv("AGENTSNAP_EFFECTS_KEY", "remote-test-key-0123456789abcdef")
    src = make_agent(tmp_path / "a")
    runs: list[str] = []

    def send_mail(to: str) -> str:
        runs.append(to)
        return f"sent to {to}"

    fx = Effects(src)
    with fx.step(1):
        assert fx.effect(send_mail)("bob@example.com") == "sent to bob@example.com"
    snap = src.snapshot("after the mail")
    pushed = push(src, remote_url)
    assert pushed.ledger >= 1

    dst, fetched = clone(remote_url, tmp_path / "b")
    assert fetched.ledger == pushed.ledger
    report = dst.verify()
    assert report["ok"] and report["effects"]["entries"] == src.verify()["effects"]["entries"]
    assert dst.read_layer("HEAD", "effects") == src.read_layer(snap, "effects")
    replay = Effects(dst)
    with replay.step(1):
        assert replay.effect(send_mail)("bob@example.com") == "sent to bob@example.com"
    assert runs == ["bob@example.com"]  # the clone got the recorded result; the mail went out once
    assert push(src, remote_url).ledger == 0
    src.close()
    dst.close()


def test_second_push_sends_only_the_new_objects(tmp_path: Path, remote_url: str) -> None:
    src = make_agent(tmp_path / "a")
    add_remote(src, "origin", remote_url)
    push(src)
    before = set(open_store(remote_url).objects.iter_oids())
    (tmp_path / "a" / "src" / "main.py").write_text("changed\n")
    src.snapshot("second")
    second = push(src)
    after = set(open_store(remote_url).objects.iter_oids())
    assert second.objects == len(after - before) and second.snapshots == 1
    assert 0 < second.objects < 6  # the new file, tree, env, trace, manifest - not the 600 kB blob again
    src.close()


def test_divergent_pushes_second_is_refused_then_pulls_merges_and_pushes(tmp_path: Path, remote_url: str) -> None:
    origin = make_agent(tmp_path / "origin")
    add_remote(origin, "origin", remote_url)
    push(origin)
    alice, _ = clone(remote_url, tmp_path / "alice")
    bob, _ = clone(remote_url, tmp_path / "bob")

    (tmp_path / "alice" / "alice.txt").write_text("from alice\n")
    alice.snapshot("alice works")
    push(alice)

    (tmp_path / "bob" / "bob.txt").write_text("from bob\n")
    bobs = bob.snapshot("bob works").id
    with pytest.raises(PushRejected, match="not a fast-forward.*agentsnap pull") as info:
        push(bob)
    assert "refs/heads/main" in info.value.rejected
    assert open_store(remote_url).refs.get_ref("refs/heads/main") == alice.get("HEAD").id

    pulled = pull(bob)
    assert pulled.merge is not None and pulled.merge["status"] == "merged"
    merged = bob.get("HEAD")
    assert merged.parents == [bobs, alice.get("HEAD").id]
    assert (tmp_path / "bob" / "alice.txt").read_text() == "from alice\n"
    assert (tmp_path / "bob" / "bob.txt").read_text() == "from bob\n"
    pushed = push(bob)
    assert pushed.updated["refs/heads/main"][1] == merged.id

    ff = pull(alice)
    assert ff.merge == {"status": "fast-forward", "snapshot": merged.id}
    assert fingerprint(tmp_path / "alice") == fingerprint(tmp_path / "bob")
    for r in (origin, alice, bob):
        r.close()


def test_force_with_lease_needs_a_fresh_view_of_the_remote(tmp_path: Path, remote_url: str) -> None:
    origin = make_agent(tmp_path / "origin")
    add_remote(origin, "origin", remote_url)
    push(origin)
    alice, _ = clone(remote_url, tmp_path / "alice")
    (tmp_path / "origin" / "x.txt").write_text("x\n")
    origin.snapshot("moves the remote")
    push(origin)

    (tmp_path / "alice" / "y.txt").write_text("y\n")
    mine = alice.snapshot("rewrite").id
    with pytest.raises(PushRejected, match="stale lease"):
        push(alice, force_with_lease=True)  # alice never saw origin's new snapshot
    fetch(alice)
    result = push(alice, force_with_lease=True)
    assert result.updated["refs/heads/main"][1] == mine
    remote = open_store(remote_url)
    assert remote.refs.get_ref("refs/heads/main") == mine
    assert remote.refs.reflog("refs/heads/main")[0].new == mine
    origin.close()
    alice.close()


_KILLER = textwrap.dedent(
    """
    import os, signal, sys
    from agentsnap_core import Repo
    from agentsnap_core.operations.remote import push

    repo = Repo.open(sys.argv[1])
    stop_after = int(sys.argv[3])

    def progress(done, known, nbytes):
        if done >= stop_after:
            os.kill(os.getpid(), signal.SIGKILL)  # a crash in the middle of the upload

    push(repo, sys.argv[2], jobs=2, progress=progress)
    """
)


@pytest.mark.parametrize("kind", ["file", "s3"])
def test_killed_push_resumes_and_sends_only_what_is_missing(tmp_path: Path, kind: str, request: pytest.FixtureRequest) -> None:
    url = (tmp_path / "remote").as_uri() if kind == "file" else str(request.getfixturevalue("s3_url"))
    src = make_agent(tmp_path / "a", big=3_000_000)  # ~60 chunks
    reference = push(src, (tmp_path / "reference").as_uri())  # how many objects a whole push sends
    total = reference.objects

    proc = subprocess.run([sys.executable, "-c", _KILLER, str(tmp_path / "a"), url, str(total // 2)], timeout=300)
    assert proc.returncode == -signal.SIGKILL
    remote = open_store(url)
    landed = set(remote.objects.iter_oids())
    assert total // 2 <= len(landed) < total
    assert remote.refs.get_ref("refs/heads/main") is None  # refs move last: no ref to a half-sent snapshot
    remote.close()

    resumed = push(src, url)
    assert resumed.objects == total - len(landed)
    assert resumed.present >= len(landed)
    assert "refs/heads/main" in resumed.updated
    dst, _ = clone(url, tmp_path / "b")
    assert fingerprint(tmp_path / "b") == fingerprint(tmp_path / "a")
    assert dst.verify()["ok"]
    src.close()
    dst.close()


def test_repo_bound_to_a_shared_store_keeps_worktree_state_local(tmp_path: Path, combined_url: str) -> None:
    """Two checkouts on one PostgreSQL+S3 store share branches and objects; each keeps its own HEAD."""
    one = Repo.init(tmp_path / "one", store_url=combined_url)
    (tmp_path / "one" / "f.txt").write_text("shared\n")
    snap = one.snapshot("in the shared store")
    assert not any((tmp_path / "one" / ".agentsnap" / "objects").iterdir())  # objects went to S3
    two = Repo.init(tmp_path / "two", store_url=combined_url)
    assert two.branches()["main"] == snap.id
    two.restore("main")
    assert (tmp_path / "two" / "f.txt").read_text() == "shared\n"
    two.create_branch("feature")
    two.switch("feature")
    assert one.current_branch() == "main" and two.current_branch() == "feature"
    assert one.verify()["ok"]
    one.close()
    two.close()
    reopened = Repo.open(tmp_path / "one")
    assert set(reopened.branches()) == {"main", "feature"}
    reopened.close()


def test_push_of_a_branch_without_snapshots_is_refused_and_deletes_nothing(tmp_path: Path) -> None:
    url = (tmp_path / "remote").as_uri()
    src = make_agent(tmp_path / "a")
    push(src, url)
    empty = Repo.init(tmp_path / "empty")
    with pytest.raises(Exception, match="has no snapshot yet"):
        push(empty, url)
    assert open_store(url).refs.get_ref("refs/heads/main") == src.get("HEAD").id
    src.close()
    empty.close()


def test_pull_into_an_unsnapshotted_tree_with_files_refuses_instead_of_deleting(tmp_path: Path) -> None:
    url = (tmp_path / "remote").as_uri()
    src = make_agent(tmp_path / "a")
    push(src, url)
    mine = Repo.init(tmp_path / "mine")
    (tmp_path / "mine" / "precious.txt").write_text("not snapshotted yet\n")
    add_remote(mine, "origin", url)
    with pytest.raises(Exception, match="snapshot them first"):
        pull(mine)
    assert (tmp_path / "mine" / "precious.txt").read_text() == "not snapshotted yet\n"
    src.close()
    mine.close()


def test_gc_on_a_checkout_bound_to_postgres_s3_keeps_what_is_reachable(tmp_path: Path, combined_url: str) -> None:
    repo = Repo.init(tmp_path / "w", store_url=combined_url)
    (tmp_path / "w" / "keep.txt").write_text("keep\n")
    kept = repo.snapshot("keep")
    garbage = repo.objects.put(1, b"unreferenced bytes")
    report = repo.gc(grace_seconds=0)
    assert report["removed"] >= 1 and not repo.objects.has(garbage)
    assert repo.verify()["ok"]
    assert repo.restore(kept.id, to=tmp_path / "out")["files"] == 1
    repo.close()


def test_pull_over_unsnapshotted_changes_refuses_and_keeps_them(tmp_path: Path) -> None:
    """A pull that fast-forwards replaced the working tree's unsnapshotted edits without a word (they survived only
    in an undo snapshot the output never named). It now refuses, as merge does and as git does ("your local changes
    would be overwritten"), after fetching; once the edits are snapshotted the pull merges them."""
    url = (tmp_path / "remote").as_uri()
    src = make_agent(tmp_path / "a")
    push(src, url)
    mine, _ = clone(url, tmp_path / "mine")
    (tmp_path / "a" / "upstream.txt").write_text("pushed later\n")
    src.snapshot("upstream")
    push(src, url)
    (tmp_path / "mine" / "precious.txt").write_text("not snapshotted yet\n")
    head = mine.head()[1]
    with pytest.raises(Exception, match="changes since the last snapshot.*before pulling"):
        pull(mine)
    assert (tmp_path / "mine" / "precious.txt").read_text() == "not snapshotted yet\n"
    assert not (tmp_path / "mine" / "upstream.txt").exists()
    assert mine.head()[1] == head
    assert mine.refs.get_ref("refs/remotes/origin/main") == src.head()[1]  # (the fetch happened)
    mine.snapshot("mine")
    pull(mine)
    assert (tmp_path / "mine" / "precious.txt").exists() and (tmp_path / "mine" / "upstream.txt").exists()
    src.close()
    mine.close()
