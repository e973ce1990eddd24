"""A change a snapshot records and a restore undoes is a change ``status`` and ``diff`` show.

Reported: a snapshot's tree holds directories (an empty one, and each directory's mode), and ``restore`` creates,
removes and chmods them; but ``status`` and ``diff`` dropped every directory entry. So ``mkdir out`` then ``status``
said "nothing changed", and ``restore HEAD`` then deleted ``out`` (taking an undo snapshot, so something had changed);
``rmdir`` of an empty directory, or ``chmod 700`` of one, likewise showed nothing, and ``snapshot`` recorded it.
Now such a directory is listed with a trailing ``/`` (``A out/``, ``D empty/``, ``m private/``). A directory that
only holds added or deleted files is not listed again: its files say it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from trust_kit import cli, new_work


@pytest.fixture
def work(tmp_path: Path) -> Path:
    root = new_work(tmp_path, {"a.txt": "one\n", "d/x.txt": "x\n"})
    (root / "empty").mkdir()
    code, _, err = cli(root, "snapshot", "-m", "one")
    assert code == 0, err
    return root


def _status(root: Path) -> dict:
    code, out, err = cli(root, "status", "--json")
    assert code == 0, err
    return json.loads(out)


def test_a_new_empty_directory_is_a_change_status_shows(work: Path) -> None:
    (work / "out").mkdir()
    code, out, err = cli(work, "status")
    assert code == 0, err
    assert "  A out/" in out.splitlines() and "nothing changed" not in out, out
    st = _status(work)
    assert st["world"]["added"] == ["out/"] and not st["clean"]
    code, out, _ = cli(work, "diff")
    assert "out/" in out, out


def test_a_removed_empty_directory_is_a_change_status_shows(work: Path) -> None:
    (work / "empty").rmdir()
    code, out, err = cli(work, "status")
    assert "  D empty/" in out.splitlines() and "nothing changed" not in out, out
    code, out, err = cli(work, "snapshot", "-m", "two")
    assert code == 0, err
    code, out, err = cli(work, "diff", "HEAD~1", "HEAD")
    assert code == 0 and "empty/" in out, out


def test_a_directory_mode_change_is_a_change_status_shows(work: Path) -> None:
    os.chmod(work / "d", 0o700)
    st = _status(work)
    assert st["world"]["mode"] == ["d/"] and not st["clean"], st
    code, out, _ = cli(work, "restore", "HEAD")
    assert code == 0
    assert _status(work)["clean"]


def test_a_directory_of_added_or_deleted_files_is_listed_by_its_files_only(work: Path) -> None:
    (work / "new" / "deep").mkdir(parents=True)
    (work / "new" / "deep" / "f.txt").write_text("f\n")
    (work / "d" / "x.txt").unlink()
    (work / "d").rmdir()
    st = _status(work)
    assert st["world"]["added"] == ["new/deep/f.txt"], st
    assert st["world"]["deleted"] == ["d/x.txt"], st


def test_status_is_clean_exactly_when_restore_of_head_would_change_nothing(work: Path) -> None:
    (work / "out").mkdir()
    code, out, _ = cli(work, "restore", "--dry-run", "HEAD")
    assert code == 0 and "out/" in out, out
    cli(work, "restore", "HEAD")
    assert not (work / "out").exists()
    assert _status(work)["clean"]


def test_a_name_with_a_newline_or_bytes_not_utf8_is_one_quoted_line_of_status_and_diff(tmp_path: Path) -> None:
    """Reported with the above: ``status`` printed a file named ``new<newline>line`` as two lines (``  M new`` and
    ``line``), which a script reading one path per line takes for two files. Such names are now shown quoted with
    C escapes, as git does; ``--json`` keeps the name as it is."""
    newline = "new\nline"
    root = new_work(tmp_path, {newline: "one\n", "plain name.txt": "p\n"})
    with open(os.path.join(os.fsencode(root), b"lat\xe9"), "wb") as fh:
        fh.write(b"x\n")
    assert cli(root, "snapshot", "-m", "one")[0] == 0
    (root / newline).write_text("two\n")
    os.unlink(os.path.join(os.fsencode(root), b"lat\xe9"))
    (root / "plain name.txt").write_text("q\n")
    code, out, err = cli(root, "status")
    assert code == 0, err
    assert out.splitlines()[1:] == ['  M "new\\nline"', "  M plain name.txt", '  D "lat\\351"'], out
    code, out, _ = cli(root, "diff")
    assert '--- "a/new\\nline"' in out.splitlines() and '+++ "b/new\\nline"' in out.splitlines(), out
    assert _status(root)["world"]["modified"] == [newline, "plain name.txt"]


def test_a_command_run_in_a_directory_a_restore_removed_says_so(work: Path) -> None:
    """Reported with the above: ``cd sub && agentsnap restore HEAD~1`` (a snapshot without ``sub``) removes the
    directory the shell is in; the next ``agentsnap status`` there said "No such file or directory; check that the
    path can be created and re-run". It now says the current directory is gone and what to do."""
    import subprocess
    import sys

    (work / "sub").mkdir()
    (work / "sub" / "f.txt").write_text("f\n")
    assert cli(work, "snapshot", "-m", "two")[0] == 0
    proc = subprocess.run([sys.executable, "-m", "agentsnap_core", "restore", "HEAD~1"], cwd=work / "sub",
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and not (work / "sub").exists(), proc.stderr
    # a process whose working directory was removed under it (as the shell that ran the restore)
    script = ("import os, subprocess, sys; os.mkdir('gone'); os.chdir('gone'); os.rmdir(os.path.abspath('.')); "
              "p = subprocess.run([sys.executable, '-m', 'agentsnap_core', 'status'], capture_output=True, text=True); "
              "print(p.returncode); print(p.stderr)")
    out = subprocess.run([sys.executable, "-c", script], cwd=work, capture_output=True, text=True, timeout=300).stdout
    code, err = out.split("\n", 1)
    assert code == "2" and "the current directory no longer exists" in err and "Traceback" not in err, out


def test_a_multi_line_message_is_one_line_of_log_and_indented_whole_in_show(work: Path) -> None:
    """Reported with the above: ``snapshot -m "$(printf 'fix\\n\\ndetails')"`` printed its whole message in ``log``,
    one snapshot reading as three entries; ``show`` indented only its first line. Now ``log`` prints the first line
    (and `` ...``), and ``show`` indents every line, as git does."""
    (work / "a.txt").write_text("two\n")
    assert cli(work, "snapshot", "-m", "subject line\nbody one\n\nbody two")[0] == 0
    code, out, err = cli(work, "log")
    assert code == 0, err
    lines = out.splitlines()
    assert len(lines) == 2 and lines[0].endswith(" subject line ...") and lines[1].endswith(" one"), out
    code, out, _ = cli(work, "show", "HEAD")
    assert "    subject line\n    body one\n\n    body two\n" in out, out
    (work / "a.txt").write_text("three\n")
    assert cli(work, "snapshot", "-m", "by a bot", "--agent", "bot\nv2")[0] == 0  # (agent ids are kept exactly)
    assert cli(work, "log")[1].splitlines()[0].endswith(' ["bot\\nv2"] by a bot'), cli(work, "log")[1]


def test_minus_c_with_a_directory_that_does_not_exist_says_so(work: Path, tmp_path: Path) -> None:
    """``agentsnap -C /no/such/dir status`` said "no agentsnap store found at or above '/no/such/dir'; run 'agentsnap
    init' first" - advice to create a store in a directory that is not there."""
    code, out, err = cli(work, "-C", str(tmp_path / "no" / "such"), "status")
    assert code == 2 and "does not exist" in err and "agentsnap init" not in err, err


def test_a_file_or_link_that_became_a_directory_is_not_called_ignored(work: Path) -> None:
    """``rm a.txt; mkdir -p a.txt/deep`` (and a link replaced by an empty directory): status said ``D a.txt (still
    here, now ignored: the next snapshot leaves it out)`` - false: nothing ignores it, the next snapshot records the
    directory - and never listed the new empty directory that ``restore HEAD`` would remove."""
    os.symlink("a.txt", work / "link")
    assert cli(work, "snapshot", "-m", "with a link")[0] == 0
    (work / "a.txt").unlink()
    (work / "a.txt" / "deep").mkdir(parents=True)
    (work / "a.txt" / "deep" / "z").write_text("z\n")
    (work / "link").unlink()
    (work / "link").mkdir()
    code, out, err = cli(work, "status")
    assert code == 0, err
    lines = out.splitlines()
    assert "  D a.txt" in lines and "  A a.txt/deep/z" in lines, out
    assert "  D link" in lines and "  A link/" in lines, out
    assert "ignored" not in out, out
    st = _status(work)
    assert "now_ignored" not in st and "link/" in st["world"]["added"], st
    code, out, err = cli(work, "diff")
    assert "new directory: link/" in out, out


def test_an_empty_directory_that_became_a_file_is_said_by_both_sides(work: Path) -> None:
    (work / "empty").rmdir()
    (work / "empty").write_text("a file now\n")
    lines = cli(work, "status")[1].splitlines()
    assert "  A empty" in lines and "  D empty/" in lines, lines
