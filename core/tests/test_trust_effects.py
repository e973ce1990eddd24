"""Effects a user must not lose or repeat: a merged fork's deferred effect is applied or reported with the
command that applies it; a truncated or deleted ledger is detected when a tool runs (EffectInDoubt)."""

from __future__ import annotations

import gc
import importlib
import json
import sys
import textwrap
import warnings
from pathlib import Path

import pytest
from agentsnap_core import Repo
from agentsnap_core.layers.effects import Effects
from trust_kit import cli

MAILTOOL = textwrap.dedent(
    """
    import json, os
    from agentsnap_core.layers.effects import effect

    @effect(name="send_email", simulate=lambda to, body: {"status": "deferred"})
    def send_email(to, body):
        with open(os.environ["OUTBOX"], "a") as f:
            f.write(json.dumps({"to": to, "body": body}) + "\\n")
        return {"status": "sent"}
    """
)


@pytest.fixture
def mail(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))  # the ledger key, shared with the CLI
    monkeypatch.delenv("AGENTSNAP_EFFECTS_KEY", raising=False)
    monkeypatch.delenv("AGENTSNAP_EFFECTS_KEY_FILE", raising=False)
    mods = tmp_path / "mods"
    mods.mkdir()
    (mods / "trust_mailtool.py").write_text(MAILTOOL)
    monkeypatch.setenv("OUTBOX", str(tmp_path / "outbox.jsonl"))
    monkeypatch.setenv("PYTHONPATH", str(mods))
    monkeypatch.syspath_prepend(str(mods))
    sys.modules.pop("trust_mailtool", None)
    return importlib.import_module("trust_mailtool")


def _sent(tmp_path: Path) -> list[dict]:
    out = tmp_path / "outbox.jsonl"
    return [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []


def test_merge_of_a_fork_that_deferred_an_email_says_how_to_send_it(mail, tmp_path: Path) -> None:
    work = tmp_path / "work"
    repo = Repo.init(work)
    try:
        (work / "plan.txt").write_text("plan\n")
        base = repo.snapshot("before the send")
        branch = repo.fork(base.id, 1, effects_policy="defer")[0]["branch"]
        fx = Effects(repo, branch)
        with fx, fx.step(1):
            assert mail.send_email("boss@example.com", "done") == {"status": "deferred"}
        repo.snapshot("sent (deferred)", ref=f"refs/heads/{branch}", capture_world=False)
    finally:
        repo.close()
    assert _sent(tmp_path) == []
    code, out, err = cli(work, "merge", branch)  # a fast-forward; the CLI has not loaded the tool
    assert code == 0, err
    assert _sent(tmp_path) == [] or len(_sent(tmp_path)) == 1
    if not _sent(tmp_path):  # not applied here: said clearly, with the command that applies it
        assert "1 deferred effect" in out and f"agentsnap effects apply {branch}" in out, out
        code, out, err = cli(work, "effects", "apply", branch, "--into", "main", "--import", "trust_mailtool")
        assert code == 0, out + err
    assert _sent(tmp_path) == [{"to": "boss@example.com", "body": "done"}]


@pytest.mark.parametrize("damage", ["deleted", "truncated"])
def test_lost_ledger_is_detected_when_the_tool_runs_again(mail, tmp_path: Path, damage: str) -> None:
    """A restored agent re-issuing a sent email must not send it again when the ledger lost its record."""
    import sqlite3

    from agentsnap_core.layers.effects import EffectInDoubt
    from agentsnap_core.layers.effects_ledger import LEDGER_FILE

    work = tmp_path / "work"
    repo = Repo.init(work)
    try:
        fx = Effects(repo)
        with fx, fx.step(1):
            assert mail.send_email("boss@example.com", "first") == {"status": "sent"}
        with fx, fx.step(2):
            assert mail.send_email("boss@example.com", "done") == {"status": "sent"}
        snap = repo.snapshot("after the send")
        assert snap.layers["effects"]["count"] == 4  # intent + result, twice
        ledger = repo.store_dir / LEDGER_FILE
    finally:
        repo.close()
    if damage == "deleted":
        ledger.unlink()
    else:
        with sqlite3.connect(ledger) as db:
            db.execute("DELETE FROM entries WHERE idx >= 2")  # the second email's record is gone
    assert len(_sent(tmp_path)) == 2
    repo = Repo.open(work)  # the agent restored in a fresh process runs its step again
    try:
        fx = Effects(repo)
        with fx, fx.step(2), pytest.raises(EffectInDoubt, match="ledger"):
            mail.send_email("boss@example.com", "done")
    finally:
        repo.close()
    assert len(_sent(tmp_path)) == 2, "the email was sent a second time"


FLAKY = textwrap.dedent(
    """
    import os
    from agentsnap_core.layers.effects import effect

    @effect(name="charge_card", simulate=lambda amount: {"status": "deferred"})
    def charge_card(amount):
        if os.environ.get("CARD_DOWN"):
            raise ConnectionError("payment gateway unreachable")
        return {"status": "charged", "amount": amount}
    """
)


@pytest.mark.parametrize("down", [True, False], ids=["tool-fails", "tool-runs"])
def test_a_three_way_merge_says_what_the_deferred_effects_did(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                               down: bool) -> None:
    """A merge that made a merge snapshot (main had moved on) ran the fork's deferred calls with the tool loaded
    and then dropped what happened: ``MergeResult.notes`` (and the CLI's notes) said neither "effects: applied KEY"
    nor "effects: FAILED, not applied: KEY (ConnectionError ...)" - a fast-forward said both."""
    from agentsnap_core.operations.merge import merge

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.delenv("AGENTSNAP_EFFECTS_KEY", raising=False)
    monkeypatch.delenv("AGENTSNAP_EFFECTS_KEY_FILE", raising=False)
    mods = tmp_path / "mods"
    mods.mkdir()
    (mods / "trust_cardtool.py").write_text(FLAKY)
    monkeypatch.syspath_prepend(str(mods))
    sys.modules.pop("trust_cardtool", None)
    card = importlib.import_module("trust_cardtool")
    work = tmp_path / "work"
    with Repo.init(work) as repo:
        (work / "plan.txt").write_text("plan\n")
        base = repo.snapshot("before the charge")
        branch = repo.fork(base.id, 1, effects_policy="defer")[0]["branch"]
        fx = Effects(repo, branch)
        with fx, fx.step(1):
            assert card.charge_card(5) == {"status": "deferred"}
        repo.snapshot("charged (deferred)", ref=f"refs/heads/{branch}", capture_world=False)
        (work / "main.txt").write_text("main moved on\n")
        repo.snapshot("main moves on")
        if down:
            monkeypatch.setenv("CARD_DOWN", "1")
        result = merge(repo, branch)
    assert result.status == "merged", result
    said = "\n".join(result.notes)
    if down:
        assert "effects: FAILED, not applied" in said and "payment gateway unreachable" in said, said
        assert f"agentsnap effects apply {branch}" in said, said
    else:
        assert "effects: applied" in said, said


def test_a_tool_that_returns_work_still_to_do_is_refused_not_recorded_done(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """A streaming tool (a generator), or a plain function that hands back a coroutine (another decorator around an
    async one), guarded with ``@effect``.

    Before, the ledger recorded the call "done" the moment the function returned the generator, before any of its
    work ran, with the generator's ``repr`` as its result: a restored agent replaying the step was handed the string
    ``"<generator object ...>"`` (iterated as characters) and the tool never ran for it; a coroutine's call was
    "done" even if awaiting it later failed. Now a guarded generator is refused where it is decorated, and a returned
    coroutine is closed unstarted and the call recorded as failed (so a retry runs it), with a message saying what to
    do; a pure (unguarded) generator tool is left as it is.
    """
    from agentsnap_core.errors import InvalidInput
    from agentsnap_core.layers.effects import effect

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.delenv("AGENTSNAP_EFFECTS_KEY", raising=False)
    monkeypatch.delenv("AGENTSNAP_EFFECTS_KEY_FILE", raising=False)
    repo = Repo.init(tmp_path / "work")
    fx = Effects(repo)
    ran: list[str] = []

    def stream(to: str):  # noqa: ANN202
        ran.append(to)
        yield "sent"

    async def astream(to: str):  # noqa: ANN202
        yield to

    with pytest.raises(InvalidInput, match="cannot guard 'stream': it is a generator"):
        effect(stream, session=fx)
    with pytest.raises(InvalidInput, match="cannot guard 'astream': it is a generator"):
        effect(astream, session=fx)
    assert list(effect(stream, session=fx, kind="pure")("x")) == ["sent"]  # not guarded: nothing to record

    async def send(to: str) -> str:
        ran.append(f"async {to}")
        return "sent"

    hidden = effect(lambda to: send(to), name="send", session=fx)  # noqa: PLW0108 - a plain function returning one
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # (no "coroutine ... was never awaited")
        with fx.step(1), pytest.raises(InvalidInput, match="returned a coroutine"):
            hidden("bob")
        gc.collect()
    assert ran == ["x"]  # the coroutine was closed unstarted
    with fx.step(1):  # the failed call is retried, not replayed as done
        with pytest.raises(InvalidInput, match="returned a coroutine"):
            hidden("bob")
    statuses = [e.get("ok") for e in fx.ledger.sync().entries if e.get("kind") == "result"]
    assert statuses == [False, False]
    repo.close()



def test_a_replayed_result_is_the_one_the_tool_returned_keys_in_their_order(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """A restored agent re-running a step gets the payment API's answer from the ledger instead of charging again.

    Before, the answer came back with every map's keys sorted (``{"status", "id", "amount"}`` as ``{"amount", "id",
    "status"}``; a result over 64 KiB kept in the object store too): an agent that put the answer into its next
    prompt as JSON wrote a different prompt than in the run it was restored from. Now it is the value the tool
    returned, in order, inline or stored apart; the ledger still verifies.
    """
    from agentsnap_core.layers.effects import effect

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.delenv("AGENTSNAP_EFFECTS_KEY", raising=False)
    monkeypatch.delenv("AGENTSNAP_EFFECTS_KEY_FILE", raising=False)
    root = tmp_path / "work"
    Repo.init(root).close()
    charged: list[int] = []

    def charge(n: int) -> dict:
        charged.append(n)
        return {"status": "ok", "id": f"ch_{n}", "amount": n, "receipt": {"z": 1, "a": 2}, "log": "x" * (n * 1024)}

    answers = {}
    for attempt in ("run", "replay"):  # each attempt a new session on the store, as after a restore
        repo = Repo.open(root)
        fx = Effects(repo)
        guarded = effect(charge, session=fx)
        for n in (1, 80):  # inline; over 64 KiB: in the object store
            with fx.step(n):
                answers[attempt, n] = guarded(n)
        repo.close()
    assert charged == [1, 80]  # the replay ran nothing
    for n in (1, 80):
        assert list(answers["replay", n]) == ["status", "id", "amount", "receipt", "log"]
        assert list(answers["replay", n]["receipt"]) == ["z", "a"] and answers["replay", n] == answers["run", n]
    code, out, err = cli(root, "verify")
    assert code == 0, out + err
