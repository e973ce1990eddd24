"""The effects ledger after a restore: which conversation's recorded commands a restored interpreter meets.

An irreversible cell is an effect keyed by its position (conversation, message index, ordinal): a restored
interpreter whose model issues the same command at the same position gets the recorded output back instead of
running it again. Two ways that went wrong without a word (tried as a user, open-interpreter 0.4.3):

- ``attach(interp)`` with no repository (to record cells before choosing a store), then ``restore(repo, spec,
  interp)``: the restore gave the session the repository but no ledger, so the restored interpreter ran again the
  command the snapshot's future had already run (``echo visit >> log`` appended a second line), unguarded.
- a snapshot of an interpreter that was not attached stored no conversation; restored into an attached interpreter
  in the middle of another conversation, it went on under the *live* conversation's id, so a command at a position
  where the live conversation had run the same command got that conversation's output back and was not run.
"""

from __future__ import annotations

from pathlib import Path

from agentsnap_openinterpreter import attach, restore, session_of, snapshot
from conftest import scripted


def _script(counter: Path) -> dict[str, str]:
    return {"count a visit": f"```shell\necho visit >> {counter}\n```", "hello": "Hi."}


def _visits(counter: Path) -> list[str]:
    return counter.read_text().splitlines() if counter.exists() else []


def test_an_interpreter_attached_without_a_repository_gets_the_ledger_when_restored(work, repo, interpreters, tmp_path):
    """Before the fix this test fails: the restored interpreter ran the command again (two visits), status "run"."""
    counter = tmp_path / "visits.log"  # outside the working tree: a restore cannot rewind it
    first = attach(interpreters(scripted(_script(counter))), repo)
    first.snapshot("before-visit")
    first.chat("count a visit", display=False)
    assert _visits(counter) == ["visit"]

    later = attach(interpreters(scripted(_script(counter))))  # recording, no store chosen yet
    restore(repo, "before-visit", later, world=False)
    later.chat("count a visit", display=False)  # the same command at the same position
    assert _visits(counter) == ["visit"]
    assert session_of(later).cells[-1]["status"] == "ledger-replayed"

    unguarded = attach(interpreters(scripted(_script(counter))), effects=False)  # effects=False stays off
    restore(repo, "before-visit", unguarded, world=False)
    unguarded.chat("count a visit", display=False)
    assert _visits(counter) == ["visit", "visit"] and session_of(unguarded).fx is None


def test_a_snapshot_of_an_unattached_interpreter_does_not_take_the_live_conversations_ledger(
        work, repo, interpreters, tmp_path):
    """Before the fix this test fails: after the restore the visit was "ledger-replayed" from the live conversation
    (one line in the log, the model told the command ran)."""
    counter = tmp_path / "visits.log"
    other = interpreters(scripted(_script(counter)))  # never attached
    other.chat("hello", display=False)
    snapshot(other, repo, tag="other-conversation")

    live = attach(interpreters(scripted(_script(counter))), repo)
    live.chat("hello", display=False)
    live.chat("count a visit", display=False)  # at the same position as the restored conversation's next cell
    assert _visits(counter) == ["visit"]

    restore(repo, "other-conversation", live, world=False)
    live.chat("count a visit", display=False)  # another conversation's first visit: it runs
    assert _visits(counter) == ["visit", "visit"]
    assert session_of(live).cells[-1]["status"] == "run"


def test_a_snapshot_taken_before_attach_keeps_its_conversation_after_attach(work, repo, interpreters, tmp_path):
    """The other side of the previous test: the snapshot of an unattached interpreter names its conversation, and an
    ``attach()`` of that interpreter goes on with it, so restoring the snapshot meets the command the conversation ran
    after it."""
    counter = tmp_path / "visits.log"
    interp = interpreters(scripted(_script(counter)))
    interp.chat("hello", display=False)
    snapshot(interp, repo, tag="before-attach")
    attach(interp, repo)
    interp.chat("count a visit", display=False)
    assert _visits(counter) == ["visit"]

    restore(repo, "before-attach", interp, world=False)
    interp.chat("count a visit", display=False)
    assert _visits(counter) == ["visit"] and session_of(interp).cells[-1]["status"] == "ledger-replayed"
