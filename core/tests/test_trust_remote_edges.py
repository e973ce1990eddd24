"""push / pull / clone / remote at the edges: a mistyped path or branch, a fresh checkout, encrypted and secret
content, ``-C DIR``, tags - each said, never done in silence or somewhere else."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from agentsnap_core import Repo
from agentsnap_core.format import objects
from agentsnap_core.operations.remote import add_remote, clone, push
from agentsnap_core.stores import open_store
from trust_kit import cli, new_work, snapshots


@pytest.fixture(params=["file", "s3", "combined"])
def remote_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "file":
        return (tmp_path / "remote-store").as_uri()
    return str(request.getfixturevalue(f"{request.param}_url"))


def test_a_push_into_a_working_tree_or_a_folder_of_files_is_refused_and_writes_nothing_there(tmp_path: Path) -> None:
    """Old: ``agentsnap push ../other-project`` (a working tree: its store is in ``.agentsnap``) and ``agentsnap push
    ~/notes`` (an ordinary folder, a mistyped path) exited 0 saying "held no store: this push created a new store
    there", and wrote ``format.json``, ``index.sqlite`` and ``objects/`` among that folder's files (into the other
    project's working tree, where its next snapshot would capture them)."""
    root = new_work(tmp_path, {"a.txt": "one\n"})
    snapshots(root, ["one"])
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "todo.txt").write_text("mine\n")
    (tmp_path / "x").mkdir()
    project = new_work(tmp_path / "x", {})
    snapshots(project, ["theirs"], "b.txt")
    for target, says in ((folder, "is not empty (it holds todo.txt)"), (project, f"its store is {project / '.agentsnap'}")):
        before = sorted(os.listdir(target))
        code, out, err = cli(root, "push", str(target))
        assert code == 2 and says in err and "Traceback" not in err, (target, err)
        assert sorted(os.listdir(target)) == before, f"the push wrote into {target}"
        code, out, err = cli(root, "push", str(target), "--json")
        assert code == 2 and out == "" and says in err
    assert cli(project, "status")[1].splitlines()[-1] == "nothing changed"
    code, out, err = cli(root, "push", str(project / ".agentsnap"))  # its store: what a push there talks to
    assert code == 2 and "not a fast-forward" in err and "held no store" not in err, err
    (tmp_path / "empty").mkdir()
    code, out, err = cli(root, "push", str(tmp_path / "empty"))  # an empty folder is still a new store's place
    assert code == 0 and "created a new store" in err, err


def test_pull_of_a_branch_the_remote_lacks_fails_naming_it(tmp_path: Path, remote_url: str) -> None:
    """Old: ``agentsnap pull origin featur`` (a typo) and ``agentsnap pull`` on a branch never pushed printed
    "refs/remotes/origin/main: up to date" and exited 0 - as if there were nothing new, when nothing was merged."""
    root = new_work(tmp_path, {"a.txt": "one\n"})
    snapshots(root, ["one"])
    assert cli(root, "remote", "add", "origin", remote_url)[0] == 0
    assert cli(root, "push")[0] == 0
    head = cli(root, "log")[1].split()[0]
    for args in (["pull", "origin", "featur"], ["pull", "origin", "featur", "--json"]):
        code, out, err = cli(root, *args)
        assert code == 2 and "remote origin has no branch 'featur' (it has main)" in err, (args, out, err)
    assert cli(root, "branch", "feature")[0] == 0 and cli(root, "switch", "feature")[0] == 0
    code, out, err = cli(root, "pull")
    assert code == 2 and "no branch 'feature'" in err and "agentsnap push origin feature" in err, err
    assert cli(root, "log")[1].split()[0] == head
    code, out, err = cli(root, "pull", "origin", "main")  # the branch it has: fine (up to date)
    assert code == 0, err


def test_pull_into_a_fresh_checkout_keeps_its_unsnapshotted_trace(tmp_path: Path) -> None:
    """Old: in a checkout with no snapshot yet, ``agentsnap trace add user "..."`` then ``agentsnap pull`` exited 0
    ("merge: fast-forward") and replaced the pending messages with the remote snapshot's trace: they were gone, in
    no snapshot and no undo. (Files there were already refused: "snapshot them first".)"""
    (tmp_path / "x").mkdir()
    upstream = new_work(tmp_path / "x", {"a.txt": "theirs\n"})
    assert cli(upstream, "trace", "add", "user", "upstream message")[0] == 0
    snapshots(upstream, ["theirs"])
    store = tmp_path / "team"
    assert cli(upstream, "push", str(store))[0] == 0
    root = new_work(tmp_path, {})
    assert cli(root, "trace", "add", "user", "my pending message")[0] == 0
    assert cli(root, "remote", "add", "origin", str(store))[0] == 0
    code, out, err = cli(root, "pull")
    assert code == 2 and "1 message(s) not in any snapshot" in err and "snapshot them first" in err, err
    assert "my pending message" in cli(root, "trace", "show")[1]
    assert not (root / "a.txt").exists()
    assert cli(root, "snapshot", "-m", "mine")[0] == 0
    code, out, err = cli(root, "pull")  # once snapshotted: merged, both kept
    assert code == 0 and "merge: merged" in out, err
    shown = cli(root, "trace", "show")[1]
    assert "my pending message" in shown and "upstream message" in shown
    assert (root / "a.txt").read_text() == "theirs\n"


@pytest.mark.parametrize("kind", ["file", "s3"])
def test_a_clone_of_an_encrypted_store_keeps_encrypting(
    tmp_path: Path, kind: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Old: a key holder's clone of an encrypted repository wrote its own snapshots in plain text, and ``push`` sent
    them so: the team's remote, ciphertext only until then, held the clone's new files readable by anyone with
    the bucket or directory (no warning). The remote a push creates also did not say it is encrypted, so a checkout
    bound to it (``--store``) wrote plain text too."""
    crypto = pytest.importorskip("agentsnap_core.format.crypto")
    monkeypatch.setattr(objects, "encrypted_opener", None)
    monkeypatch.setenv(crypto.KEY_ENV, crypto.generate_key())
    url = (tmp_path / "remote").as_uri() if kind == "file" else str(request.getfixturevalue("s3_url"))
    repo = Repo.init(tmp_path / "a")
    crypto.enable_encryption(repo)
    (repo.root / "plan.txt").write_text("the first plan\n")
    repo.snapshot("encrypted")
    add_remote(repo, "origin", url)
    push(repo)
    repo.close()

    copy, _ = clone(url, tmp_path / "b")
    (copy.root / "new.txt").write_text("the clone's launch codes\n" * 20)
    copy.snapshot("made in the clone", layers={"state": {"codes": "0000-launch"}})
    push(copy)
    copy.close()
    remote = open_store(url)
    stored = b"".join(remote.objects.get_stored(o) for o in remote.objects.iter_oids())
    assert b"launch codes" not in stored and b"0000-launch" not in stored and b"made in the clone" not in stored
    assert remote.refs.get_config(crypto.CONFIG_ENCRYPT) == "aes-gcm"  # (what a checkout bound to it reads)
    remote.close()
    with Repo.open(tmp_path / "b") as again:
        assert again.refs.get_config(crypto.CONFIG_ENCRYPT) == "aes-gcm"
        assert again.verify()["ok"]
    monkeypatch.delenv(crypto.KEY_ENV)
    monkeypatch.setattr(objects, "encrypted_opener", None)
    with pytest.raises(Exception, match="encrypted"):  # a clone without the key is refused, leaving nothing
        clone(url, tmp_path / "c")
    assert not (tmp_path / "c").exists()


def test_clone_and_pull_say_which_secret_files_did_not_travel(tmp_path: Path) -> None:
    """Old: ``agentsnap clone`` of a snapshot whose ``.env`` the secrets policy left out exited 0 with nothing on
    stderr: the copy ran without its ``.env``, the user never told that the state was not all there (docs/SECURITY.md:
    "never in silence"). A pull that fast-forwards over it said nothing either (its restore's note was dropped)."""
    secret = "API_KEY=sk-live-0123456789abcdefghijklmnop\n"
    root = new_work(tmp_path, {"a.txt": "one\n", ".env": secret})
    snapshots(root, ["one"])
    store = tmp_path / "team"
    assert cli(root, "push", str(store))[0] == 0
    code, out, err = cli(tmp_path, "clone", str(store), "copy")
    assert code == 0 and "warning:" in err and ".env" in err and "never pushed" in err, err
    code, out, err = cli(tmp_path, "clone", str(store), "copy2", "--json")
    assert code == 0 and any(".env" in n for n in json.loads(out)["notes"]), out
    assert not (tmp_path / "copy" / ".env").exists() and (tmp_path / "copy" / "a.txt").read_text() == "one\n"
    snapshots(root, ["two"])
    assert cli(root, "push", str(store))[0] == 0
    code, out, err = cli(tmp_path / "copy", "pull")
    assert code == 0 and "merge: fast-forward" in out and ".env" in err, (out, err)
    (tmp_path / "copy" / ".env").write_text(secret)  # put back by hand: nothing more to say
    snapshots(root, ["three"])
    assert cli(root, "push", str(store))[0] == 0
    code, out, err = cli(tmp_path / "copy", "pull")
    assert code == 0 and ".env" not in err, err
    assert secret not in "".join(p.read_text(errors="replace") for p in store.rglob("*") if p.is_file())


def test_remote_paths_are_relative_to_dash_C_as_every_path(tmp_path: Path) -> None:
    """Old: ``agentsnap -C work push ../team`` pushed to ``../team`` from where the command was started (a new store in
    the wrong place, "created a new store there"), and ``-C work remote add origin ../team`` / ``-C work clone ../team
    ../copy`` took the paths the same way - unlike ``-C DIR init`` and ``restore --to`` (docs/CLI.md: relative paths
    are taken relative to DIR, as in git)."""
    (tmp_path / "projects").mkdir()
    root = new_work(tmp_path / "projects", {"a.txt": "one\n"})
    snapshots(root, ["one"])
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    code, out, err = cli(elsewhere, "-C", str(root), "push", "../team")
    assert code == 0 and (tmp_path / "projects" / "team" / "format.json").exists(), err
    assert not (tmp_path / "team").exists()
    code, out, err = cli(elsewhere, "-C", str(root), "remote", "add", "origin", "../team")
    assert code == 0 and (tmp_path / "projects" / "team").as_uri() in out, out
    assert cli(elsewhere, "-C", str(root), "push")[0] == 0
    code, out, err = cli(elsewhere, "-C", str(root), "fetch", "./../team")
    assert code == 0, err
    code, out, err = cli(elsewhere, "-C", str(root), "clone", "../team", "../copy")
    assert code == 0 and (tmp_path / "projects" / "copy" / "a.txt").read_text() == "one\n", err
    assert not (tmp_path / "copy").exists()


def test_a_refused_tag_push_gives_advice_that_works(tmp_path: Path) -> None:
    """Old: pushing a tag the remote already has for another snapshot said "run 'agentsnap pull' to merge the
    remote's work, then push again (or overwrite with --force-with-lease)": neither moves a tag (a pull never does;
    --force-with-lease then failed with "stale lease ... fetch first", and fetching changed nothing)."""
    remote_url = str(tmp_path / "team")
    root = new_work(tmp_path, {"a.txt": "one\n"})
    snapshots(root, ["one"])
    assert cli(root, "tag", "v1")[0] == 0
    assert cli(root, "push", remote_url, "v1")[0] == 0
    snapshots(root, ["two"])
    assert cli(root, "tag", "-d", "v1")[0] == 0 and cli(root, "tag", "v1")[0] == 0
    for extra in ([], ["--force-with-lease"]):
        code, out, err = cli(root, "push", remote_url, "v1", *extra)
        assert code == 2 and "refs/tags/v1" in err and "another tag name" in err, err
        assert "agentsnap pull" not in err and "--force-with-lease" not in err, err


@pytest.mark.parametrize("kind", ["file", "s3"])
def test_a_plain_checkout_pushing_into_an_encrypted_remote_seals_what_it_sends(
    tmp_path: Path, kind: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Old: a teammate's checkout without encryption pushed into the team's encrypted remote and its files landed
    there in clear, readable by anyone with the bucket or directory, with no warning - even when the push was then
    rejected (objects travel before refs: a rejected push left the plaintext behind). Now a push into an encrypted
    store seals each object on the way (the key is needed: without it the push is refused before anything is
    sent), which is also how docs/SECURITY.md's "re-push into a fresh encrypted store to convert" works."""
    crypto = pytest.importorskip("agentsnap_core.format.crypto")
    monkeypatch.setattr(objects, "encrypted_opener", None)
    key = crypto.generate_key()
    monkeypatch.setenv(crypto.KEY_ENV, key)
    url = (tmp_path / "remote").as_uri() if kind == "file" else str(request.getfixturevalue("s3_url"))
    team = Repo.init(tmp_path / "team")
    crypto.enable_encryption(team)
    (team.root / "plan.txt").write_text("the team's plan\n")
    team.snapshot("encrypted")
    push(team, url)
    team.close()
    monkeypatch.delenv(crypto.KEY_ENV)
    monkeypatch.setattr(objects, "encrypted_opener", None)
    mine = Repo.init(tmp_path / "mine")  # a plain checkout of its own (no key in this process)
    (mine.root / "notes.txt").write_text("my plaintext passwords\n" * 10)
    mine.snapshot("plain work")
    mine.create_branch("mine")
    add_remote(mine, "origin", url)
    remote = open_store(url)
    before = set(remote.objects.iter_oids())
    for refs in (None, ["mine"]):
        with pytest.raises(Exception, match=crypto.KEY_ENV):
            push(mine, refs=refs)
    assert set(remote.objects.iter_oids()) == before  # nothing sent
    monkeypatch.setenv(crypto.KEY_ENV, key)
    with pytest.raises(Exception, match="rejected"):  # not a fast-forward of the team's main: objects travel first
        push(mine)
    push(mine, refs=["mine"])
    stored = b"".join(remote.objects.get_stored(o) for o in remote.objects.iter_oids())
    assert b"plaintext passwords" not in stored and b"plain work" not in stored
    remote.close()
    mine.close()
    copy, _ = clone(url, tmp_path / "copy", branch="mine")
    assert (copy.root / "notes.txt").read_text() == "my plaintext passwords\n" * 10
    assert copy.verify()["ok"]
    copy.close()


def test_a_push_retried_after_being_killed_at_the_very_end_repairs_the_remote_tracking_ref(tmp_path: Path) -> None:
    """Old: a push killed after the remote's branch moved but before ``origin/main`` did left ``origin/main`` at the
    old snapshot; the retry said "up to date" and left it there, so ``status``/``log`` showed the remote behind, and
    the next ``push --force-with-lease`` was refused ("stale lease ... fetch first") for a remote nobody else
    touched. The retry now moves ``origin/main`` to what the remote holds."""
    from agentsnap_core.stores.base import ANY, RefUpdate

    repo = Repo.init(tmp_path / "a")
    (repo.root / "f.txt").write_text("one\n")
    first = repo.snapshot("one").id
    add_remote(repo, "origin", (tmp_path / "remote").as_uri())
    push(repo)
    (repo.root / "f.txt").write_text("two\n")
    second = repo.snapshot("two").id
    push(repo)
    # what a push killed between the remote's ref update and this side's leaves behind
    repo.refs.update_refs([RefUpdate("refs/remotes/origin/main", first, ANY)], "as a killed push left it")
    again = push(repo)
    assert again.up_to_date == ["refs/heads/main"]
    assert repo.refs.get_ref("refs/remotes/origin/main") == second
    (repo.root / "f.txt").write_text("three\n")
    repo.snapshot("three")
    push(repo, force_with_lease=True)  # the lease holds: nobody else moved the remote
    repo.close()


def test_pull_of_another_remote_branch_merges_into_the_current_one_and_says_so(tmp_path: Path) -> None:
    """Old: on main, ``pull origin feature`` merged origin/feature into main (as git does) but wrote the merge as
    "merge refs/remotes/origin/feature into feature": the log named the wrong branch. It names the one that moved."""
    repo = Repo.init(tmp_path / "a")
    (repo.root / "f.txt").write_text("one\n")
    repo.snapshot("one")
    add_remote(repo, "origin", (tmp_path / "remote").as_uri())
    push(repo)
    repo.create_branch("feature")
    repo.switch("feature")
    (repo.root / "g.txt").write_text("feature work\n")
    repo.snapshot("feature work")
    push(repo, refs=["feature"])
    repo.switch("main")
    (repo.root / "h.txt").write_text("main work\n")
    repo.snapshot("main work")
    from agentsnap_core.operations.remote import pull

    pull(repo, "origin", "feature")
    head = repo.get("HEAD")
    assert repo.current_branch() == "main" and head.message == "merge refs/remotes/origin/feature into main"
    assert repo.branches()["main"] == head.id and (repo.root / "g.txt").exists()
    repo.close()


def test_force_with_lease_by_url_says_it_needs_a_named_remote(tmp_path: Path) -> None:
    """Old: ``push URL --force-with-lease`` over a branch the remote has was refused "stale lease (remote has X, we
    last saw -); fetch first" - and no fetch could help: a fetch by URL makes no remote-tracking refs, so the lease
    was never there. The refusal says what does work."""
    url = (tmp_path / "remote").as_uri()
    repo = Repo.init(tmp_path / "a")
    (repo.root / "f.txt").write_text("one\n")
    repo.snapshot("one")
    push(repo, url)
    (repo.root / "f.txt").write_text("two\n")
    repo.snapshot("two")
    with pytest.raises(Exception, match="needs a named remote") as err:
        push(repo, url, force_with_lease=True)
    assert "fetch first" not in str(err.value)
    add_remote(repo, "origin", url)
    from agentsnap_core.operations.remote import fetch

    fetch(repo, "origin")
    push(repo, "origin", force_with_lease=True)
    repo.close()


def test_a_clone_of_agent_branches_checks_out_none_of_them_and_brings_them_all(tmp_path: Path) -> None:
    """A store whose branches are agents' state (a CrewAI memory, LangGraph threads: snapshots without files), pushed
    for a teammate. Old: ``clone`` checked out the first branch by name as the teammate's HEAD, so their first
    ``agentsnap snapshot`` of their own files landed on that agent's branch (CrewAI's storage then raised "this
    snapshot holds no CrewAI memory"; a LangGraph thread's branch moved onto a world snapshot), and every other
    thread came only as ``origin/...``: PFSaver on the clone saw one thread of many. Now the checkout is a new ``main``
    (no remote branch holds files), each remote branch is a local branch too, and the teammate's snapshot goes to
    main."""
    mine = new_work(tmp_path, {"a.txt": "a\n"})
    with Repo.open(mine) as repo:
        for name in ("crewai/memory", "langgraph/t1", "langgraph/t2"):
            repo.snapshot(f"{name} state", agent=name.split("/")[0], layers={"state": {"records": [name]}},
                          capture_world=False, parents=[], ref=f"refs/heads/{name}", move_head=False)
    store = tmp_path / "team"
    assert cli(mine, "push", str(store), "crewai/memory", "langgraph/t1", "langgraph/t2")[0] == 0
    code, out, err = cli(tmp_path, "clone", str(store), "theirs")
    assert code == 0, err
    theirs = tmp_path / "theirs"
    code, out, _ = cli(theirs, "branch")
    assert code == 0 and "crewai/memory" in out and "langgraph/t1" in out and "langgraph/t2" in out, out
    with Repo.open(theirs) as repo:
        heads = {n: repo.refs.get_ref(f"refs/heads/{n}") for n in ("crewai/memory", "langgraph/t1", "langgraph/t2")}
        assert heads == {n: repo.refs.get_ref(f"refs/remotes/origin/{n}") for n in heads} and all(heads.values())
        assert repo.head()[0] == "refs/heads/main"
    (theirs / "notes.txt").write_text("mine\n")
    code, out, err = cli(theirs, "snapshot", "-m", "my files")
    assert code == 0, err
    with Repo.open(theirs) as repo:
        assert repo.refs.get_ref("refs/heads/main") == out.strip()
        assert {n: repo.refs.get_ref(f"refs/heads/{n}") for n in heads} == heads  # no agent branch moved


def test_a_clone_checks_out_the_branch_that_holds_files_when_there_is_no_main(tmp_path: Path) -> None:
    """A remote without ``main``: the branch that holds files (``zdev``) is checked out, its files written (old: the
    first branch by name, here the memory branch, so the clone had no files); the agent branch beside it comes as a
    local branch."""
    mine = new_work(tmp_path, {"a.txt": "a\n"})
    with Repo.open(mine) as repo:
        repo.snapshot("files", ref="refs/heads/zdev", move_head=False)
        repo.snapshot("memory", layers={"state": {"x": 1}}, capture_world=False, parents=[],
                      ref="refs/heads/crewai/memory", move_head=False)
    store = tmp_path / "team"
    assert cli(mine, "push", str(store), "zdev", "crewai/memory")[0] == 0
    code, _, err = cli(tmp_path, "clone", str(store), "theirs")
    assert code == 0, err
    assert (tmp_path / "theirs" / "a.txt").read_text() == "a\n"
    with Repo.open(tmp_path / "theirs") as repo:
        assert repo.head()[0] == "refs/heads/zdev"
        assert repo.refs.get_ref("refs/heads/crewai/memory") == repo.refs.get_ref("refs/remotes/origin/crewai/memory")


def test_a_push_by_url_that_is_refused_says_a_way_out_that_works(tmp_path: Path) -> None:
    """Old: ``agentsnap push /team/store`` (a URL, no named remote) refused as not a fast-forward said "run 'agentsnap
    pull' to merge the remote's work"; that pull said "no remote named 'origin'", and ``agentsnap pull /team/store``
    said "pull needs a named remote (agentsnap remote add NAME URL)" - no URL, no name, two dead ends. Now both name
    the commands, with the URL as given; run as said, they merge and the push goes through."""
    store = str(tmp_path / "team")
    mine = new_work(tmp_path, {"a.txt": "one\n"})
    snapshots(mine, ["one"])
    assert cli(mine, "push", store)[0] == 0
    assert cli(tmp_path, "clone", store, "theirs")[0] == 0
    snapshots(tmp_path / "theirs", ["theirs"], "b.txt")
    assert cli(tmp_path / "theirs", "push")[0] == 0
    snapshots(mine, ["mine"])
    code, _, err = cli(mine, "push", store)
    assert code == 2 and "not a fast-forward" in err, err
    assert f"'agentsnap remote add origin {store}' and 'agentsnap pull origin'" in err, err
    code, _, err = cli(mine, "pull", store)
    assert code == 2 and f"run 'agentsnap remote add origin {store}', then 'agentsnap pull origin'" in err, err
    assert cli(mine, "remote", "add", "origin", store)[0] == 0
    code, _, err = cli(mine, "pull", "origin")
    assert code == 0, err
    assert (mine / "b.txt").read_text() == "theirs\n" and (mine / "a.txt").read_text() == "mine\n"
    code, _, err = cli(mine, "push", "origin")
    assert code == 0, err
    assert cli(tmp_path, "clone", store, "again")[0] == 0
    assert (tmp_path / "again" / "a.txt").read_text() == "mine\n"
    assert cli(mine, "remote", "remove", "origin")[0] == 0
    assert cli(mine, "remote", "add", "origin", str(tmp_path / "elsewhere"))[0] == 0  # origin taken: another name
    snapshots(tmp_path / "theirs", ["theirs 2"], "b.txt")
    assert cli(tmp_path / "theirs", "pull")[0] == 0 and cli(tmp_path / "theirs", "push")[0] == 0
    snapshots(mine, ["mine 2"])
    code, _, err = cli(mine, "push", store)
    assert code == 2 and f"'agentsnap remote add team {store}' and 'agentsnap pull team'" in err, err
