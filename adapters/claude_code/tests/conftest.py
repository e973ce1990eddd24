"""Fixtures: HOME in a tmp dir, a project with tracked and untracked files, a realistic session transcript."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from agentsnap_claude_code.transcript import encode_project_dir

FIXTURES = Path(__file__).parent / "fixtures"
SESSION = "7d1f3e2a-5b6c-4d8e-9f01-23456789abcd"


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test gets its own HOME; nothing outside tmp is read or written."""
    h = tmp_path / "home"
    h.mkdir()
    monkeypatch.setenv("HOME", str(h))
    for var in ("CLAUDE_CONFIG_DIR", "CLAUDE_PROJECT_DIR", "AGENTSNAP_DIR"):
        monkeypatch.delenv(var, raising=False)
    return h


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A git project: src/app.py committed, src/untracked.txt and notes/ not tracked by git."""
    root = tmp_path / "work" / "my_project.v2"
    (root / "src" / "pkg").mkdir(parents=True)
    (root / "src" / "app.py").write_text("print('hello')\n")
    (root / "src" / "pkg" / "__init__.py").write_text("VERSION = 1\n")
    (root / "README.md").write_text("# demo\n")
    if shutil.which("git"):
        git = ["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@example.com"]
        subprocess.run([*git, "init", "-q"], check=True)
        subprocess.run([*git, "add", "."], check=True)
        subprocess.run([*git, "commit", "-qm", "init"], check=True)
    (root / "src" / "untracked.txt").write_text("scratch notes, never committed\n")
    (root / "src" / "run.sh").write_text("#!/bin/sh\necho run\n")
    (root / "src" / "run.sh").chmod(0o755)
    return root


def write_transcript(home: Path, cwd: Path, session: str = SESSION, text: str | None = None) -> Path:
    raw = text if text is not None else (FIXTURES / "session.jsonl").read_text()
    raw = raw.replace("__CWD__", str(cwd)).replace("__SESSION__", session)
    folder = home / ".claude" / "projects" / encode_project_dir(cwd)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{session}.jsonl"
    path.write_text(raw)
    return path


@pytest.fixture
def transcript(home: Path, project: Path) -> Path:
    return write_transcript(home, project)


def payload(project: Path, transcript: Path | None, event: str, **extra: Any) -> str:
    data: dict[str, Any] = {
        "session_id": SESSION,
        "transcript_path": str(transcript) if transcript else "",
        "cwd": str(project),
        "permission_mode": "default",
        "hook_event_name": event,
        **extra,
    }
    return json.dumps(data)
