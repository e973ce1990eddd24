"""A branch whose tip was expired (``agentsnap expire``, a TTL, ``prune``) and reclaimed by ``gc`` still works, and what
cannot be shown is said as it is - never "object ... is missing from the store; run 'agentsnap verify'" (verify then
says the store is fine).

Reported: ``expire HEAD && gc --prune now``, then a change to a file: ``status`` and ``diff`` failed with "object ...
is missing from the store; run 'agentsnap verify'", and ``verify`` answered "ok". The tip's files were reclaimed on
purpose, so there is nothing to compare with: ``status`` now says so and lists every file as added (as against a
branch with no snapshot yet; a snapshot records the tree as it is), and ``diff`` against it says the snapshot was
expired.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from trust_kit import cli, new_work


@pytest.fixture
def reclaimed(tmp_path: Path) -> Path:
    root = new_work(tmp_path, {"a.txt": "one\n", "b.txt": "b\n"})
    assert cli(root, "snapshot", "-m", "one")[0] == 0
    (root / "a.txt").write_text("two\n")
    assert cli(root, "snapshot", "-m", "two")[0] == 0
    for args in (["expire", "HEAD"], ["gc", "--prune", "now"]):
        code, _, err = cli(root, *args)
        assert code == 0, err
    (root / "a.txt").write_text("three\n")
    return root


def test_status_on_an_expired_and_reclaimed_tip_says_so(reclaimed: Path) -> None:
    code, out, err = cli(reclaimed, "status")
    assert code == 0, err
    assert "missing from the store" not in err and "verify" not in err, err
    assert "was expired" in err and "reclaimed" in err, err
    assert "  A a.txt" in out.splitlines() and "  A b.txt" in out.splitlines(), out
    st = json.loads(cli(reclaimed, "status", "--json")[1])
    assert st["head_gone"].startswith("expired") and not st["clean"] and st["world"]["added"] == ["a.txt", "b.txt"]


def test_diff_against_an_expired_and_reclaimed_tip_says_it_was_expired(reclaimed: Path) -> None:
    code, out, err = cli(reclaimed, "diff")
    assert code == 2 and "was expired" in err and "missing from the store" not in err, err


def test_a_snapshot_and_a_restore_from_an_expired_tip_still_work(reclaimed: Path) -> None:
    code, out, err = cli(reclaimed, "snapshot", "-m", "three")
    assert code == 0, err
    code, out, err = cli(reclaimed, "restore", "HEAD~2")
    assert code == 0, err
    assert (reclaimed / "a.txt").read_text() == "one\n"
    code, out, err = cli(reclaimed, "verify")
    assert code == 0, (out, err)


def test_switch_c_on_an_expired_tip_keeps_the_changes(reclaimed: Path) -> None:
    """``switch -c NAME`` over changes on an expired tip was refused (its restore could not read the tip). It restores
    nothing now (test_trust_switch_undo.py): the changes stay in the tree and go on with the new branch."""
    code, out, err = cli(reclaimed, "switch", "-c", "newb")
    assert code == 0, err
    assert (reclaimed / "a.txt").read_text() == "three\n"
    st = json.loads(cli(reclaimed, "status", "--json")[1])
    assert st["branch"] == "newb" and st["head_gone"].startswith("expired"), st
    code, out, err = cli(reclaimed, "snapshot", "-m", "three")
    assert code == 0, err


def test_the_ui_answers_410_gone_for_a_reclaimed_snapshot_not_500(reclaimed: Path) -> None:
    """``agentsnap ui``: the layers or diff of an expired, reclaimed snapshot were a 500 "internal error" page."""
    import http.client
    import threading

    from agentsnap_core import Repo
    from agentsnap_core.ui import make_server

    repo = Repo.open(reclaimed)
    gone = repo.resolve("HEAD")
    srv = make_server(repo, port=0)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        for path in (f"/api/snapshots/{gone}/layers/world", f"/api/diff/{repo.resolve('HEAD~1')}/{gone}"):
            conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=30)
            conn.request("GET", path, headers={"X-Agentsnap-Token": srv.token})
            resp = conn.getresponse()
            body = json.loads(resp.read())
            conn.close()
            assert resp.status == 410 and "was expired" in body["error"], (path, resp.status, body)
    finally:
        srv.shutdown()
        srv.server_close()
        repo.close()


@pytest.mark.parametrize("verb", [["restore", "HEAD~1"], ["switch", "old"]])
def test_the_undo_of_a_restore_from_an_expired_tip_is_a_live_snapshot(tmp_path: Path, verb: list[str]) -> None:
    """``expire HEAD`` with the tree left as HEAD has it, then ``restore HEAD~1``: the restore reused the expired tip
    as its undo (the tree was exactly that snapshot's state) and printed "undo with: agentsnap restore <tip>", which
    restore then refused ("snapshot ... was expired ... cannot be restored"); after ``gc --prune now`` the tree as
    it was before the restore was gone. The undo is now a new, live snapshot of that tree."""
    root = new_work(tmp_path, {"a.txt": "one\n"})
    assert cli(root, "snapshot", "-m", "one")[0] == 0
    assert cli(root, "branch", "old")[0] == 0
    (root / "a.txt").write_text("two\n")
    assert cli(root, "snapshot", "-m", "two")[0] == 0
    assert cli(root, "expire", "HEAD")[0] == 0
    code, out, err = cli(root, *verb, "--json")
    assert code == 0, err
    undo = json.loads(out)["undo"]
    assert (root / "a.txt").read_text() == "one\n"
    assert cli(root, "gc", "--prune", "now")[0] == 0
    code, _out, err = cli(root, "restore", undo)
    assert code == 0, err
    assert (root / "a.txt").read_text() == "two\n"
