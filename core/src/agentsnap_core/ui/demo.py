"""A small demo store for ``agentsnap ui``: forks, a merge, tags, several agents, threads and effects.

``python -m agentsnap_core.ui.demo DIR`` builds it in DIR (which must not hold a store yet); then
``agentsnap -C DIR ui``. The UI tests look at the same store.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from agentsnap_core.errors import AgentSnapError
from agentsnap_core.layers.effects import Effects
from agentsnap_core.operations.merge import merge
from agentsnap_core.repository.repo import Repo


@dataclass
class UIStore:
    repo: Repo
    base: str  #: the fork point (tagged v0)
    attempt_1: str  #: writer-a's snapshot on attempt-1 (merged into main)
    attempt_2: str  #: writer-b's snapshot on attempt-2 (not merged; a deferred effect)
    main_side: str  #: the reviewer's snapshot on main before the merge
    merged: str  #: the two-parent merge snapshot on main


def build_ui_store(root: Path) -> UIStore:
    """plan (v0) -> fork x2 -> attempt-1 / attempt-2 / main diverge -> merge attempt-1 into main."""
    repo = Repo.init(root)
    (root / "notes.txt").write_text("plan:\n- read the brief\n- write a haiku\n")
    (root / "poem.txt").write_text("forks in the river\nsame water, two paths\nwhich one reaches sea\n")
    repo.append_message("user", "Write a haiku about forks.")
    repo.append_message("assistant", "I will draft two versions and pick one.")
    base = repo.snapshot(
        "plan the work", agent="planner", layers={"state": {"step": 1, "goal": "haiku", "draft": ""}}, meta={"thread_id": "t-1"}
    )
    repo.tag("v0")
    repo.fork(None, 2)

    repo.switch("attempt-1")
    (root / "poem.txt").write_text("forks in the river\nsame water, two paths\nboth reach the same sea\n")
    repo.append_message("assistant", "Draft A: both reach the same sea.")
    a1 = repo.snapshot(
        "draft A", agent="writer-a", layers={"state": {"step": 2, "goal": "haiku", "draft": "A"}}, meta={"thread_id": "t-1"}
    )

    repo.switch("attempt-2")
    (root / "poem.txt").write_text("forks in the river\nsplit water, two paths\nonly one finds sea\n")
    (root / "extra.md").write_text("# notes from writer B\n")
    repo.append_message("assistant", "Draft B: only one finds sea.")
    with Effects(repo) as fx, fx.step(1), fx.call("send_email", {"to": "editor@example.com"}) as c:
        if c.run:
            c.result = {"sent": True}
    a2 = repo.snapshot(
        "draft B", agent="writer-b", layers={"state": {"step": 2, "goal": "haiku", "draft": "B", "mood": "dark"}},
        meta={"thread_id": "t-2"},
    )

    repo.switch("main")
    (root / "notes.txt").write_text("plan:\n- read the brief\n- write a haiku\n- review both drafts\n")
    repo.append_message("user", "Please review both drafts.")
    with Effects(repo) as fx, fx.step(1), fx.call("send_email", {"to": "team@example.com"}) as c:
        if c.run:
            c.result = {"sent": True}
    side = repo.snapshot(
        "review plan", agent="reviewer", layers={"state": {"step": 1, "goal": "haiku", "draft": "", "reviewed": True}},
        meta={"thread_id": "t-1"},
    )
    result = merge(repo, "attempt-1", message="merge attempt-1: draft A wins")
    if result.status != "merged" or not result.snapshot:
        raise AgentSnapError(f"the demo merge did not finish cleanly: {result.as_dict()}")
    repo.tag("chosen")
    return UIStore(repo, base.id, a1.id, a2.id, side.id, result.snapshot)


if __name__ == "__main__":  # pragma: no cover - a convenience for trying the UI
    target = Path(sys.argv[1] if len(sys.argv) > 1 else "agentsnap-ui-demo")
    if (target / ".agentsnap").exists():
        sys.exit(f"{target} already holds a store")
    demo = build_ui_store(target)
    print(f"demo store in {target}: try  agentsnap -C {target} ui")
    demo.repo.close()
