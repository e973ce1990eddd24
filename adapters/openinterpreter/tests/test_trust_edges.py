"""Trust at the edges: a live Open Interpreter used as a demanding user would (streamed chats, a cell still
running, OS mode across a checkout, ``reset()``, wrong argument types). Each test failed on the code before
its fix; the docstring quotes what happened then."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from agentsnap_core import Repo
from agentsnap_core.errors import AgentSnapError, InvalidInput
from agentsnap_openinterpreter import attach, restore, session_of, snapshot
from conftest import scripted


def test_a_streamed_chat_does_not_block_snapshots_forever(work, repo, interpreters):
    """Old: Open Interpreter 0.4.3's ``chat(stream=True)`` never sets ``responding`` back to False, so after one
    streamed chat every ``interp.snapshot()`` raised "the interpreter is responding; snapshot between chat()
    calls" for the rest of the session. Snapshotting in the middle of a stream is still refused."""
    interp = attach(interpreters(scripted({"compute": "```python\nx = 6 * 7\nprint(x)\n```"})), repo)
    stream = interp.chat("compute", display=False, stream=True)
    next(stream)  # the response has started
    with pytest.raises(AgentSnapError, match="the interpreter is responding"):
        interp.snapshot("mid-stream")
    for _ in stream:
        pass
    snap = interp.snapshot("after-stream")
    assert repo.read_layer(snap, "trace") == interp.messages and interp.messages[-1]["role"] == "assistant"
    assert interp.responding is False


def test_a_snapshot_is_refused_while_a_cell_is_still_running(work, repo, interpreters):
    """Old: with a cell running through ``interpreter.computer.run`` in another thread (``responding`` is only
    set by ``chat()``), the snapshot was taken: a half-written working tree and a cell stored as "running"."""
    interp = attach(interpreters(scripted({})), repo)
    code = ("import os, time\nopen('started', 'w').close()\n"
            "while not os.path.exists('go'):\n    time.sleep(0.02)\nopen('late.txt', 'w').write('x')\n")
    worker = threading.Thread(target=interp.computer.run, args=("python", code))
    worker.start()
    try:
        for _ in range(3000):  # the kernel takes a few seconds to start
            if (work / "started").exists():
                break
            time.sleep(0.02)
        assert (work / "started").exists()
        with pytest.raises(AgentSnapError, match="a code cell is running"):
            interp.snapshot("mid-cell")
    finally:
        (work / "go").touch()
        worker.join()
    assert (work / "late.txt").read_text() == "x"
    snap = interp.snapshot("after-cell")
    assert [c["status"] for c in repo.read_layer(snap, "cells")["cells"]] == ["run"]


def test_os_mode_checkout_gives_the_fresh_kernel_the_computer_api_again(work, repo, interpreters):
    """Old: the checkout restarted the kernels but left ``computer._has_imported_computer_api`` True, so the
    next OS-mode cell failed with "NameError: name 'computer' is not defined" (``reset()`` clears that flag)."""
    interp = attach(interpreters(scripted({})), repo)
    interp.computer.import_computer_api = True  # what `interpreter --os` sets
    probe = "print(type(computer).__name__)"
    assert "Computer" in "".join(str(c.get("content")) for c in interp.computer.run("python", probe))
    interp.snapshot("os")
    interp.checkout("os")
    out = "".join(str(c.get("content")) for c in interp.computer.run("python", probe))
    assert "NameError" not in out and "Computer" in out


def test_reset_starts_a_new_conversation_and_a_later_snapshot_does_not_replay_the_old_one(work, repo, interpreters, tmp_path):
    """Old: ``interp.reset()`` (kernels terminated, messages cleared) kept the old conversation's cells, so a
    snapshot taken after it carried them and ``checkout(replay="pure")`` re-ran them: the restored kernel had
    ``secret`` bound although the snapshotted kernel did not ("variables back: secret")."""
    interp = attach(interpreters(scripted({"keep": "```python\nsecret = 41\n```"})), repo)
    interp.chat("keep", display=False)
    before = session_of(interp).conversation
    interp.reset()
    assert session_of(interp).cells == [] and session_of(interp).conversation != before
    snap = interp.snapshot("after-reset")
    assert repo.read_layer(snap, "cells")["cells"] == []

    again = attach(interpreters(scripted({})), Repo.open(work))
    report = again.checkout("after-reset", replay="pure")
    assert report.cells == [] and report.restored_names == []
    out = again.computer.run("python", "print('secret' in globals())")
    assert "False" in "".join(str(c.get("content")) for c in out)


def test_a_path_or_a_number_where_a_repo_or_a_name_belongs_is_a_clear_error(work, repo, interpreters):
    """Old: ``restore(str(path), ...)`` -> "AttributeError: 'str' object has no attribute 'get'",
    ``snapshot(interp, str(path))`` -> "... no attribute 'capture'", ``attach(interp, str(path))`` -> "... no
    attribute 'store'", and ``interp.snapshot(123)`` took an untagged snapshot whose message was the int 123."""
    interp = attach(interpreters(scripted({})), repo)
    interp.snapshot("good")
    heads = repo.log()
    with pytest.raises(InvalidInput, match=r"repo must be an agentsnap_core.Repo \(Repo.open\(path\)\), not str"):
        restore(str(work), "good", interp)
    with pytest.raises(InvalidInput, match="repo must be an agentsnap_core.Repo"):
        snapshot(interp, str(work))
    with pytest.raises(InvalidInput, match="repo must be an agentsnap_core.Repo"):
        attach(interpreters(scripted({})), Path(work))
    with pytest.raises(InvalidInput, match=r"takes a name or message \(a str\), not int"):
        interp.snapshot(123)
    assert [s.id for s in repo.log()] == [s.id for s in heads]  # nothing was written
