"""Issue 23 item 12 through a real interpreter: a cell that looks harmless but writes is neither re-run by
``replay="pure"`` nor run by a fork (the default effects policy defers it)."""

from __future__ import annotations

from agentsnap_core.layers.effects import Effects
from agentsnap_openinterpreter import attach, restore, session_of
from conftest import scripted


def script(marks) -> dict[str, str]:
    return {
        "touch it": f"```shell\nenv touch {marks / 'touched'}\n```",
        "log it": f"```python\nfrom pathlib import Path\nPath({str(marks / 'log')!r}).open('a').write('once\\n')\n```",
        "link it": f"```python\nfrom pathlib import Path\nPath({str(marks / 'link')!r}).symlink_to('/tmp')\n```",
    }


def test_replay_pure_does_not_rerun_cells_that_only_look_read_only(work, repo, interpreters, tmp_path):
    marks = tmp_path / "marks"  # outside the working tree: a restore cannot rewind it
    marks.mkdir()
    interp = attach(interpreters(scripted(script(marks))), repo)
    for prompt in ("touch it", "log it", "link it"):
        interp.chat(prompt, display=False)
    assert [c["kind"] for c in session_of(interp).cells] == ["irreversible"] * 3
    interp.snapshot("after")
    for p in marks.iterdir():
        p.unlink()

    report = interp.checkout("after", replay="pure")
    assert [c["status"] for c in report.cells] == ["skipped"] * 3
    assert sorted(p.name for p in marks.iterdir()) == []  # nothing ran a second time


def test_a_fork_defers_a_cell_that_only_looks_read_only(work, repo, interpreters, tmp_path):
    marks = tmp_path / "marks"
    marks.mkdir()
    interp = attach(interpreters(scripted(script(marks))), repo)
    snap = interp.snapshot("before")
    fork = repo.fork(snap.id, 1)[0]
    attempt = attach(interpreters(scripted(script(marks))), repo, effects=Effects(repo, fork["branch"]))
    restore(repo, snap.id, attempt, world=False)
    attempt.chat("touch it", display=False)
    assert session_of(attempt).cells[-1]["status"] == "deferred"
    assert not (marks / "touched").exists()
