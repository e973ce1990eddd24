"""A resolved file is taken as resolved, whatever headings or examples it holds.

Reported: two branches edit the same paragraph of a README whose heading is ``License`` underlined with
``=======`` (Markdown and reStructuredText headings of seven letters: License, Install, Example, Roadmap). The
user resolves the hunk, ``agentsnap merge --continue`` says "conflict markers remain: README.md" - for good: the
underline is a bare ``=======`` line, read as a marker, and the only way out was ``merge --abort``, losing the
resolution. Same for a file that documents git's conflicts (its examples hold ``<<<<<<< HEAD``). Now a file is
unresolved while it holds more ``<<<<<<< ``/``>>>>>>> `` lines than its versions did before the merge.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from trust_kit import cli, new_work


def _conflicted(tmp_path: Path, base: str, ours: str, theirs: str, name: str = "README.md") -> Path:
    root = new_work(tmp_path, {name: base})
    for args in (("snapshot", "-m", "base"), ("branch", "side")):
        code, _, err = cli(root, *args)
        assert code == 0, err
    (root / name).write_text(ours)
    assert cli(root, "snapshot", "-m", "ours")[0] == 0
    assert cli(root, "switch", "side")[0] == 0
    (root / name).write_text(theirs)
    assert cli(root, "snapshot", "-m", "theirs")[0] == 0
    assert cli(root, "switch", "main")[0] == 0
    code, out, err = cli(root, "merge", "side")
    assert code == 1 and "CONFLICT" in out + err, (code, out, err)
    assert "<<<<<<< main" in (root / name).read_text()
    return root


HEADING = "License\n=======\n\n"


@pytest.mark.parametrize("heading", ["License\n=======\n\n", "Install\r\n=======\r\n\r\n"], ids=["md", "crlf"])
def test_a_resolved_file_with_a_seven_letter_heading_continues(tmp_path: Path, heading: str) -> None:
    root = _conflicted(tmp_path, heading + "MIT\n", heading + "MIT, see LICENSE\n", heading + "MIT (2026)\n")
    (root / "README.md").write_text(heading + "MIT (2026), see LICENSE\n")
    code, out, err = cli(root, "merge", "--continue")
    assert code == 0, (out, err)
    status = cli(root, "status")[1]
    assert "merge of" not in status and "nothing changed" in status, status
    code, out, _ = cli(root, "show", "HEAD")
    assert code == 0 and out.count("\nparent ") == 2, out  # the two-parent merge snapshot
    assert (root / "README.md").read_bytes() == (heading + "MIT (2026), see LICENSE\n").encode()


def test_both_sides_new_sections_kept_continues(tmp_path: Path) -> None:
    """Each branch adds its own section at the end; the user keeps both (two more underlines than before)."""
    root = _conflicted(tmp_path, "Title\n=====\n", "Title\n=====\nCredits\n=======\nus\n",
                       "Title\n=====\nLicense\n=======\nMIT\n")
    (root / "README.md").write_text("Title\n=====\nCredits\n=======\nus\nLicense\n=======\nMIT\n")
    code, out, err = cli(root, "merge", "--continue")
    assert code == 0, (out, err)
    assert "merge of" not in cli(root, "status")[1]


def test_a_file_about_conflicts_is_resolved_when_the_merges_own_markers_are_gone(tmp_path: Path) -> None:
    example = "A conflict looks like:\n<<<<<<< HEAD\nmine\n=======\nyours\n>>>>>>> branch\n\n"
    root = _conflicted(tmp_path, example + "end\n", example + "end, ours\n", example + "end, theirs\n",
                       name="docs/git.md")
    code, out, err = cli(root, "merge", "--continue")  # nothing resolved yet: refused, as before
    assert code == 2 and "conflict markers remain: docs/git.md" in err, (out, err)
    (root / "docs/git.md").write_text(example + "end, both\n")
    code, out, err = cli(root, "merge", "--continue")
    assert code == 0, (out, err)


@pytest.mark.parametrize("left", ["<<<<<<< main\n", ">>>>>>> side\n"])
def test_a_marker_the_merge_wrote_still_stops_continue(tmp_path: Path, left: str) -> None:
    root = _conflicted(tmp_path, HEADING + "MIT\n", HEADING + "MIT, see LICENSE\n", HEADING + "MIT (2026)\n")
    (root / "README.md").write_text(HEADING + left + "MIT (2026), see LICENSE\n")
    code, out, err = cli(root, "merge", "--continue")
    assert code == 2 and "conflict markers remain: README.md" in err, (out, err)
    assert cli(root, "status")[1].count("merge of") == 1  # still in progress, nothing lost
