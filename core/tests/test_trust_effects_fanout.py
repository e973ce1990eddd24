"""Effects and fan-out as a demanding user meets them: a tool argument that is an object is the same call after a
restore; a winner's deferred email that fails when the merge sends it is reported, not turned into a lost fan-out;
a fan-out's branches can be deleted to start it over; a fan-out driver killed by SIGKILL takes its forks with it;
an infinite timeout and a scorer ending in nan are refused, not taken for something else."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from agentsnap_core import Repo
from agentsnap_core.errors import AgentSnapError
from agentsnap_core.layers.effects import EffectInDoubt, Effects, effect
from agentsnap_core.operations.fanout import fanout
from trust_kit import cli, new_work


@pytest.fixture(autouse=True)
def own_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An effects key of this test's own (shared with the CLI in subprocesses); no bytecode in the forks' trees."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.delenv("AGENTSNAP_EFFECTS_KEY", raising=False)
    monkeypatch.delenv("AGENTSNAP_EFFECTS_KEY_FILE", raising=False)
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")


def _work(tmp_path: Path) -> Path:
    work = new_work(tmp_path, {"a.txt": "a\n"})  # (trust_kit's: the work tree with its store)
    assert cli(work, "snapshot", "-m", "base")[0] == 0
    return work


class SmtpClient:  # what an agent passes its tools: an object with the default repr (its memory address)
    pass


@pytest.mark.parametrize("policy", ["raise", "run"])
def test_an_object_argument_passed_again_after_a_restore_is_the_same_call(tmp_path: Path, policy: str) -> None:
    """Old: the object's ``repr`` with its memory address was part of the call's identity, so the same call re-run
    after a restore (a new process, a new client object) was "already performed with other arguments (recorded
    {'client': '<SmtpClient object at 0x7f1b33fe49d0>'}, now {... at 0x7f1b33b7d7d0>})": EffectDivergence with the
    default policy, and with on_divergence='run' the email was SENT A SECOND TIME."""
    sent: list[str] = []

    @effect
    def send_email(to: str, client: SmtpClient) -> dict:
        sent.append(to)
        return {"sent": to}

    repo = Repo.init(tmp_path / "w")
    try:
        first = Effects(repo, on_divergence=policy)
        with first, first.step(1):
            assert send_email("bob@example.com", SmtpClient()) == {"sent": "bob@example.com"}
        again = Effects(repo, on_divergence=policy)  # the restored agent, with a client object of its own
        with again, again.step(1):
            assert send_email("bob@example.com", SmtpClient()) == {"sent": "bob@example.com"}
        assert sent == ["bob@example.com"] and again.divergences == []
    finally:
        repo.close()


def test_a_tool_whose_result_cannot_be_stored_as_is_still_returns_it_and_is_done(tmp_path: Path) -> None:
    """docs/EFFECTS.md: 'Results that are not plain data (msgpack) are stored as model_dump() or repr (lossy)'.
    Old: a result that holds itself raised RecursionError, an int beyond 64 bits 'AgentSnapError: value cannot be
    stored: Integer value out of range', both to the agent AFTER the tool had done its work; the call was left in
    doubt (the next one raised EffectInDoubt). An argument beyond 64 bits could not be passed at all."""
    sent: list[str] = []

    @effect
    def send_email(to: str) -> dict:
        sent.append(to)
        reply: dict = {"to": to}
        reply["self"] = reply
        return reply

    @effect
    def charge(amount: int) -> int:
        return amount * 2

    repo = Repo.init(tmp_path / "w")
    try:
        fx = Effects(repo)
        with fx, fx.step(1):
            assert send_email("bob@example.com")["to"] == "bob@example.com"
            assert charge(1 << 70) == 1 << 71
        again = Effects(repo)
        with again, again.step(1):  # the restored agent: replayed, not in doubt, not sent again
            assert send_email("bob@example.com")["to"] == "bob@example.com"
            assert charge(1 << 70) == str(1 << 71)  # (the stored form)
        assert sent == ["bob@example.com"]
        assert [e for e, _ in again.events] == ["replayed", "replayed"]
    finally:
        repo.close()


def test_a_call_the_agent_retries_in_the_same_step_is_sent_once_even_after_a_restore(tmp_path: Path) -> None:
    """docs/EFFECTS.md: a failed call 'may run again'; in doubt and divergence: 'nothing runs'. Old: the agent's
    own retry of a call in the same step took the NEXT position (#1): a call that failed once then succeeded was
    recorded at send#1, so the restored agent re-running the step landed on the failed send#0 and SENT THE EMAIL
    AGAIN; an agent retrying after EffectDivergence or EffectInDoubt ran the call for real at send#1."""
    sent: list[str] = []
    fail = {"timeouts": 1, "interrupt": False}

    @effect
    def send_email(to: str, body: str) -> dict:
        if fail["interrupt"]:
            fail["interrupt"] = False
            raise KeyboardInterrupt  # the process is interrupted mid-call: the call is in doubt
        if fail["timeouts"]:
            fail["timeouts"] -= 1
            raise TimeoutError("smtp timeout before sending")
        sent.append(body)
        return {"sent": body}

    def step(fx: Effects, body: str) -> dict | None:  # the agent's tool loop: a failed tool call is retried
        for _ in range(3):
            try:
                return send_email("bob@example.com", body)
            except (TimeoutError, AgentSnapError):
                continue
        return None

    repo = Repo.init(tmp_path / "w")
    try:
        fx = Effects(repo)
        with fx, fx.step(1):
            assert step(fx, "Hi Bob,") == {"sent": "Hi Bob,"}
        restored = Effects(repo)
        with restored, restored.step(1):
            assert step(restored, "Hi Bob,") == {"sent": "Hi Bob,"}  # replayed
        assert sent == ["Hi Bob,"]
        diverged = Effects(repo)  # the model regenerates the body; the agent retries what was refused
        with diverged, diverged.step(1):
            assert step(diverged, "Hi Bob!") is None
        assert sent == ["Hi Bob,"] and len(diverged.divergences) == 3
        fail["interrupt"] = True
        fx = Effects(repo)
        with fx, fx.step(2):
            with pytest.raises(KeyboardInterrupt):
                send_email("bob@example.com", "step 2")
            with pytest.raises(EffectInDoubt):  # the retry meets the same call in doubt
                send_email("bob@example.com", "step 2")
        assert sent == ["Hi Bob,"]
    finally:
        repo.close()


MAILTOOL = textwrap.dedent(
    """
    import json, os
    from agentsnap_core.layers.effects import effect

    @effect(name="send_email", simulate=lambda to, body: {"status": "deferred"})
    def send_email(to, body):
        if os.path.exists(os.environ["SMTP_DOWN"]):
            raise ConnectionError("smtp server unreachable")
        with open(os.environ["OUTBOX"], "a") as f:
            f.write(json.dumps({"to": to, "body": body}) + "\\n")
        return {"status": "sent"}
    """
)

AGENT = textwrap.dedent(
    """
    import os
    from agentsnap_core import Repo
    from agentsnap_core.layers.effects import Effects
    import trust_fanout_mail

    with Repo.open() as repo, Effects(repo) as fx, fx.step(1):
        trust_fanout_mail.send_email("boss@example.com", "fork " + os.environ["AGENTSNAP_FORK_INDEX"])
    print("AGENTSNAP_SCORE=" + os.environ["AGENTSNAP_FORK_INDEX"])
    """
)


def test_a_winners_email_that_fails_when_the_merge_sends_it_is_reported_and_stays_deferred(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Old: ``fanout -n 3 --merge best --import MODULE --json`` with the mail server down printed NO document (the
    three forks' ranking lost), exit 2 and 'agentsnap: error: lost the connection to the remote store (smtp server
    unreachable); nothing already stored is lost: re-run the command' - while main HAD been fast-forwarded to the
    winner. 'agentsnap effects apply' of such a branch died the same way at the first failing call."""
    mods = tmp_path / "mods"
    mods.mkdir()
    (mods / "trust_fanout_mail.py").write_text(MAILTOOL)
    down, outbox = tmp_path / "smtp-down", tmp_path / "outbox.jsonl"
    monkeypatch.setenv("SMTP_DOWN", str(down))
    monkeypatch.setenv("OUTBOX", str(outbox))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(mods), os.environ.get("PYTHONPATH")) if p))
    work = _work(tmp_path)
    (tmp_path / "agent.py").write_text(AGENT)  # outside the tree: the merge wants a clean one
    down.touch()
    code, out, err = cli(work, "fanout", "-n", "3", "--run", f"{sys.executable} {tmp_path / 'agent.py'}",
                         "--merge", "best", "--import", "trust_fanout_mail", "--json")
    assert code == 1, err  # the email the user asked for was not sent: not a success
    doc = json.loads(out)
    assert doc["winner"] == doc["merge"]["branch"] and doc["merge"]["status"] == "fast-forward"
    assert len(doc["forks"]) == 3 and all(f["status"] == "ok" for f in doc["forks"])
    failed = doc["merge"]["effects_failed"]
    assert len(failed) == 1 and "smtp server unreachable" in failed[0]["error"] and doc["merge"]["effects_pending"] == []
    assert any("FAILED" in n and "agentsnap effects apply" in n for n in doc["merge"]["notes"])
    assert not outbox.exists()
    winner = doc["winner"]
    code, out, err = cli(work, "effects", "apply", winner, "--import", "trust_fanout_mail")
    assert code == 1 and "FAILED" in out and "Traceback" not in err, out + err
    down.unlink()  # the server is back: applying again sends it, once
    code, out, err = cli(work, "effects", "apply", winner, "--import", "trust_fanout_mail")
    assert code == 0, out + err
    assert cli(work, "effects", "apply", winner, "--import", "trust_fanout_mail")[0] == 0
    assert [json.loads(x)["body"] for x in outbox.read_text().splitlines()] == [f"fork {winner.rsplit('-', 1)[1]}"]
    assert cli(work, "effects", "verify")[0] == 0


def test_a_fanouts_branches_can_be_deleted_to_start_it_over(tmp_path: Path) -> None:
    """docs/FANOUT.md: 'To start a fan-out over, delete its fanout-<id>-* branches.' Old: 'agentsnap branch -d' of
    each refused, exit 2: "cannot delete branch 'fanout-…-1': it is checked out in the worktree 'fanout-…-1'; if
    that directory is gone, 'agentsnap branch -d -f …'" (the fork's directory had long been removed)."""
    work = _work(tmp_path)
    code, out, err = cli(work, "fanout", "-n", "2", "--run", "echo AGENTSNAP_SCORE=1", "--json")
    assert code == 0, err
    for fork in json.loads(out)["forks"]:
        code, out, err = cli(work, "branch", "-d", fork["branch"])
        assert code == 0, err
    with Repo.open(work) as repo:
        assert list(repo.branches()) == ["main"]


def test_a_fanout_with_an_infinite_timeout_is_refused_before_forking(tmp_path: Path) -> None:
    """Old: '--timeout inf' passed the check, forked, and every fork failed with 'OverflowError: cannot convert
    float infinity to integer' (exit 1, 'no fork produced a score')."""
    work = _work(tmp_path)
    code, out, err = cli(work, "fanout", "-n", "2", "--run", "echo AGENTSNAP_SCORE=1", "--timeout", "inf")
    assert code == 2 and "timeout" in err and len(err.strip().splitlines()) == 1, out + err
    with Repo.open(work) as repo:
        assert list(repo.branches()) == ["main"]  # nothing was forked


def test_a_score_command_that_ends_in_nan_fails_the_fork(tmp_path: Path, repo: Repo) -> None:
    """docs/FANOUT.md: 'a score that is not a finite number ... makes the fork failed'. Old: a scorer printing a
    progress number and then its final 'nan' scored the fork with the progress number (ok, score 3); one printing
    only 'nan' was failed as 'the score command printed no number'."""
    (repo.root / "x.txt").write_text("x\n")
    repo.snapshot("base")
    res = fanout(repo, 1, "true", score="echo 3; echo nan")
    assert res.results[0].status == "failed" and res.results[0].score is None and res.winner is None
    assert "nan" in (res.results[0].error or "") and "finite" in (res.results[0].error or "")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_fanout_killed_by_sigkill_takes_its_forks_with_it(tmp_path: Path) -> None:
    """Old: each fork runs in a session of its own, so 'kill -9' of the fan-out (an OOM kill, a CI job's hard
    timeout) left every fork's agent running, unwatched, to its end (a 'sleep 40' fork lived its 40 s)."""
    work = _work(tmp_path)
    pids = tmp_path / "pids"
    pids.mkdir()
    driver = subprocess.Popen(
        [sys.executable, "-m", "agentsnap_core", "fanout", "-n", "2", "--parallel", "2", "--run",
         f"echo $$ > {pids}/$AGENTSNAP_FORK_INDEX; exec sleep 600"],
        cwd=work, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while len([p for p in pids.iterdir() if p.read_text().strip()]) < 2:
            assert time.monotonic() < deadline and driver.poll() is None, "the forks did not start"
            time.sleep(0.05)
        forks = [int(p.read_text()) for p in pids.iterdir()]
    finally:
        os.killpg(driver.pid, signal.SIGKILL)
        driver.wait()

    def alive(pid: int) -> bool:
        try:
            with open(f"/proc/{pid}/stat") as f:
                return f.read().rsplit(")", 1)[1].split()[0] != "Z"
        except FileNotFoundError:
            return False

    try:
        deadline = time.monotonic() + 60
        while any(alive(p) for p in forks) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not any(alive(p) for p in forks), "a fork's agent outlived the killed fan-out"
    finally:
        for p in forks:  # (the old code: end what it left running)
            if alive(p):
                os.kill(p, signal.SIGKILL)


def test_applying_a_forks_deferred_email_into_a_misspelt_branch_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Old: 'agentsnap effects apply attempt-1 --into mian --import MODULE' exited 0 ('applied mian/1/send_email#0'):
    the email WAS SENT, recorded against a lineage no branch has, and the fork's call marked applied - so merging
    the fork into main later said nothing of it, and main's own ledger knew nothing of the send."""
    mods = tmp_path / "mods"
    mods.mkdir()
    (mods / "trust_fanout_mail.py").write_text(MAILTOOL)
    outbox = tmp_path / "outbox.jsonl"
    monkeypatch.setenv("SMTP_DOWN", str(tmp_path / "smtp-down"))
    monkeypatch.setenv("OUTBOX", str(outbox))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(mods), os.environ.get("PYTHONPATH")) if p))
    monkeypatch.syspath_prepend(str(mods))
    sys.modules.pop("trust_fanout_mail", None)
    import trust_fanout_mail  # type: ignore[import-not-found]

    work = _work(tmp_path)
    with Repo.open(work) as repo:
        branch = repo.fork("HEAD", 1)[0]["branch"]
        fx = Effects(repo, branch)
        with fx, fx.step(1):
            assert trust_fanout_mail.send_email("boss@example.com", "done") == {"status": "deferred"}
    code, out, err = cli(work, "effects", "apply", branch, "--into", "mian", "--import", "trust_fanout_mail")
    assert code == 2 and "mian" in err and not outbox.exists(), out + err
    code, out, err = cli(work, "effects", "apply", branch, "--into", "main", "--import", "trust_fanout_mail")
    assert code == 0 and "applied main/1/send_email#0" in out, out + err
    assert len(outbox.read_text().splitlines()) == 1


def test_resolve_retry_with_a_result_is_refused(tmp_path: Path) -> None:
    """Old: 'agentsnap effects resolve KEY --retry --result {...}' exited 0 and dropped the --result given."""
    work = _work(tmp_path)
    with Repo.open(work) as repo:
        fx = Effects(repo)
        fx.begin_step(1)
        assert fx.call("send", {"to": "bob"}).run  # the intent is written; the process "dies" before the result
    code, out, err = cli(work, "effects", "resolve", "main/1/send#0", "--retry", "--result", '{"id": 1}')
    assert code == 2 and "--result goes with --done" in err, out + err
    code, out, err = cli(work, "effects", "--json")
    assert [r["status"] for r in json.loads(out)["effects"]] == ["intent"]  # nothing recorded (its writer still runs)


def test_a_failed_call_then_another_call_replay_in_the_same_order(tmp_path: Path) -> None:
    """A step where one call failed (a bad address) and the agent then made another (a good one): a restored agent
    re-running that step must meet the same answers - the failed call may run again (docs/EFFECTS.md), the good one
    is replayed - not an EffectDivergence for the failed call because the good one took its position."""
    sent: list[str] = []
    bad = {"bad@": True}

    @effect
    def send_email(to: str, body: str) -> dict:
        if bad.get(to):
            raise ValueError(f"bad address {to}")
        sent.append(to)
        return {"sent": to}

    def step() -> list[Any]:
        out: list[Any] = []
        for to in ("bad@", "alice@example.com"):
            try:
                out.append(send_email(to, "hi"))
            except ValueError as exc:
                out.append(str(exc))
        return out

    repo = Repo.init(tmp_path / "w")
    try:
        for _ in range(2):  # the run, then a restored agent re-running the step
            fx = Effects(repo)
            with fx, fx.step(1):
                assert step() == ["bad address bad@", {"sent": "alice@example.com"}]
        assert sent == ["alice@example.com"]
    finally:
        repo.close()
