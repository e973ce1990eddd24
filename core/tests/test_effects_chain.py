"""The ledger's HMAC chain: tampering is detected and named; a clone without the key says it cannot check."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from agentsnap_core import Repo
from agentsnap_core.cli import main as cli
from agentsnap_core.layers.effects import Effects, effect
from agentsnap_core.layers.effects_ledger import LEDGER_FILE, EffectKeyMissing, key_path, verify_ledger
from agentsnap_core.testing.effects import Outbox
from click.testing import CliRunner
from test_effects import effects_key_home  # noqa: F401  (autouse: a private key dir per test)


@pytest.fixture
def repo(tmp_path: Path) -> Any:
    """A repo with four ledger entries (two sends) and a snapshot bound to them, plus a world file."""
    r = Repo.init(tmp_path / "work")
    (r.root / "notes.txt").write_text("hello\n")
    outbox = Outbox(tmp_path / "outbox.jsonl")
    fx = Effects(r)

    @effect(session=fx)
    def send_email(to: str, body: str) -> dict[str, Any]:
        return outbox.send(to, body)

    for step in (1, 2):
        with fx.step(step):
            send_email("bob@example.com", f"mail {step}")
    r.snapshot("after two sends", layers={"state": {"step": 3}})
    yield r
    r.close()


def db(repo: Repo) -> sqlite3.Connection:
    return sqlite3.connect(repo.store_dir / LEDGER_FILE, isolation_level=None)


def rows(repo: Repo) -> list[tuple[int, bytes, bytes]]:
    with db(repo) as c:
        return [(i, bytes(b), bytes(m)) for i, b, m in c.execute("SELECT idx, body, mac FROM entries ORDER BY idx")]


def test_untouched_ledger_verifies_and_key_file_is_private(repo: Repo) -> None:
    rep = repo.verify()
    assert rep["ok"] and rep["effects"]["status"] == "ok" and rep["effects"]["entries"] == 4
    assert key_path().stat().st_mode & 0o777 == 0o600
    manifest_text = json.dumps(repo.get("HEAD").manifest, default=str)
    assert key_path().read_text().strip() not in manifest_text  # the key never enters a snapshot


def test_flipping_any_byte_of_any_entry_fails_verify_naming_the_entry(repo: Repo) -> None:
    original = rows(repo)
    checked = 0
    for idx, body, mac in original:
        for column, blob in (("body", body), ("mac", mac)):
            for pos in range(len(blob)):
                bad = bytearray(blob)
                bad[pos] ^= 0x01
                with db(repo) as c:
                    c.execute(f"UPDATE entries SET {column} = ? WHERE idx = ?", (bytes(bad), idx))
                rep = verify_ledger(repo)
                assert rep["status"] == "failed", (idx, column, pos)
                assert rep["problems"][0]["entry"] == idx and f"#{idx}" in rep["problems"][0]["error"], rep["problems"]
                with db(repo) as c:
                    c.execute(f"UPDATE entries SET {column} = ? WHERE idx = ?", (blob, idx))
                checked += 1
    print(f"flipped {checked} bytes one at a time: every one detected and named")
    assert verify_ledger(repo)["status"] == "ok"


def test_reordering_entries_fails_verify_naming_the_first_moved_entry(repo: Repo) -> None:
    r = rows(repo)
    with db(repo) as c:
        c.execute("UPDATE entries SET body = ?, mac = ? WHERE idx = 1", (r[2][1], r[2][2]))
        c.execute("UPDATE entries SET body = ?, mac = ? WHERE idx = 2", (r[1][1], r[1][2]))
    rep = repo.verify()
    assert not rep["ok"]
    assert rep["effects"]["problems"][0]["entry"] == 1 and "#1" in rep["effects"]["problems"][0]["error"]


def test_inserting_an_entry_fails_verify(repo: Repo) -> None:
    r = rows(repo)
    with db(repo) as c:
        for i, _body, _mac in reversed(r[2:]):
            c.execute("UPDATE entries SET idx = ? WHERE idx = ?", (i + 1, i))
        c.execute("INSERT INTO entries (idx, body, mac) VALUES (2, ?, ?)", (r[0][1], r[0][2]))
    rep = verify_ledger(repo)
    assert rep["status"] == "failed" and rep["problems"][0]["entry"] == 2


def test_dropping_the_last_entry_fails_verify_naming_it(repo: Repo) -> None:
    with db(repo) as c:
        c.execute("DELETE FROM entries WHERE idx = 3")
    rep = repo.verify()
    assert not rep["ok"]
    assert any(p["entry"] == 3 and "#3" in p["error"] and "truncated" in p["error"] for p in rep["effects"]["problems"])
    res = CliRunner().invoke(cli, ["-C", str(repo.root), "effects", "verify"])
    assert res.exit_code == 1 and "#3" in res.output


def test_dropping_the_last_entry_after_the_last_snapshot_is_caught_by_the_seal(repo: Repo, tmp_path: Path) -> None:
    fx = Effects(repo)

    @effect(session=fx)
    def send_email(to: str) -> str:
        return to

    with fx.step(9):
        send_email("late")  # entries #4, #5: no snapshot has seen them
    with db(repo) as c:
        c.execute("DELETE FROM entries WHERE idx = 5")
    rep = verify_ledger(repo)
    assert rep["status"] == "failed" and rep["problems"][0]["entry"] == 5


def _clone(repo: Repo, dest: Path) -> Path:
    """A copy of the working tree and its store on 'another machine' (another user config dir)."""
    shutil.copytree(repo.root, dest, symlinks=True)
    return dest


CHILD = textwrap.dedent(
    """
    import json, sys
    from agentsnap_core import Repo
    repo = Repo.open(sys.argv[1])
    repo.restore("HEAD~0")
    rep = repo.verify()
    print("CHILD " + json.dumps({"ok": rep["ok"], "effects": rep["effects"],
                                 "notes": open(repo.root / "notes.txt").read()}))
    """
)


def _child(root: Path, env: dict[str, str]) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(root)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**env, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)},
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads([x for x in proc.stdout.splitlines() if x.startswith("CHILD ")][-1][6:])


def test_clone_without_the_key_restores_and_says_the_chain_cannot_be_checked(repo: Repo, tmp_path: Path) -> None:
    clone = _clone(repo, tmp_path / "elsewhere")
    (clone / "notes.txt").write_text("changed\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTSNAP_EFFECTS")}
    env["XDG_CONFIG_HOME"] = str(tmp_path / "other-machine-config")  # no key there
    out = _child(clone, env)
    assert out["notes"] == "hello\n"  # restored
    assert out["ok"] and out["effects"]["status"] == "unverifiable"
    assert "no effects key" in out["effects"]["reason"]
    res = CliRunner(env=env).invoke(cli, ["-C", str(clone), "effects", "verify"])
    assert res.exit_code == 0 and "cannot be checked" in res.output

    env["AGENTSNAP_EFFECTS_KEY"] = key_path().read_text().strip()  # the team's shared key
    out = _child(clone, env)
    assert out["ok"] and out["effects"]["status"] == "ok"


def test_a_different_key_cannot_check_or_extend_the_chain(repo: Repo, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTSNAP_EFFECTS_KEY", "00" * 32)
    rep = verify_ledger(repo)
    assert rep["status"] == "unverifiable" and "signed with key" in rep["reason"]
    fx = Effects(repo)

    @effect(session=fx)
    def send_email(to: str) -> str:
        return to

    with fx.step(7), pytest.raises(EffectKeyMissing):
        send_email("x")


def test_a_world_readable_key_file_is_refused(repo: Repo) -> None:
    os.chmod(key_path(), 0o644)
    rep = verify_ledger(repo)
    assert rep["status"] == "unverifiable" and "chmod 600" in rep["reason"]
