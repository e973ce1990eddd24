"""The issue's must-show flow: chat -> snapshot -> fresh-process restore with replay="pure"."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from agentsnap_core import Repo
from agentsnap_openinterpreter import attach, session_of
from conftest import scripted


def chat_script(counter: Path) -> dict[str, str]:
    return {
        "remember the answer": "Computing it.\n```python\nanswer = 6 * 7\nprint(answer)\n```",
        "write the notes": "```python\nwith open('notes.txt', 'w') as f:\n    f.write('hello from the interpreter\\n')\n```",
        "count a visit": f"```shell\necho visit >> {counter}\n```",
    }


CHILD = r"""
import json, os, sys
os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
from agentsnap_core import Repo
from agentsnap_openinterpreter import restore
repo = Repo.open(sys.argv[1])
report = restore(repo, "after-chat", replay="pure")
interp = report.interpreter
probe = interp.computer.run("python", "print(answer)")
print("RESULT " + json.dumps({
    "messages": interp.messages,
    "report": report.to_dict(),
    "text": str(report),
    "answer": "".join(c["content"] for c in probe if c.get("format") == "output"),
    "notes": open("notes.txt").read(),
}, default=repr))
interp.computer.terminate()
"""


def test_fresh_process_restore_brings_back_messages_file_and_variable_without_rerunning_irreversible_cells(
    work, repo, interpreters, tmp_path
):
    counter = tmp_path / "side_effects.log"  # outside the working tree: a restore cannot rewind it
    interp = attach(interpreters(scripted(chat_script(counter))), repo)
    for prompt in ("remember the answer", "write the notes", "count a visit"):
        interp.chat(prompt, display=False)
    assert (work / "notes.txt").read_text() == "hello from the interpreter\n"
    assert counter.read_text().splitlines() == ["visit"]
    kinds = [(c["language"], c["kind"]) for c in session_of(interp).cells]
    assert kinds == [("python", "pure"), ("python", "irreversible"), ("shell", "irreversible")]

    interp.snapshot("after-chat")
    expected = json.loads(json.dumps(interp.messages))
    (work / "notes.txt").unlink()  # the file is gone before the restore

    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(work)], cwd=work, capture_output=True, text=True, timeout=600,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads([x for x in proc.stdout.splitlines() if x.startswith("RESULT ")][-1][len("RESULT ") :])

    assert got["messages"] == expected  # messages identical
    assert got["notes"] == "hello from the interpreter\n"  # file restored (by the world layer)
    assert got["answer"].strip() == "42"  # variable present (its pure cell was re-run)
    assert counter.read_text().splitlines() == ["visit"]  # the irreversible shell cell was NOT re-run
    statuses = [(c["language"], c["status"]) for c in got["report"]["cells"]]
    assert statuses == [("python", "replayed"), ("python", "skipped"), ("shell", "skipped")]
    assert got["report"]["restored_names"] == ["answer"]
    assert "f" in got["report"]["missing_names"]  # `with open(...) as f` was not re-run, and the report says so
    assert "llm.completions" in got["text"] and "not restored" in got["text"]


def test_rechatting_after_restore_replays_the_recorded_command_from_the_ledger(work, repo, interpreters, tmp_path):
    counter = tmp_path / "side_effects.log"
    script = chat_script(counter)
    interp = attach(interpreters(scripted(script)), repo)
    interp.chat("remember the answer", display=False)
    interp.snapshot("before-count")
    interp.chat("count a visit", display=False)
    straight = json.loads(json.dumps(interp.messages))
    assert counter.read_text().splitlines() == ["visit"]

    again = interpreters(scripted(script))
    report = attach(again, Repo.open(work)).checkout("before-count", replay="pure")
    assert report.restored_names == ["answer"]
    again.chat("count a visit", display=False)  # the model issues the same command at the same position

    assert counter.read_text().splitlines() == ["visit"]  # not run a second time
    last = session_of(again).cells[-1]
    assert (last["language"], last["status"]) == ("shell", "ledger-replayed")
    assert again.messages == straight  # the model saw the recorded output


def test_a_different_command_at_the_same_position_runs(work, repo, interpreters, tmp_path):
    counter = tmp_path / "side_effects.log"
    interp = attach(interpreters(scripted(chat_script(counter))), repo)
    interp.snapshot("start")
    interp.chat("count a visit", display=False)
    other = {"count a visit": f"```shell\necho other >> {counter}\n```"}
    again = attach(interpreters(scripted(other)), repo)
    again.checkout("start")
    again.chat("count a visit", display=False)
    assert counter.read_text().splitlines() == ["visit", "other"]


def test_replay_none_leaves_kernels_empty_and_says_so(work, repo, interpreters):
    interp = attach(interpreters(scripted(chat_script(work / "unused"))), repo)
    interp.chat("remember the answer", display=False)
    interp.snapshot("s")
    interp.computer.run("python", "answer = 0")
    report = interp.checkout("s")  # same interpreter, default replay="none"
    assert [c["status"] for c in report.cells] == ["not replayed"]
    assert report.missing_names == ["answer"]
    out = interp.computer.run("python", "print('answer' in globals())")
    assert "False" in "".join(c["content"] for c in out)  # the kernel was restarted, not left in the future


def test_a_tampered_snapshot_cannot_get_a_command_replayed_by_calling_it_pure(work, repo, interpreters, tmp_path):
    counter = tmp_path / "side_effects.log"
    interp = attach(interpreters(scripted(chat_script(counter))), repo)
    interp.chat("remember the answer", display=False)
    snap = interp.snapshot("honest")
    cells = repo.read_layer(snap, "cells")
    cells["cells"].append({"language": "shell", "code": f"echo pwned >> {counter}", "kind": "pure", "reason": "trust me",
                           "binds": [], "status": "run", "key": None, "output": [], "step": 99})
    forged = repo.snapshot("forged", layers={"state": repo.read_layer(snap, "state"), "cells": cells},
                           trace=repo.read_layer(snap, "trace"))

    report = interp.checkout(forged.id, replay="pure")
    assert not counter.exists()  # the stored class is never enough to run a command
    assert [c["status"] for c in report.cells] == ["replayed", "skipped"]
    assert report.cells[1]["reason"] == "irreversible here: redirects output to a file (stored as pure)"
