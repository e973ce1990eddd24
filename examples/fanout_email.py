"""An agent that emails in every fork: 0 emails during the fan-out, exactly 1 after merging the winner.

Python API with callables: each of 6 forks drafts an answer and "sends" it with an irreversible
``@effect`` tool. Forks defer irreversible effects, so nothing leaves the machine while they run;
merging the best fork runs its deferred email for real, once. The losers' emails never go out.
Offline, in a temp dir (the "mail server" is an append-only file).

    python examples/fanout_email.py
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

from agentsnap_core import Repo
from agentsnap_core.effects import Effects, effect
from agentsnap_core.fanout import ForkContext, fanout, merge_winner

OUTBOX = Path("outbox.jsonl")  #: set by main() to a file in a temp dir
DRAFTS = ["Hi, done.", "Hello Ana, the report is attached.", "Report: attached. Regards", "ok",
          "Dear Ana, please find the Q3 report attached. Best, Bot", "see attachment"]


@effect(simulate=lambda to, body: {"status": "deferred"})
def send_email(to: str, body: str) -> dict[str, str]:
    """The irreversible tool (a real SMTP call in a real agent)."""
    with open(OUTBOX, "a") as f:
        f.write(json.dumps({"to": to, "body": body}) + "\n")
    return {"status": "sent"}


def agent(ctx: ForkContext) -> float:
    """One attempt: pick a draft by the fork's seed, write it, email it; the score is how polite it is."""
    draft = DRAFTS[(ctx.seed - 1) % len(DRAFTS)]
    (ctx.path / "reply.txt").write_text(draft + "\n")
    with Effects(ctx.repo) as fx, fx.step(1):  # ctx.repo is the fork: irreversible calls are deferred
        send_email("ana@example.com", draft)
    return float(len(draft.split()) + 3 * draft.startswith("Dear"))


def emails() -> list[dict[str, str]]:
    return [json.loads(line) for line in OUTBOX.read_text().splitlines()] if OUTBOX.exists() else []


def main() -> None:
    global OUTBOX
    top = Path(tempfile.mkdtemp(prefix="agentsnap-fanout-email-"))
    OUTBOX = top / "outbox.jsonl"  # the forks inherit it (local backend: forked child processes)
    os.environ.setdefault("XDG_CONFIG_HOME", str(top / "config"))  # the effects key of this demo only
    try:
        with Repo.init(top / "agent") as repo:
            (repo.root / "task.txt").write_text("send Ana the Q3 report\n")
            repo.snapshot("task received")
            result = fanout(repo, len(DRAFTS), agent, parallel=3)
            for r in result.ranked():
                print(f"fork {r.index}: score {r.score:g}  branch {r.branch}")
            print(f"emails sent during the fan-out: {len(emails())}")
            merged = merge_winner(repo, result)
            print(f"merged {merged['branch']} ({merged['status']}); deferred effects applied: "
                  f"{len(merged['effects_applied'])}")
            print(f"emails sent after the merge: {len(emails())} -> {emails()}")
            print(f"reply.txt on main: {(repo.root / 'reply.txt').read_text().strip()!r}")
            assert len(emails()) == 1 and emails()[0]["body"] == (repo.root / "reply.txt").read_text().strip()
    finally:
        shutil.rmtree(top, ignore_errors=True)


if __name__ == "__main__":
    main()
