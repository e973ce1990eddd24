"""A Claude Code session as a live object agentsnap can capture and restore (through its transcript)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from .transcript import Transcript, read_transcript


class ClaudeSession:
    """A session identified by its transcript file (``~/.claude/projects/<dir>/<id>.jsonl``).

    Capturing reads the transcript; restoring rewrites it byte for byte from the captured lines
    (a truncated last line included), so ``claude --resume <id>`` sees the conversation as it was.
    """

    def __init__(self, transcript_path: str | os.PathLike[str]) -> None:
        self.path = Path(transcript_path)

    def transcript(self) -> Transcript:
        if not self.path.exists():
            return Transcript(path=str(self.path), entries=[])
        return read_transcript(self.path)

    def restore_entries(self, entries: list[dict[str, Any]]) -> None:
        raws = [e["raw"] for e in entries if isinstance(e, dict) and isinstance(e.get("raw"), str)]
        if len(raws) != len(entries):
            raise ValueError("these trace entries are not Claude Code transcript lines (no 'raw' text)")
        text = "".join(r + "\n" for r in raws)
        if entries and entries[-1].get("role") == "claude-code:truncated":
            text = text[:-1]
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".agentsnap-tmp")
        tmp.write_text(text, encoding="utf-8", errors="surrogateescape")
        os.replace(tmp, self.path)

    def __repr__(self) -> str:
        return f"ClaudeSession({str(self.path)!r})"
