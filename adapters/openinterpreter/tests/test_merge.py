"""Issue 23 item 13: two forks of one Open Interpreter session merge (the ``cells`` layer has a merger)."""

from __future__ import annotations

from agentsnap_core.operations.merge import merge
from agentsnap_openinterpreter import attach, restore
from conftest import scripted

SCRIPT = {
    "start": "```python\nbase = 1\n```",
    "go left": "```python\nleft = base + 1\n```",
    "go right": "```python\nright = base + 2\n```",
}


def test_two_forks_of_one_session_merge_and_restore_with_both_branches_cells(work, repo, interpreters):
    first = attach(interpreters(scripted(SCRIPT)), repo)
    first.chat("start", display=False)
    snap = first.snapshot("start")
    left, right = (f["branch"] for f in repo.fork(snap.id, 2))

    for branch, prompt in ((left, "go left"), (right, "go right")):
        repo.switch(branch)
        attempt = interpreters(scripted(SCRIPT))
        restore(repo, branch, attempt, replay="pure")
        attempt.chat(prompt, display=False)
        attempt.snapshot(f"after {prompt}")

    repo.switch(left)
    result = merge(repo, right)
    assert result.status == "merged", result.conflicts
    cells = repo.read_layer(result.snapshot, "cells")["cells"]
    assert [c["code"].strip() for c in cells] == ["base = 1", "left = base + 1", "right = base + 2"]

    merged = interpreters(scripted(SCRIPT))
    report = restore(repo, result.snapshot, merged, replay="pure")
    assert report.restored_names == ["base", "left", "right"]
    out = merged.computer.run("python", "print(base, left, right)")
    assert "1 2 3" in "".join(str(c.get("content", "")) for c in out)
