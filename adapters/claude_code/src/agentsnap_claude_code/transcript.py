"""Claude Code session transcripts (``~/.claude/projects/<encoded cwd>/<session id>.jsonl``).

The format is undocumented and changes between releases, so this module is defensive:
every line is kept verbatim (``raw``) next to a small normalised view used for the agentsnap
``trace`` layer; unknown line types pass through untouched; a truncated last line (a session
still being written) is reported, never fatal; a forked copy changes only ``sessionId`` (and,
on request, ``cwd``), so ``uuid``/``parentUuid`` chains stay exactly as Claude Code wrote them.
"""

from __future__ import annotations

import json
import os
import re
import uuid
from dataclasses import dataclass, field
from typing import Any

from .paths import claude_config_dir

__all__ = [
    "ForkReport",
    "Transcript",
    "claude_config_dir",
    "encode_project_dir",
    "fork_lines",
    "read_transcript",
    "transcript_entries",
    "write_forked_session",
]

#: role given to lines that are not chat messages; their ``type`` is kept in the entry
TEXT_LIMIT = 2000
_MESSAGE_TYPES = ("user", "assistant", "system")


@dataclass
class Transcript:
    """A parsed transcript: one trace entry per line, in file order."""

    path: str
    entries: list[dict[str, Any]]
    session_id: str | None = None
    cwd: str | None = None
    truncated_tail: bool = False
    bad_lines: list[int] = field(default_factory=list)
    #: the tool call a PreToolUse hook waited for in vain (Claude Code had not written it yet): the capture may lack
    #: the conversation's last steps
    pending_call_missing: str | None = None

    def summary(self) -> dict[str, Any]:
        out = {
            "path": self.path,
            "session_id": self.session_id,
            "lines": len(self.entries),
            "truncated_tail": self.truncated_tail,
            "bad_lines": list(self.bad_lines),
        }
        if self.pending_call_missing is not None:
            out["pending_call_missing"] = self.pending_call_missing
        return out


def encode_project_dir(cwd: str | os.PathLike[str]) -> str:
    """The directory name Claude Code uses under ``projects/`` for a working directory.

    Every UTF-16 code unit outside ``[A-Za-z0-9]`` becomes ``-`` (so ``/``, ``.``, ``_`` and
    spaces all fold); names longer than 200 are cut and suffixed with a base-36 hash
    (observed behaviour, see the README's sources: anthropics/claude-code#24067,
    bobmatnyc/trusty-tools#6778).
    """
    text = os.fspath(cwd)
    units = text.encode("utf-16-le")
    codes = [int.from_bytes(units[i : i + 2], "little") for i in range(0, len(units), 2)]
    key = "".join(chr(c) if c < 128 and (chr(c).isalnum()) else "-" for c in codes)
    if len(key) <= 200:
        return key
    h = 0
    for c in codes:
        h = (h * 31 + c) & 0xFFFFFFFF
    if h >= 1 << 31:
        h -= 1 << 32
    return f"{key[:200]}-{_base36(abs(h))}"


def _base36(n: int) -> str:
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    while True:
        n, r = divmod(n, 36)
        out = digits[r] + out
        if n == 0:
            return out


def _text_of(content: Any) -> tuple[str, list[dict[str, Any]], list[str]]:
    """(text, tool calls, tool_result ids) of a message's content (string or block list)."""
    if isinstance(content, str):
        return content[:TEXT_LIMIT], [], []
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    results: list[str] = []
    if isinstance(content, list):
        for block in content:
            if not isinstance(block, dict):
                continue
            kind = block.get("type")
            if kind == "text":
                texts.append(str(block.get("text", "")))
            elif kind == "tool_use":
                calls.append({"id": block.get("id"), "name": block.get("name"), "input": block.get("input")})
            elif kind == "tool_result":
                results.append(str(block.get("tool_use_id")))
                inner = block.get("content")
                texts.append(_text_of(inner)[0] if not isinstance(inner, str) else inner)
    return "\n".join(texts)[:TEXT_LIMIT], calls, results


def _entry(index: int, raw: str, obj: Any) -> dict[str, Any]:
    if not isinstance(obj, dict):
        return {"id": f"line-{index}", "role": "claude-code:other", "type": None, "raw": raw}
    kind = obj.get("type")
    message: dict[str, Any] = obj["message"] if isinstance(obj.get("message"), dict) else {}
    role = message.get("role") or (kind if kind in _MESSAGE_TYPES else f"claude-code:{kind}")
    entry: dict[str, Any] = {
        "id": obj.get("uuid") or f"line-{index}",
        "role": role,
        "type": kind,
        "parent": obj.get("parentUuid"),
        "raw": raw,
    }
    text, calls, results = _text_of(message.get("content") if message else obj.get("content"))
    if kind == "summary":
        text = str(obj.get("summary", ""))[:TEXT_LIMIT]
    entry["content"] = text
    if obj.get("isMeta") is True:  # (written by Claude Code, not typed: e.g. a slash command's expanded text)
        entry["is_meta"] = True
    if calls:
        entry["tool_calls"] = calls
    if results:
        entry["tool_results"] = results
    return entry


#: a lone surrogate: from bytes that are not UTF-8 (decoded with surrogateescape) or a ``\\udXXX`` escape of half a pair
_SURROGATE = re.compile("[\ud800-\udfff]")


def _no_surrogates(value: Any) -> Any:
    """``value`` with every lone surrogate in its strings replaced by U+FFFD (the store keeps UTF-8 text only)."""
    if isinstance(value, str):
        return _SURROGATE.sub("\ufffd", value)
    if isinstance(value, list):
        return [_no_surrogates(v) for v in value]
    if isinstance(value, dict):
        return {_no_surrogates(k): _no_surrogates(v) for k, v in value.items()}
    return value


def transcript_entries(data: bytes, path: str = "") -> Transcript:
    """Parse transcript bytes; never raises for malformed content.

    A line that is not UTF-8 (a last line cut in the middle of a character while Claude Code writes it, or a
    damaged one) counts as a truncated tail or a bad line, its ``raw`` with U+FFFD for the bytes that are not text:
    the store keeps UTF-8 text only, and one such line must not make every snapshot of the session fail. Half a
    surrogate pair escaped in a valid line (``"\\ud83d"``, a JavaScript string cut between the two) keeps its
    ``raw`` as written; only the normalised fields get U+FFFD.
    """
    try:
        text, undecodable = data.decode("utf-8"), False
    except UnicodeDecodeError:
        text, undecodable = data.decode("utf-8", errors="surrogateescape"), True
    lines = text.split("\n")
    ends_with_newline = text.endswith("\n")
    if ends_with_newline:
        lines.pop()
    t = Transcript(path=path, entries=[])
    for i, raw in enumerate(lines):
        if not raw.strip():
            continue
        try:
            if undecodable and _SURROGATE.search(raw):
                raw = raw.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
                raise ValueError("not UTF-8")
            obj = json.loads(raw)
        except ValueError:
            last = i == len(lines) - 1
            if last and not ends_with_newline:
                t.truncated_tail = True
                t.entries.append({"id": "truncated-tail", "role": "claude-code:truncated", "type": None, "raw": raw, "invalid": True})
            else:
                t.bad_lines.append(i + 1)
                t.entries.append({"id": f"bad-line-{i + 1}", "role": "claude-code:unparsed", "type": None, "raw": raw, "invalid": True})
            continue
        if "\\ud" in raw or "\\uD" in raw:  # (cheap test first: a lone surrogate can only come from such an escape)
            obj = _no_surrogates(obj)
        if isinstance(obj, dict):
            t.session_id = obj.get("sessionId") or t.session_id
            t.cwd = obj.get("cwd") or t.cwd
        t.entries.append(_entry(i, raw, obj))
    return t


def read_transcript(path: str | os.PathLike[str]) -> Transcript:
    """Read a transcript file (it may be growing while we read)."""
    with open(path, "rb") as f:
        data = f.read()
    return transcript_entries(data, os.fspath(path))


def is_transcript_trace(entries: Any) -> bool:
    """True when a trace layer holds Claude Code transcript lines (every entry has ``raw``)."""
    return isinstance(entries, list) and bool(entries) and all(isinstance(e, dict) and isinstance(e.get("raw"), str) for e in entries)


@dataclass
class ForkReport:
    session_id: str
    lines: int
    dropped_invalid: int = 0
    dropped_dangling: int = 0
    path: str | None = None
    cwd: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _dangling_tail(objs: list[dict[str, Any] | None]) -> set[int]:
    """Indexes of trailing assistant lines whose tool_use has no tool_result after it."""
    answered: set[str] = set()
    drop: set[int] = set()
    for i in range(len(objs) - 1, -1, -1):
        obj = objs[i]
        if obj is None or obj.get("type") not in ("user", "assistant"):
            continue
        message: dict[str, Any] = obj["message"] if isinstance(obj.get("message"), dict) else {}
        _, calls, results = _text_of(message.get("content"))
        if obj.get("type") == "assistant" and calls and not any(c["id"] in answered for c in calls):
            drop.add(i)
            continue
        answered.update(results)
        break
    return drop


def fork_lines(
    entries: list[dict[str, Any]], session_id: str | None = None, cwd: str | None = None, keep_dangling: bool = False
) -> tuple[list[str], ForkReport]:
    """JSONL lines of a copy of the transcript under a new session id.

    Invalid lines (a truncated tail, corrupt lines) are dropped and counted; trailing
    assistant tool calls without a result (the call the snapshot was taken before) are
    dropped unless ``keep_dangling``, so the resumed session does not re-run them blindly.
    """
    new_id = session_id or str(uuid.uuid4())
    report = ForkReport(session_id=new_id, lines=0, cwd=cwd)
    objs: list[dict[str, Any] | None] = []
    raws: list[str | None] = []
    for e in entries:
        raw = e.get("raw")
        if not isinstance(raw, str) or e.get("invalid"):
            report.dropped_invalid += 1
            continue
        try:
            obj = json.loads(raw)
        except ValueError:
            report.dropped_invalid += 1
            continue
        objs.append(obj if isinstance(obj, dict) else None)
        raws.append(raw)
    drop = set() if keep_dangling else _dangling_tail(objs)
    report.dropped_dangling = len(drop)
    out: list[str] = []
    for i, (obj, raw) in enumerate(zip(objs, raws, strict=True)):
        if i in drop:
            continue
        if obj is not None and ("sessionId" in obj or (cwd and "cwd" in obj)):
            if "sessionId" in obj:
                obj["sessionId"] = new_id
            if cwd and "cwd" in obj:
                obj["cwd"] = cwd
            out.append(json.dumps(obj, ensure_ascii=False, separators=(",", ":")))
        else:
            out.append(raw or "")
    report.lines = len(out)
    return out, report


def write_forked_session(
    entries: list[dict[str, Any]],
    cwd: str,
    *,
    session_id: str | None = None,
    rewrite_cwd: bool = False,
    keep_dangling: bool = False,
) -> ForkReport:
    """Write a forked transcript where ``claude --resume <id>`` run in ``cwd`` finds it."""
    if session_id is not None and not re.fullmatch(r"[0-9a-fA-F-]{8,64}", session_id):
        raise ValueError(f"session id {session_id!r} must be a UUID")
    lines, report = fork_lines(entries, session_id, cwd if rewrite_cwd else None, keep_dangling)
    if not lines:
        raise ValueError("the snapshot's transcript has no valid lines to fork")
    folder = claude_config_dir() / "projects" / encode_project_dir(cwd)
    folder.mkdir(parents=True, exist_ok=True)
    dest = folder / f"{report.session_id}.jsonl"
    if dest.exists():
        raise FileExistsError(f"{dest} already exists; choose another session id")
    tmp = dest.with_suffix(".jsonl.tmp")
    tmp.write_text("".join(line + "\n" for line in lines), encoding="utf-8", errors="surrogateescape")
    os.replace(tmp, dest)
    report.path = str(dest)
    report.cwd = cwd
    return report
