"""The CLI: documented --json shapes and one-line errors with nothing written."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from agentsnap_core import Repo
from agentsnap_core.cli import main
from agentsnap_core.format import content
from agentsnap_core.format.encoding import pack
from agentsnap_core.format.objects import Kind
from agentsnap_core.layers import world
from agentsnap_core.stores.base import RefUpdate
from click.testing import CliRunner
from conftest import tree_fingerprint


def run(root: Path, *args: str) -> tuple[int, str, str]:
    """Run the real console entry point in a subprocess (what a user sees)."""
    proc = subprocess.run(
        [sys.executable, "-m", "agentsnap_core", *args], cwd=root, capture_output=True, text=True, timeout=120
    )
    return proc.returncode, proc.stdout, proc.stderr


@pytest.fixture
def work(tmp_path: Path) -> Path:
    root = tmp_path / "work"
    root.mkdir()
    (root / "a.txt").write_text("one\ntwo\n")
    assert run(root, "init")[0] == 0
    return root


def test_snapshot_log_show_json_shapes(work: Path) -> None:
    code, out, _ = run(work, "snapshot", "-m", "first", "--json")
    assert code == 0
    snap = json.loads(out)
    assert set(snap) >= {"id", "parents", "message", "time"} and snap["message"] == "first"
    (work / "a.txt").write_text("one\nTWO\n")
    second = json.loads(run(work, "snapshot", "-m", "second", "--json")[1])
    assert second["parents"] == [snap["id"]]
    log = json.loads(run(work, "log", "--json")[1])
    assert [e["id"] for e in log] == [second["id"], snap["id"]]
    assert all({"id", "parents", "message", "time"} <= set(e) for e in log)
    shown = json.loads(run(work, "show", snap["id"][:8], "--json")[1])
    assert shown["id"] == snap["id"]
    d = json.loads(run(work, "diff", snap["id"][:8], second["id"][:8], "--json")[1])
    assert d["layers"]["world"]["modified"] == ["a.txt"]
    code, out, _ = run(work, "diff", snap["id"][:8], second["id"][:8])
    assert "-two" in out and "+TWO" in out
    st = json.loads(run(work, "status", "--json")[1])
    assert st["clean"] is True


def test_every_verb_has_json(work: Path) -> None:
    run(work, "snapshot", "-m", "s")
    for verb in ("init", "status", "snapshot", "log", "show", "diff", "restore", "fork", "branch", "switch", "tag", "verify", "gc", "plugins"):
        cmd = main.commands[verb]
        assert any(p.name == "as_json" for p in cmd.params), verb


def test_log_graph_and_branch_tag_switch(work: Path) -> None:
    first = run(work, "snapshot", "-m", "first")[1].strip()
    run(work, "fork", "-n", "2")
    assert run(work, "switch", "attempt-1")[0] == 0
    (work / "b.txt").write_text("on attempt-1")
    run(work, "snapshot", "-m", "attempt work")
    assert run(work, "switch", "main")[0] == 0
    assert not (work / "b.txt").exists()
    run(work, "tag", "v1", first[:8])
    code, out, _ = run(work, "log", "--all", "--graph")
    assert code == 0 and "attempt work" in out and "tag: v1" in out and "*" in out
    branches = json.loads(run(work, "branch", "--json")[1])
    assert {b["name"] for b in branches} == {"main", "attempt-1", "attempt-2"}


def _store_state(root: Path) -> tuple[dict, list, dict]:
    with Repo.open(root) as r:
        refs = r.refs.list_refs()
        objs = sorted(r.objects.iter_oids())
    return refs, objs, tree_fingerprint(root)


@pytest.mark.parametrize(
    "args, message",
    [
        (("restore", "deadbeef"), "unknown snapshot"),
        (("show", "no-such-branch"), "unknown snapshot"),
        (("diff", "HEAD~5"), "no earlier snapshots"),
        (("fork", "-n", "0"), "fork count"),
        (("branch", "../evil"), "invalid name"),
        (("gc", "--prune", "soon"), "--prune"),
    ],
)
def test_bad_input_is_one_line_nothing_written(work: Path, args: tuple[str, ...], message: str) -> None:
    run(work, "snapshot", "-m", "s")
    before = _store_state(work)
    code, out, err = run(work, *args)
    assert code != 0
    assert message in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert _store_state(work) == before


def test_store_not_found(tmp_path: Path) -> None:
    code, _, err = run(tmp_path, "status")
    assert code == 2 and "no agentsnap store found" in err and "agentsnap init" in err


def test_restore_target_not_empty(work: Path, tmp_path: Path) -> None:
    run(work, "snapshot", "-m", "s")
    target = tmp_path / "occupied"
    target.mkdir()
    (target / "precious.txt").write_text("do not touch")
    code, _, err = run(work, "restore", "HEAD", "--to", str(target))
    assert code == 2 and "not empty" in err
    assert [p.name for p in target.iterdir()] == ["precious.txt"]


def test_ambiguous_prefix(work: Path) -> None:
    with Repo.open(work) as r:
        seen: dict[str, str] = {}
        pair = None
        for i in range(5000):
            s = r.snapshot(f"s{i}", capture_world=False)
            if s.id[:4] in seen:
                pair = (seen[s.id[:4]], s.id)
                break
            seen[s.id[:4]] = s.id
        assert pair is not None
    before = _store_state(work)
    code, _, err = run(work, "restore", pair[0][:4])
    assert code == 2 and "ambiguous" in err and pair[0][:12] in err
    assert _store_state(work) == before
    assert run(work, "show", pair[0][:12])[0] == 0


@pytest.mark.parametrize(
    "bad_path", ["../escaped.txt", "/etc/agentsnap-escape", "a/../../escaped.txt", ".agentsnap/objects/x"]
)
def test_manifest_path_escaping_root_is_refused(work: Path, tmp_path: Path, bad_path: str) -> None:
    canary = tmp_path / "canary"
    canary.mkdir()
    (canary / "keep.txt").write_text("canary")
    with Repo.open(work) as r:
        good = r.snapshot("good")
        blob = content.put_bytes(r.objects, b"pwned\n")
        tree = content.put_value(r.objects, {"v": 1, "entries": [["ok.txt", "f", 0o644, 6, blob], [bad_path, "f", 0o644, 6, blob]]})
        manifest = dict(good.manifest, layers={"world": {"tree": tree}}, parents=[good.id], message="evil")
        evil = r.objects.put(Kind.MANIFEST, pack(manifest))
        r.update_refs([RefUpdate("refs/heads/evil", evil, None)], "test: plant a hostile snapshot")
    before = _store_state(work)
    for args in (("restore", "evil"), ("restore", "evil", "--to", str(tmp_path / "out"))):
        code, _, err = run(work, *args)
        assert code == 2 and "unsafe" in err, err
        assert _store_state(work) == before
    assert not (tmp_path / "escaped.txt").exists() and not (work.parent / "escaped.txt").exists()
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())
    assert [p.name for p in canary.iterdir()] == ["keep.txt"]
    assert not os.path.exists("/etc/agentsnap-escape")


def test_symlink_then_file_through_it_is_refused(work: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    with Repo.open(work) as r:
        blob = content.put_bytes(r.objects, b"through the link\n")
        entries = [["link", "l", 0o777, 0, "sub"], ["link/file.txt", "f", 0o644, 17, blob]]
        with pytest.raises(Exception, match="nested under"):
            world.validate_entries([tuple(e) for e in entries])
    assert not any(outside.iterdir())


def test_cli_runner_in_process(work: Path) -> None:
    res = CliRunner().invoke(main, ["-C", str(work), "snapshot", "-m", "x", "--json"])
    assert res.exit_code == 0 and json.loads(res.output)["message"] == "x"


def test_log_graph_draws_forks_joining_their_base(work: Path) -> None:
    base = run(work, "snapshot", "-m", "base")[1].strip()
    run(work, "fork", base[:8], "-n", "2", "--worktrees", str(work.parent / "wt"))
    for i in (1, 2):
        run(work.parent / "wt" / f"attempt-{i}", "snapshot", "-m", f"variant {i}")
    lines = run(work, "log", "--all", "--graph")[1].splitlines()
    assert lines[0].startswith("* ") and "variant" in lines[0]
    assert lines[1].startswith("| * ") and "variant" in lines[1] and lines[2] == "|/"
    assert lines[-1].startswith("* ") and "base" in lines[-1]


def test_log_all_shows_the_python_apis_sessions_and_remote_tracking_refs(work: Path) -> None:
    """Snapshots saved through ``Client.save`` (refs/agents/...) and fetched ones (refs/remotes/...) were left out of
    ``agentsnap log --all`` (empty output, exit 0), and ``agentsnap log`` said "run 'agentsnap snapshot' first" as
    if nothing had been saved. ``--all`` now walks every ref as git's does, labelled as git labels them."""
    from agentsnap_core import Client, Snapshottable

    class Bot(Snapshottable):
        def __init__(self) -> None:
            self.step = 1

    with Client(work) as client:
        sid = client.save(Bot(), agent_id="bot", message="saved by the API")
    code, out, err = run(work, "log")
    assert code != 0 and "'agentsnap log --all' or 'agentsnap timeline'" in err
    code, out, _ = run(work, "log", "--all")
    assert code == 0 and sid[:12] in out and "(agents/bot/default)" in out and "saved by the API" in out
    repo = Repo.open(work)
    repo.refs.update_refs([RefUpdate("refs/remotes/origin/main", sid, None)], "fetch")
    repo.close()
    assert "agents/bot/default, origin/main" in run(work, "log", "--all")[1]
    code, out, _ = run(work, "timeline", "-n", "1")  # (-n as in log; it was "No such option '-n'")
    assert code == 0 and sid[:12] in out
