"""An Edit of a file the snapshots leave out is said to have no undo, and is not listed as a point that would undo it.

Met as a user: a project whose ``.agentsnapignore`` says ``data/`` (or whose ``node_modules/`` the plugin leaves out
as a bulky folder git ignores, or whose ``.env`` stays out because the store does not take secrets). Claude Code
edits ``data/settings.json``: the hook took a snapshot in silence and ``points`` listed "before Edit:
data/settings.json"; ``restore --before-call N`` then said it restored the files, and the edited file stayed as
the edit left it. Now the hook says the edit cannot be undone and takes no snapshot for it, as it already did for
a file outside the project (core: ``Repo.left_out``). And ``rm -rf data`` / ``git clean -fd`` printed "undo with: ..."
for files no snapshot held: such a command is now asked about, naming what cannot come back.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from agentsnap_claude_code.cli import main as cc_cli
from agentsnap_claude_code.hooks import run_hook
from agentsnap_core import Repo
from click.testing import CliRunner
from conftest import payload, run_plugin_hook


def _edit(project: Path, rel: str) -> dict:
    return {"tool_name": "Edit", "tool_input": {"file_path": str(project / rel), "old_string": "a", "new_string": "b"},
            "tool_use_id": "toolu_01Rm7bZ2"}


def _points(project: Path) -> str:
    r = CliRunner().invoke(cc_cli, ["points", "-C", str(project)])
    return r.output


@pytest.fixture
def ignoring(project: Path) -> Path:
    (project / ".agentsnapignore").write_text("data/\n*.local.toml\n")
    (project / "data").mkdir()
    (project / "data" / "settings.json").write_text('{"a": 1}\n')
    (project / "app.local.toml").write_text("a = 1\n")
    return project


@pytest.mark.parametrize("rel", ["data/settings.json", "app.local.toml"])
def test_an_edit_of_a_file_the_ignore_file_names_says_it_cannot_be_undone(home: Path, ignoring: Path, transcript: Path, rel: str) -> None:
    out = json.loads(run_hook(payload(ignoring, transcript, "PreToolUse", **_edit(ignoring, rel))).stdout or "{}")
    message = out.get("systemMessage", "")
    assert f"{ignoring / rel} is not in this project's snapshots" in message, out  # before: no message at all
    assert "ignored by .agentsnapignore" in message and "cannot be undone with agentsnap" in message
    assert rel not in _points(ignoring)  # before: "before Edit: .../data/settings.json" was listed


def test_an_edit_inside_a_bulky_folder_left_out_says_so_through_the_real_hook(home: Path, project: Path, transcript: Path) -> None:
    (project / ".gitignore").write_text("node_modules/\n")
    pkg = project / "node_modules" / "left-pad"
    pkg.mkdir(parents=True)
    for i in range(30):
        (pkg / f"f{i}.js").write_text(f"module.exports = {i}\n")
    (project / ".claude").mkdir(exist_ok=True)
    (project / ".claude" / "agentsnap.json").write_text(json.dumps({"bulky_files": 20}))
    _, out = run_plugin_hook(project, transcript, "PreToolUse", **_edit(project, "node_modules/left-pad/f3.js"))
    message = out.get("systemMessage", "")
    assert "node_modules/left-pad/f3.js is not in this project's snapshots" in message, out
    assert "skip_bulky_ignored" in message
    assert "f3.js" not in _points(project)


def test_an_edit_of_a_secret_the_store_does_not_take_says_so_unless_the_vault_keeps_it(home: Path, project: Path,
                                                                                         transcript: Path) -> None:
    (project / ".env").write_text("TOKEN=abc\n")
    (project / ".claude").mkdir(exist_ok=True)
    (project / ".claude" / "agentsnap.json").write_text(json.dumps({"capture_secrets": False}))
    edit = payload(project, transcript, "PreToolUse", **_edit(project, ".env"))
    assert run_hook(edit).stdout == ""  # left out of the snapshot, kept by the local vault: undoable, in silence
    with Repo.open(project) as repo:
        repo.refs.set_config("world.vault", "off")
    out = json.loads(run_hook(edit).stdout or "{}")
    assert "a credential file, not captured unless world.include_secrets is true" in out.get("systemMessage", ""), out


def test_an_edit_of_a_captured_file_is_still_snapshotted_in_silence(home: Path, ignoring: Path, transcript: Path) -> None:
    assert run_hook(payload(ignoring, transcript, "PreToolUse", **_edit(ignoring, "src/app.py"))).stdout == ""
    assert "Edit: " in _points(ignoring)


@pytest.mark.parametrize("command", ["rm -rf data", "rm -rf data src", "rm -rf .", "git clean -fdx", "git clean -fd",
                                     "cd data && rm -f settings.json", "truncate -s 0 app.local.toml"])
def test_a_destructive_command_that_takes_files_no_snapshot_holds_is_asked_about(home: Path, ignoring: Path, transcript: Path,
                                                                                  command: str) -> None:
    """``rm -rf data`` with ``data/`` in .agentsnapignore: the hook printed "undo with: ..." and the undo brought
    nothing of data/ back. ``git clean -fd`` deletes it too (git does not track it): git's own dry run says what goes."""
    out = json.loads(run_hook(payload(ignoring, transcript, "PreToolUse", tool_name="Bash", tool_input={"command": command})).stdout or "{}")
    decision = out.get("hookSpecificOutput", {})
    assert decision.get("permissionDecision") == "ask", out  # before: a systemMessage promising the undo
    reason = decision["permissionDecisionReason"]
    assert "destroys what it cannot bring back" in reason and "ignored by .agentsnapignore" in reason
    assert ".agentsnap (" not in reason  # (the link to the store outside the project is not something lost)


@pytest.mark.parametrize("command", ["rm -rf src", "git clean -fd src", "rm -rf node_modules"])
def test_a_destructive_command_on_what_the_snapshot_holds_still_gets_its_undo(home: Path, ignoring: Path, transcript: Path,
                                                                               command: str) -> None:
    (ignoring / "src" / "scratch.txt").write_text("untracked\n")
    (ignoring / "node_modules").mkdir()
    (ignoring / "node_modules" / "x.js").write_text("1\n")
    out = json.loads(run_hook(payload(ignoring, transcript, "PreToolUse", tool_name="Bash", tool_input={"command": command})).stdout or "{}")
    assert "undo with: " in out.get("systemMessage", ""), out


def test_when_what_the_snapshot_leaves_out_cannot_be_told_a_destructive_command_is_asked_about(
        home: Path, ignoring: Path, transcript: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail closed: a failure while finding what the command takes that no snapshot holds asks, never promises."""
    def broken(self, path, limit=1000):
        raise OSError("simulated")

    monkeypatch.setattr(Repo, "left_out_within", broken)
    out = json.loads(run_hook(payload(ignoring, transcript, "PreToolUse", tool_name="Bash",
                                      tool_input={"command": "rm -rf src"})).stdout or "{}")
    assert out.get("hookSpecificOutput", {}).get("permissionDecision") == "ask", out
    assert "it could not be told: simulated" in out["hookSpecificOutput"]["permissionDecisionReason"]


def test_an_edit_without_a_store_and_auto_init_off_says_no_snapshot_as_before(home: Path, project: Path, transcript: Path) -> None:
    (project / ".claude").mkdir(exist_ok=True)
    (project / ".claude" / "agentsnap.json").write_text(json.dumps({"auto_init": False}))
    out = json.loads(run_hook(payload(project, transcript, "PreToolUse", **_edit(project, "src/app.py"))).stdout or "{}")
    assert out.get("systemMessage", "").startswith("agentsnap: no snapshot before Edit"), out


def test_a_git_clean_whose_dry_run_fails_is_asked_about(home: Path, ignoring: Path, transcript: Path) -> None:
    """What ``git clean`` takes is told by git's own dry run; when that fails (here: a bad option), the hook cannot
    tell whether left-out files go with it, so it asks instead of promising the undo."""
    out = json.loads(run_hook(payload(ignoring, transcript, "PreToolUse", tool_name="Bash",
                                      tool_input={"command": "git clean -fd --no-such-option"})).stdout or "{}")
    assert out.get("hookSpecificOutput", {}).get("permissionDecision") == "ask", out
    assert "git's dry run of the same options failed" in out["hookSpecificOutput"]["permissionDecisionReason"]
