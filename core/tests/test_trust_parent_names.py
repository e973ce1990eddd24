"""git's parent suffixes name snapshots here too: ``HEAD^``, ``HEAD^2``, ``HEAD~2^2``, ``main^0``.

Reported: after ``agentsnap merge side`` a user who wanted the merged branch's side (``restore HEAD^2``, as in git)
or the snapshot before (``diff HEAD^ HEAD``) got "unknown snapshot, branch or tag: 'HEAD^'" - and ``diff HEAD^``
took the name for a path. ``~N`` (first parents back) and ``^N`` (the Nth parent) now chain as in git; a parent
that is not there is said as such (exit 2, nothing changed), a typo still as an unknown name.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from trust_kit import cli, new_work


@pytest.fixture
def merged(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """main: one -> two -> M (merge of side: one -> s1); ids by name."""
    root = new_work(tmp_path, {"a.txt": "one\n"})
    ids = {}

    def snap(name: str) -> None:
        code, out, err = cli(root, "snapshot", "-m", name)
        assert code == 0, err
        ids[name] = out.split()[0]

    snap("one")
    assert cli(root, "branch", "side")[0] == 0
    (root / "a.txt").write_text("one\ntwo\n")
    snap("two")
    code, _, err = cli(root, "switch", "side")
    assert code == 0, err
    (root / "b.txt").write_text("side\n")
    snap("s1")
    code, _, err = cli(root, "switch", "main")
    assert code == 0, err
    code, out, err = cli(root, "merge", "side")
    assert code == 0, (out, err)
    ids["M"] = cli(root, "show", "HEAD")[1].split()[1]
    assert ids["M"] not in (ids["two"], ids["s1"])
    return root, ids


def _id(root: Path, spec: str) -> tuple[int, str, str]:
    code, out, err = cli(root, "show", spec)
    return code, (out.split()[1] if code == 0 else ""), err


@pytest.mark.parametrize("spec, name", [
    ("HEAD^", "two"), ("HEAD^1", "two"), ("HEAD^2", "s1"), ("HEAD~", "two"), ("HEAD~2", "one"), ("HEAD^^", "one"),
    ("HEAD^2~1", "one"), ("HEAD^0", "M"), ("main^2", "s1"), ("HEAD~1^0", "two"), ("HEAD~0^2", "s1"),
])
def test_parent_suffixes_name_what_git_would(merged: tuple[Path, dict[str, str]], spec: str, name: str) -> None:
    root, ids = merged
    code, got, err = _id(root, spec)
    assert code == 0, err
    assert got == ids[name], (spec, got, ids)


def test_the_merged_side_restores_and_diffs_by_its_parent_name(merged: tuple[Path, dict[str, str]]) -> None:
    root, _ = merged
    code, out, err = cli(root, "diff", "--stat", "HEAD^", "HEAD")  # the merge brought b.txt in
    assert code == 0, err
    assert out.split() == ["A", "b.txt"], out
    code, out, err = cli(root, "restore", "HEAD^2~1")  # side's start: before two and before b.txt
    assert code == 0, err
    assert (root / "a.txt").read_text() == "one\n" and not (root / "b.txt").exists()


@pytest.mark.parametrize("spec, said", [
    ("HEAD^3", "'HEAD^3': HEAD has 2 parents, not 3"),
    ("HEAD~2^", "'HEAD~2^': HEAD~2 has no parent"),
    ("HEAD^2^2", "'HEAD^2^2': HEAD^2 has 1 parent, not 2"),
    ("HEAD^2~5", "'HEAD^2~5': HEAD^2 has only 1 earlier snapshot"),
])
def test_a_parent_that_is_not_there_is_said_and_nothing_changes(merged: tuple[Path, dict[str, str]], spec: str,
                                                                  said: str) -> None:
    root, _ = merged
    (root / "a.txt").write_text("uncommitted\n")
    code, out, err = cli(root, "restore", spec)
    assert code == 2 and said in err and "unknown" not in err, err
    assert (root / "a.txt").read_text() == "uncommitted\n"


@pytest.mark.parametrize("spec", ["nosuch^", "HEAD^x", "HEAD~^x", "^", "HEAD^-1"])
def test_a_typo_with_a_suffix_is_still_an_unknown_name(merged: tuple[Path, dict[str, str]], spec: str) -> None:
    root, _ = merged
    code, out, err = cli(root, "show", spec)
    assert code == 2 and "unknown snapshot" in err, (spec, err)
