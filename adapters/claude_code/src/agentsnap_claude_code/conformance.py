"""The conformance-kit case for this adapter (``agentsnap_claude_code.conformance:case``)."""

from __future__ import annotations

import atexit
import json
import shutil
import tempfile
import uuid
from pathlib import Path
from typing import Any

from agentsnap_core.testing import AdapterCase

from .session import ClaudeSession

SESSION = "5b0f7a52-3c8e-4d7e-9d55-0c1f2a3b4c5d"
CWD = "/home/dev/project"


def _line(kind: str, index: int, parent: str | None, content: Any) -> dict[str, Any]:
    role = "user" if kind == "user" else "assistant"
    return {
        "parentUuid": parent,
        "isSidechain": False,
        "userType": "external",
        "cwd": CWD,
        "sessionId": SESSION,
        "version": "2.1.0",
        "type": kind,
        "message": {"role": role, "content": content},
        "uuid": str(uuid.UUID(int=index + 1)),
        "timestamp": f"2026-11-22T10:00:{index:02d}.000Z",
    }


def make() -> ClaudeSession:
    folder = Path(tempfile.mkdtemp(prefix="agentsnap-cc-case-"))
    atexit.register(shutil.rmtree, folder, True)
    session = ClaudeSession(folder / f"{SESSION}.jsonl")
    first = _line("user", 0, None, "hello")
    session.path.write_text(json.dumps({"type": "summary", "summary": "demo", "leafUuid": first["uuid"]}) + "\n" + json.dumps(first) + "\n")
    return session


def step(session: ClaudeSession, i: int) -> None:
    lines = [e for e in session.transcript().entries if e.get("type") in ("user", "assistant")]
    parent = lines[-1]["id"] if lines else None
    a = _line("assistant", 2 * i + 1, parent, [{"type": "text", "text": f"answer {i}"}])
    u = _line("user", 2 * i + 2, a["uuid"], f"next {i}")
    with open(session.path, "a") as f:
        f.write(json.dumps(a) + "\n" + json.dumps(u) + "\n")


def observe(session: ClaudeSession) -> list[Any]:
    return [json.loads(e["raw"]) for e in session.transcript().entries]


def case() -> AdapterCase:
    return AdapterCase(name="claude_code ClaudeSession", make=make, step=step, observe=observe, factory="agentsnap_claude_code.conformance:case")
