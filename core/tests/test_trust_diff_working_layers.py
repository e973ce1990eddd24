"""``agentsnap diff`` against the working tree never says a layer changed that it could not compare.

A layer other than the files and the trace (an adapter's state - LangGraph's checkpoints, CrewAI's memory -, the
effects ledger, a layer given to ``Repo.snapshot(layers=...)``) is captured when a snapshot is taken; the working
side has no such value to read. On the code before this change ``agentsnap diff`` (HEAD against the working tree)
compared such a layer with nothing and printed ``--- state: {"changed": true}`` for every snapshot that held one,
however nothing had changed. Now it is listed as not compared (``not_compared`` in ``--json``, one note on stderr),
and two snapshots still compare it.
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
