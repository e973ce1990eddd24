"""Trust at the edges: what a Claude Code user meets when the input, the transcript or the store is not as expected.

Each test names the old behaviour it guards against in its docstring.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from agentsnap_claude_code.hooks import run_hook
from agentsnap_claude_code.points import positions
from agentsnap_claude_code.transcript import fork_lines, read_transcript
from conftest import FIXTURES, SESSION, payload, write_transcript
from fake_messages_api import FakeMessagesAPI
from test_real_claude_code import _cc, claude, env  # noqa: F401 - the real CLI's fixtures

RM_SRC = {"tool_name": "Bash", "tool_input": {"command": "rm -rf src"}, "tool_use_id": "toolu_01Rm7bZ2"}


def _session_text(project: Path) -> str:
    return (FIXTURES / "session.jsonl").read_text().replace("__CWD__", str(project)).replace("__SESSION__", SESSION)


def test_a_transcript_cut_in_the_middle_of_a_character_still_lets_the_hook_snapshot(home: Path, project: Path) -> None:
    """Claude Code was writing a line with a non-ASCII character ("über") when the hook read the transcript: the file
    ended half-way through the character's UTF-8 bytes.

    Old behaviour: the cut line was kept with a surrogate, which the store cannot hold, so EVERY snapshot failed
    ("agentsnap could not snapshot the project before this destructive command (value cannot be stored: 'utf-8'
    codec can't encode character '\\udcc3' ...)") and the user was asked to run `rm -rf src` unprotected, although
    the README says a truncated last line is "reported ... never fatal".
    """
    line = json.dumps({"type": "user", "message": {"role": "user", "content": "über"}}, ensure_ascii=False).encode()
    path = write_transcript(home, project, text="")
    path.write_bytes(_session_text(project).encode() + line[: line.index("ü".encode()) + 1])
    out = json.loads(run_hook(payload(project, path, "PreToolUse", **RM_SRC)).stdout)
    assert "hookSpecificOutput" not in out, out
    assert "undo with: agentsnap-claude-code restore" in out["systemMessage"]
    t = read_transcript(path)
    assert t.truncated_tail and t.entries[-1]["invalid"] and "\ufffd" in t.entries[-1]["raw"]
    lines, report = fork_lines(t.entries)
    assert report.dropped_invalid == 1 and all("\ufffd" not in x for x in lines)  # the cut line stays out of a fork


def test_a_damaged_line_that_is_not_utf8_is_a_bad_line_not_a_failed_snapshot(home: Path, project: Path) -> None:
    """A line in the middle of the transcript holds bytes that are not UTF-8 (a damaged file).

    Old behaviour: every later snapshot of the session failed with "value cannot be stored ... surrogates not
    allowed": destructive commands were asked about and edits went unprotected for the rest of the session.
    """
    text = _session_text(project).encode().split(b"\n")
    text[3] = text[3].replace(b"Let me look", b"Let \xff\xfe look")
    path = write_transcript(home, project, text="")
    path.write_bytes(b"\n".join(text))
    out = json.loads(run_hook(payload(project, path, "PreToolUse", **RM_SRC)).stdout)
    assert "undo with: agentsnap-claude-code restore" in out["systemMessage"], out
    t = read_transcript(path)
    assert t.bad_lines == [4] and not t.truncated_tail


def test_half_a_surrogate_pair_escaped_in_the_transcript_does_not_break_snapshots(home: Path, project: Path) -> None:
    """A valid JSON line whose text ends in half an emoji (``"\\ud83d"``: a JavaScript string cut between the two
    halves of a surrogate pair, as when a long tool output is shortened).

    Old behaviour: the normalised ``content`` held the lone surrogate and the snapshot failed ("value cannot be
    stored: 'utf-8' codec can't encode character '\\ud83d'"): the destructive command was asked about.
    """
    line = '{"type":"user","message":{"role":"user","content":"output cut \\ud83d"},"uuid":"u-cut","sessionId":"' + SESSION + '"}\n'
    path = write_transcript(home, project, text=_session_text(project) + line)
    out = json.loads(run_hook(payload(project, path, "PreToolUse", **RM_SRC)).stdout)
    assert "undo with: agentsnap-claude-code restore" in out["systemMessage"], out
    entry = read_transcript(path).entries[-1]
    assert entry["content"] == "output cut \ufffd" and entry["raw"] == line.rstrip("\n")  # raw stays as Claude Code wrote it


def test_a_store_dir_inside_the_project_is_refused_not_promised_as_an_undo(home: Path, project: Path, transcript: Path) -> None:
    """`"store_dir": ".snaps"` in the project's .claude/agentsnap.json (a relative path: the hook runs in the project).

    Old behaviour: the store was made at <project>/.snaps/..., the hook said "snapshot ... taken before this call
    (`git clean -fdx`); undo with: agentsnap-claude-code restore ...", then `git clean -fdx` deleted the store along
    with the files and the undo said "no agentsnap store for <project> yet". The README says the store is "never
    inside the project".
    """
    (project / ".claude").mkdir()
    (project / ".claude" / "agentsnap.json").write_text(json.dumps({"store_dir": str(project / ".snaps")}))
    clean = {"tool_name": "Bash", "tool_input": {"command": "git clean -fdx"}, "tool_use_id": "toolu_01Clean1"}
    out = json.loads(run_hook(payload(project, transcript, "PreToolUse", **clean)).stdout)
    spec = out.get("hookSpecificOutput") or {}
    assert spec.get("permissionDecision") == "ask", out
    assert "inside the project" in spec["permissionDecisionReason"] and "store_dir" in spec["permissionDecisionReason"]
    assert not (project / ".snaps").exists()  # nothing half made in the project


def _line(kind: str, content: object, uuid: str, parent: str | None, cwd: Path, **extra: object) -> str:
    message = {"role": kind, "content": content}
    return json.dumps({"parentUuid": parent, "isSidechain": False, "type": kind, "message": message, "uuid": uuid,
                       "sessionId": SESSION, "cwd": str(cwd), **extra})


def test_a_slash_command_counts_as_one_prompt_not_two(home: Path, project: Path) -> None:
    """The user typed "first prompt", then `/agentsnap:log`, then "second prompt". Claude Code writes a slash command
    as two user lines: `<command-name>/agentsnap:log</command-name>` and the command's expanded text marked
    `"isMeta": true` (as the real CLI 2.1.197 does; a local command such as `/model` adds an `isMeta` caveat and a
    `<local-command-stdout>` line).

    Old behaviour: every such line counted as a prompt, so `points` said "before prompt 4 (end of turn 3)" after the
    user's third input and `--before-prompt 3` rewound to before `/agentsnap:log`, not to before "second prompt".
    """
    from agentsnap_claude_code.cli import main as cli
    from click.testing import CliRunner

    lines = [
        _line("user", "first prompt", "u1", None, project),
        _line("assistant", [{"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "rm -rf notes"}}], "a1", "u1", project),
        _line("user", [{"tool_use_id": "toolu_1", "type": "tool_result", "content": "ok"}], "r1", "a1", project),
        _line("assistant", [{"type": "text", "text": "done"}], "a2", "r1", project),
        _line("user", "<local-command-caveat>Caveat: generated by local commands.</local-command-caveat>", "c0", "a2", project, isMeta=True),
        _line("user", "<command-name>/model</command-name>", "c1", "c0", project),
        _line("user", "<local-command-stdout>Set model to opus</local-command-stdout>", "c2", "c1", project),
        _line("user", "<command-message>agentsnap:log</command-message>\n<command-name>/agentsnap:log</command-name>", "l1", "c2", project),
        _line("user", [{"type": "text", "text": "## agentsnap history ..."}], "l2", "l1", project, isMeta=True),
        _line("assistant", [{"type": "text", "text": "here is the history"}], "a3", "l2", project),
    ]
    path = write_transcript(home, project, text="\n".join(lines) + "\n")
    stop = run_hook(payload(project, path, "Stop", stop_hook_active=False))
    assert stop.stdout == ""
    lines += [
        _line("user", "second prompt", "u2", "a3", project),
        _line("assistant", [{"type": "tool_use", "id": "toolu_2", "name": "Bash", "input": {"command": "rm -rf src"}}], "a4", "u2", project),
    ]
    path.write_text("\n".join(lines) + "\n")
    (project / "src" / "app.py").write_text("changed by the second prompt's turn\n")
    run_hook(payload(project, path, "PreToolUse", tool_name="Bash", tool_input={"command": "rm -rf src"}, tool_use_id="toolu_2"))
    listing = CliRunner().invoke(cli, ["points", "-C", str(project)]).output
    assert "end of turn 3" in listing and "end of turn 4" not in listing, listing  # /model and /agentsnap:log: one each
    assert "before destructive tool call 2 (Bash: rm -rf src)" in listing
    done = CliRunner().invoke(cli, ["restore", "--before-prompt", "4", "-C", str(project), "--json"])
    assert done.exit_code == 0, done.output
    assert (project / "src" / "app.py").read_text() == "print('hello')\n"  # before "second prompt" (prompt 4)


def test_the_continue_with_line_of_a_rewind_works_for_a_project_path_with_spaces_and_quotes(home: Path, tmp_path: Path) -> None:
    """A project at `.../my proj 'v2' ü`: `agentsnap-claude-code rewind --last-destructive` ends with the line the user
    copies to go on.

    Old behaviour: "continue with: cd /.../my proj 'v2' ü && claude --resume <id>": the path was not quoted, so the
    shell said "cd: too many arguments" (the undo line beside it was quoted).
    """
    import shlex

    from agentsnap_claude_code.cli import main as cli
    from click.testing import CliRunner

    project = tmp_path / "my proj 'v2' ü"
    (project / "src").mkdir(parents=True)
    (project / "src" / "app.py").write_text("print('hello')\n")
    (project / ".git").mkdir()  # (the project root marker is enough here)
    path = write_transcript(home, project)
    out = json.loads(run_hook(payload(project, path, "PreToolUse", **RM_SRC)).stdout)
    assert "undo with" in out["systemMessage"], out
    done = CliRunner().invoke(cli, ["rewind", "--last-destructive", "-C", str(project)])
    assert done.exit_code == 0, done.output
    [line] = [x for x in done.output.splitlines() if x.startswith("continue with: ")]
    words = shlex.split(line[len("continue with: "):])
    assert words[:3] == ["cd", str(project), "&&"] and words[3:5] == ["claude", "--resume"], words


def test_agentsnap_restore_typed_in_one_session_uses_its_own_points_while_another_session_works(home: Path, project: Path) -> None:
    """`/agentsnap:restore --before-call N` typed in session A while session B (another terminal, same project) has
    snapshotted since. The command line is the plugin's commands/restore.md one, with `${CLAUDE_SESSION_ID}` and
    `$ARGUMENTS` put in as Claude Code does (checked with the real CLI 2.1.197).

    Old behaviour: the newest session's point, B's, was restored: src/ stayed deleted although A's point held it.
    """
    import shlex

    from agentsnap_claude_code.cli import main as cli
    from agentsnap_claude_code.install import plugin_root
    from click.testing import CliRunner

    ids = {"A": "aaaaaaaa-1111-4111-8111-111111111111", "B": "bbbbbbbb-2222-4222-8222-222222222222"}
    want = (project / "src" / "app.py").read_bytes()
    for name, command in (("A", "rm -rf src"), ("B", "rm -rf README.md")):
        path = write_transcript(home, project, session=ids[name])
        call = {"tool_name": "Bash", "tool_input": {"command": command}, "tool_use_id": "toolu_01Rm7bZ2"}
        out = json.loads(run_hook(payload(project, path, "PreToolUse", session_id=ids[name], **call)).stdout)
        assert "undo with" in out["systemMessage"], out
        shutil.rmtree(project / "src") if name == "A" else (project / "README.md").unlink()
    text = (plugin_root() / "commands" / "restore.md").read_text()
    [line] = [x for x in text.splitlines() if x.startswith("agentsnap-claude-code restore")]
    n = positions(read_transcript(path).entries, "toolu_01Rm7bZ2")["call"]  # (the same number in A and in B)
    line = line.replace("${CLAUDE_SESSION_ID}", ids["A"]).replace("$ARGUMENTS", f"--before-call {n}")
    done = CliRunner().invoke(cli, [*shlex.split(line)[1:], "-C", str(project)])
    assert done.exit_code == 0, done.output
    assert (project / "src" / "app.py").read_bytes() == want


def test_points_for_a_mistyped_session_id_names_the_sessions_that_exist(project: Path, transcript: Path) -> None:
    """`agentsnap-claude-code points --session 7d1f3e2a` (the id cut short) in a project with snapshots.

    Old behaviour: "no snapshots of a Claude Code session in this project yet", exit status 0: the user was told
    nothing had been protected.
    """
    from agentsnap_claude_code.cli import main as cli
    from click.testing import CliRunner

    assert "undo with" in json.loads(run_hook(payload(project, transcript, "PreToolUse", **RM_SRC)).stdout)["systemMessage"]
    done = CliRunner().invoke(cli, ["points", "--session", SESSION[:8], "-C", str(project)])
    assert done.exit_code == 2 and "yet" not in done.output, done.output
    assert f"no snapshots of session '{SESSION[:8]}'" in done.output and SESSION in done.output


def test_an_edit_of_a_file_outside_the_project_is_not_listed_as_a_point_that_would_undo_it(home: Path, project: Path, transcript: Path, tmp_path: Path) -> None:
    """Claude Code edits ~/notes.txt (an existing file outside the project, approved by the user).

    Old behaviour: the hook snapshotted the project in silence and `points` listed "before tool call N (Write:
    .../notes.txt)"; `restore --before-call N` then said "restored the files of ..." and the edited file stayed as
    the edit left it.
    """
    from agentsnap_claude_code.cli import main as cli
    from click.testing import CliRunner

    elsewhere = tmp_path / "notes.txt"
    elsewhere.write_text("mine\n")
    call = {"tool_name": "Write", "tool_input": {"file_path": str(elsewhere), "content": "new"}, "tool_use_id": "toolu_01Rm7bZ2"}
    out = json.loads(run_hook(payload(project, transcript, "PreToolUse", **call)).stdout or "{}")
    assert "outside the project" in out.get("systemMessage", ""), out
    listing = CliRunner().invoke(cli, ["points", "-C", str(project)]).output
    assert "notes.txt" not in listing, listing
    inside = {"tool_name": "Edit", "tool_input": {"file_path": str(project / "src" / "app.py")}, "tool_use_id": "toolu_01Rm7bZ2"}
    assert run_hook(payload(project, transcript, "PreToolUse", **inside)).stdout == ""  # (inside: snapshotted, in silence)
    assert "Edit: " in CliRunner().invoke(cli, ["points", "-C", str(project)]).output


@pytest.mark.helper
def test_in_session_rewind_uses_this_conversations_points_while_another_session_works_in_the_project(
    claude: Path, env: dict[str, str], project: Path  # noqa: F811
) -> None:
    """Two Claude Code sessions in one project (the real CLI): session A runs `rm -rf src`, then session B, started
    later in another terminal, runs `rm -rf notes`. Back in A, the user types `/agentsnap:rewind --before-call 1`.

    Old behaviour: the command took the points of the newest session, B's: the files went back to the state before
    B's call 1 (src/ still gone) and the "forked conversation" was B's, while A's own point existed.
    """
    (project / "notes").mkdir()
    (project / "notes" / "todo.txt").write_text("b's notes\n")
    src = {p.relative_to(project).as_posix(): p.read_bytes() for p in (project / "src").rglob("*") if p.is_file()}
    runs = {}
    for name, command in (("A", "rm -rf src"), ("B", "rm -rf notes")):
        with FakeMessagesAPI([command]) as api:
            proc = _cc(claude, "-p", f"session {name}: clean up", "--output-format", "json", "--allowedTools", "Bash",
                       cwd=project, env={**env, "ANTHROPIC_BASE_URL": api.url})
        runs[name] = json.loads(proc.stdout)["session_id"]
    assert not (project / "src").exists() and not (project / "notes").exists()
    with FakeMessagesAPI([]) as api:
        _cc(claude, "--resume", runs["A"], "-p", "/agentsnap:rewind --before-call 1", "--output-format", "json",
            cwd=project, env={**env, "ANTHROPIC_BASE_URL": api.url})
    sent = json.dumps([r["body"].get("messages") for r in api.requests])
    assert "session A: clean up" in sent  # (the command ran in A's conversation)
    assert {p.relative_to(project).as_posix(): p.read_bytes() for p in (project / "src").rglob("*") if p.is_file()} == src
    forks = [p for p in (Path(env["HOME"]) / ".claude" / "projects").rglob("*.jsonl") if p.stem not in runs.values()]
    [fork] = [p for p in forks if "switch to the fork" not in p.read_text() and p.stem in sent]
    text = fork.read_text()
    assert "session A: clean up" in text and "session B" not in text


def test_half_a_surrogate_pair_in_a_destructive_command_still_gets_its_snapshot(home: Path, project: Path,
                                                                              transcript: Path) -> None:
    """Claude Code's hook input is JSON, which can escape half a surrogate pair (``"\\ud800"``). Old behaviour: the
    command went into the snapshot's message as it was, the store refused it ("value cannot be stored: 'utf-8' codec
    can't encode character '\\ud800' ... surrogates not allowed"), and ``rm -rf src`` was put to the user as
    "agentsnap could not snapshot the project before this destructive command" - the project was fine to snapshot."""
    from agentsnap_claude_code.cli import main as cli
    from click.testing import CliRunner

    call = {"tool_name": "Bash", "tool_input": {"command": "rm -rf src # caf\ud800"}, "tool_use_id": "toolu_01Rm7bZ2"}
    out = json.loads(run_hook(payload(project, transcript, "PreToolUse", **call)).stdout or "{}")
    assert "hookSpecificOutput" not in out, out
    assert "undo with: agentsnap-claude-code restore" in out["systemMessage"], out
    listing = CliRunner().invoke(cli, ["points", "-C", str(project)]).output
    assert "rm -rf src # caf?" in listing, listing


def test_the_core_cli_finds_the_plugins_store_once_the_link_went_with_the_files(home: Path, project: Path) -> None:
    """The plugin keeps the project's store outside it and a link file ``.agentsnap`` in it for the core CLI. After
    ``git clean -fdx`` (or ``rm -rf ./* ./.[!.]*``) took the link, ``agentsnap restore HEAD`` - the core CLI the README
    also names - said "no agentsnap store found" until the plugin's next hook made the link again. Now the plugin
    records its link in core's registry of stores outside their trees: the core CLI finds the store by the project's
    path, makes the link again and says so."""
    import subprocess
    import sys

    path = write_transcript(home, project)
    out = json.loads(run_hook(payload(project, path, "PreToolUse", **RM_SRC)).stdout)
    assert "undo with" in out["systemMessage"], out
    shutil.rmtree(project / "src")
    (project / ".agentsnap").unlink()
    proc = subprocess.run([sys.executable, "-m", "agentsnap_core", "restore", "HEAD"], cwd=project,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and "made again" in proc.stderr, (proc.stdout, proc.stderr)
    assert (project / "src" / "app.py").read_text() == "print('hello')\n"
