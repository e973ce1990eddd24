"""Transcript parsing, forking and the project-directory encoding, on a realistic fixture."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from agentsnap_claude_code import ClaudeSession
from agentsnap_claude_code.transcript import encode_project_dir, fork_lines, read_transcript, write_forked_session
from agentsnap_core import Repo
from conftest import SESSION, write_transcript


def test_every_line_is_kept_verbatim_and_unknown_types_pass_through(transcript: Path) -> None:
    t = read_transcript(transcript)
    raw_lines = transcript.read_text().splitlines()
    assert [e["raw"] for e in t.entries] == raw_lines
    assert t.session_id == SESSION and not t.truncated_tail and t.bad_lines == []
    kinds = [e["type"] for e in t.entries]
    assert kinds == ["summary", "file-history-snapshot", "user", "assistant", "assistant", "user", "queue-operation", "system", "assistant", "assistant"]
    assert t.entries[6]["role"] == "claude-code:queue-operation"
    assert t.entries[-1]["tool_calls"][0]["input"]["command"] == "rm -rf src"
    assert t.entries[5]["tool_results"] == ["toolu_01Ls9aQ1"]

    lines, rep = fork_lines(t.entries, "11111111-2222-4333-8444-555555555555", keep_dangling=True)
    for old, new in zip(raw_lines, lines, strict=True):
        o, n = json.loads(old), json.loads(new)
        if "sessionId" not in o:
            assert new == old  # byte for byte
        else:
            assert n.pop("sessionId") == "11111111-2222-4333-8444-555555555555"
            o.pop("sessionId")
            assert n == o  # nothing else changed (uuid, parentUuid, unknown fields)
    assert rep.lines == len(raw_lines) and rep.dropped_dangling == 0


def test_a_truncated_last_line_is_reported_not_fatal(home: Path, project: Path) -> None:
    full = (Path(__file__).parent / "fixtures" / "session.jsonl").read_text()
    cut = full[: full.rindex('"timestamp"')]  # a session still being written
    path = write_transcript(home, project, text=cut)
    t = read_transcript(path)
    assert t.truncated_tail and t.summary()["truncated_tail"] is True
    assert t.entries[-1]["invalid"] and len(t.entries) == 10
    lines, rep = fork_lines(t.entries)
    assert rep.dropped_invalid == 1 and all(json.loads(line) for line in lines)
    # a corrupt middle line is counted and skipped too
    mid = full.splitlines()
    mid.insert(3, '{"type": "user", "broken')
    t2 = read_transcript(write_transcript(home, project, text="\n".join(mid) + "\n"))
    assert t2.bad_lines == [4] and not t2.truncated_tail


def test_fork_is_written_where_claude_resume_looks(home: Path, project: Path, transcript: Path) -> None:
    t = read_transcript(transcript)
    rep = write_forked_session(t.entries, str(project))
    path = Path(rep.path or "")
    assert path.parent == transcript.parent  # same encoded project directory as the original session
    assert path.name == f"{rep.session_id}.jsonl" and rep.session_id != SESSION
    with pytest.raises(FileExistsError):
        write_forked_session(t.entries, str(project), session_id=rep.session_id)
    with pytest.raises(ValueError):
        write_forked_session(t.entries, str(project), session_id="../../etc/passwd")


def test_claude_config_dir_is_honoured(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, transcript: Path, project: Path) -> None:
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "cfg"))
    rep = write_forked_session(read_transcript(transcript).entries, str(project))
    assert Path(rep.path or "").parent == tmp_path / "cfg" / "projects" / encode_project_dir(project)


@pytest.mark.parametrize(
    ("cwd", "expected"),
    [
        ("/Users/me/WebProjects/claude-code-cmv", "-Users-me-WebProjects-claude-code-cmv"),
        ("/home/chris/2_project-files/m2", "-home-chris-2-project-files-m2"),
        ("/Users/me/.agents", "-Users-me--agents"),
        ("/tmp/a b/c@d+e~f", "-tmp-a-b-c-d-e-f"),
        ("/tmp/d\u00e9j\u00e0", "-tmp-d-j-"),
        ("/tmp/\U0001f600x", "-tmp---x"),  # one character outside the BMP is two UTF-16 units
    ],
)
def test_encode_project_dir(cwd: str, expected: str) -> None:
    assert encode_project_dir(cwd) == expected


def test_encode_project_dir_caps_long_paths_with_a_hash() -> None:
    long = "/" + "/".join(["segment"] * 40)
    enc = encode_project_dir(long)
    assert enc[:200] == long.replace("/", "-")[:200] and len(enc) > 200 and enc[200] == "-"
    assert enc != encode_project_dir(long + "x") and enc[201:].isalnum()


def test_claude_session_object_restores_the_transcript_byte_for_byte(tmp_path: Path, home: Path, project: Path) -> None:
    full = (Path(__file__).parent / "fixtures" / "session.jsonl").read_text()
    path = write_transcript(home, project, text=full + '{"type":"assistant","trunc')  # truncated tail kept as is
    original = path.read_bytes()
    session = ClaudeSession(path)
    with Repo.init(tmp_path / "store") as repo:
        snap = repo.capture(session, "session")
        path.write_text("something else\n")
        repo.restore_into(session, snap.id)
    assert path.read_bytes() == original
