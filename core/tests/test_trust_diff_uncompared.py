"""``agentsnap diff`` never says a layer changed that it could not compare.

A layer other than the files and the trace (an adapter's state - LangGraph's checkpoints, CrewAI's memory -, the
effects ledger, a layer given to ``Repo.snapshot(layers=...)``) is captured when a snapshot is taken; the working
side has no such value to read. On the code before this change ``agentsnap diff`` (HEAD against the working tree)
compared such a layer with nothing and printed ``--- state: {"changed": true}`` for every snapshot that held one,
however nothing had changed. Now it is listed as not compared (``not_compared`` in ``--json``, one note on stderr),
and two snapshots still compare it.

Likewise a snapshot saved without the working tree (``Client.save``, an adapter's checkpoint) holds no files, which
is not an empty tree: the diff against it listed every file of the tree as added (or, the other way round,
deleted). Now the files are not compared and that is said (``no_files``).
"""

from __future__ import annotations

import json
from pathlib import Path

from agentsnap_core import Repo
from trust_kit import cli, new_work


def _two_snapshots(tmp_path: Path) -> tuple[Path, str, str]:
    root = new_work(tmp_path, {"a.txt": "a\n"})
    with Repo.open(root) as repo:
        one = repo.snapshot("one", layers={"state": {"step": 1, "plan": "x"}}).id
        two = repo.snapshot("two", layers={"state": {"step": 2, "plan": "x"}}).id
    return root, one, two


def test_a_snapshot_only_layer_is_not_said_changed_against_the_working_tree(tmp_path: Path) -> None:
    root, _one, _two = _two_snapshots(tmp_path)
    code, out, err = cli(root, "diff")
    assert code == 0, err
    assert out == "" and "changed" not in out, out  # (nothing changed in the tree or the trace)
    assert "not compared with the working state: state" in err, err
    code, out, _ = cli(root, "diff", "--json")
    d = json.loads(out)
    assert d["b"] == "WORKING" and d["not_compared"] == ["state"] and "state" not in d["layers"], d
    code, out, err = cli(root, "diff", "--layer", "state")
    assert code == 0 and out == "" and "not compared" in err, out + err


def test_two_snapshots_still_compare_that_layer(tmp_path: Path) -> None:
    root, one, two = _two_snapshots(tmp_path)
    code, out, err = cli(root, "diff", one[:12], two[:12])
    assert code == 0 and '--- state: {"added": [], "removed": [], "changed": ["step"]}' in out, out + err
    assert "not compared" not in err
    code, out, _ = cli(root, "diff", one[:12], two[:12], "--json")
    assert "not_compared" not in json.loads(out)


def _agent_snapshot(root: Path) -> str:
    """A snapshot saved through the Python API, without the working tree (no files layer)."""
    from agentsnap_core import Client, Snapshottable

    class Agent(Snapshottable):
        def __init__(self) -> None:
            self.step = 1

    with Client(root) as client:
        return client.save(Agent(), agent_id="bot")


def test_a_snapshot_without_files_is_not_said_to_lack_every_file(tmp_path: Path) -> None:
    root = new_work(tmp_path, {"a.txt": "a\n", "b.txt": "b\n"})
    bare = _agent_snapshot(root)
    assert cli(root, "snapshot", "-m", "files")[0] == 0
    for args in (["diff", bare[:12]], ["diff", bare[:12], "HEAD"], ["diff", "HEAD", bare[:12]]):
        code, out, err = cli(root, *args)
        assert code == 0, err
        assert "a.txt" not in out and "b.txt" not in out, (args, out)  # (neither added nor deleted)
        assert f"files not compared: snapshot {bare[:12]} holds none (saved without the working tree)" in err, err
    code, out, _ = cli(root, "diff", bare[:12], "--json")
    d = json.loads(out)
    assert "world" not in d["layers"] and d["no_files"] == [bare] and "world" in d["not_compared"], d
    code, out, err = cli(root, "diff", bare[:12], "--", "a.txt")
    assert code == 2 and "holds no files" in err and "Traceback" not in err, out + err


def test_the_ui_diff_of_a_snapshot_without_files_says_so(tmp_path: Path) -> None:
    from agentsnap_core.ui import api

    root = new_work(tmp_path, {"a.txt": "a\n"})
    bare = _agent_snapshot(root)
    assert cli(root, "snapshot", "-m", "files")[0] == 0
    with Repo.open(root) as repo:
        head = repo.head()[1]
        assert head is not None
        d = api.diff(repo, bare, head)
    assert d["layers"]["world"] == {"kind": "note", "text": f"files not compared: snapshot {bare[:12]} holds none "
                                                            "(saved without the working tree)"}
