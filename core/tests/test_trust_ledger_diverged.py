"""Two checkouts of one remote that both record tool calls (the effects ledger) have ledgers no transfer can join:
that is said, never silent.

Reported: checkout ``a`` pushed, ``b`` cloned, then each recorded a different tool call. ``b``'s ``pull`` merged the
snapshots and printed nothing about the ledger (the transfer's note, "effects ledgers have diverged; ledger entries
were not copied", was in ``--json`` only); ``b``'s ``push`` then moved the remote's branch and its note list was empty
(a destination ledger as long as the source's was never compared). Both stores then failed ``agentsnap verify``
("entry #3 differs from the head snapshot recorded"), the first anyone heard of it. Now each of those commands says
on stderr that the ledgers diverged and what that means.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from agentsnap_core import Repo
from agentsnap_core.layers.effects import Effects
from agentsnap_core.operations.remote import clone, push
from trust_kit import cli

KEY = "ledger-test-key-0123456789abcdef"


@pytest.fixture
def diverged(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path, str]:
    """``a`` and ``b`` share a remote and one recorded call; then each records another; ``a`` pushes its own."""
    monkeypatch.setenv("AGENTSNAP_EFFECTS_KEY", KEY)
    remote = str(tmp_path / "remote")
    a = Repo.init(tmp_path / "a")
    (tmp_path / "a" / "f.txt").write_text("a\n")

    def mail(to: str) -> str:
        return f"sent to {to}"

    fa = Effects(a)
    with fa.step(1):
        fa.effect(mail)("one@example.com")
    a.snapshot("a1")
    push(a, remote)
    b, _ = clone(remote, tmp_path / "b")
    with fa.step(2):
        fa.effect(mail)("a@example.com")
    a.snapshot("a2")
    fb = Effects(b)
    with fb.step(1):
        fb.effect(mail)("one@example.com")  # replayed from the ledger (recorded by a)
    with fb.step(2):
        fb.effect(mail)("b@example.com")
    (tmp_path / "b" / "g.txt").write_text("b\n")
    b.snapshot("b2")
    push(a, remote)
    a.close(), b.close()
    return tmp_path / "a", tmp_path / "b", remote


def test_pull_of_a_remote_whose_ledger_diverged_says_so(diverged: tuple[Path, Path, str]) -> None:
    _a, b, _remote = diverged
    code, out, err = cli(b, "pull")
    assert code == 0, err
    assert "effects ledgers have diverged" in err and "not copied" in err, (out, err)


def test_push_to_a_remote_whose_ledger_diverged_says_so(diverged: tuple[Path, Path, str]) -> None:
    _a, b, _remote = diverged
    cli(b, "pull")
    code, out, err = cli(b, "push")
    assert "effects ledgers have diverged" in err, (code, out, err)
    code, out, _ = cli(b, "push", "--json")
    assert any("diverged" in n for n in json.loads(out)["notes"]), out


def test_fetch_and_push_of_ledgers_that_agree_say_nothing_of_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTSNAP_EFFECTS_KEY", KEY)
    a = Repo.init(tmp_path / "a")
    (tmp_path / "a" / "f.txt").write_text("a\n")
    fa = Effects(a)
    with fa.step(1):
        fa.effect(lambda: "done", name="call")()
    a.snapshot("a1")
    a.close()
    code, out, err = cli(tmp_path / "a", "push", str(tmp_path / "remote"))
    assert code == 0 and "diverged" not in err, err
    code, out, err = cli(tmp_path / "a", "fetch", str(tmp_path / "remote"))
    assert code == 0 and "diverged" not in err, err


def test_an_effects_policy_for_a_branch_that_does_not_exist_is_refused_and_nothing_is_recorded(tmp_path: Path) -> None:
    """Reported with the above: ``agentsnap effects policy attmept-1 allow`` (a typo) exited 0 and appended a
    policy for a branch nobody has to the append-only ledger, forever; the intended branch kept its policy."""
    from trust_kit import new_work

    root = new_work(tmp_path, {"a.txt": "a\n"})
    assert cli(root, "snapshot", "-m", "one")[0] == 0
    assert cli(root, "fork", "-n", "1")[0] == 0
    before = cli(root, "effects", "--raw", "--json")[1]
    code, out, err = cli(root, "effects", "policy", "attmept-1", "allow")
    assert code == 2 and "no branch 'attmept-1'" in err, (out, err)
    assert cli(root, "effects", "--raw", "--json")[1] == before
    code, out, err = cli(root, "effects", "policy", "attempt-1", "allow")
    assert code == 0, err
