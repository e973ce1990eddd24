"""Condense a full `sh tools/nox` log into what a reader of CI's output needs, ending with what failed.

`.ci/run` keeps the whole log in `.ci/last-run.log` and prints only this report (plus the one-line session
results as they happen): CI services often keep just a window of a long output, and ours is ~120 KB, so the
end, where the failures are named, was never seen. The report is capped (``--max-bytes``) so that all of it
fits in such a window: for each failed session the tail of its output (without PASSED lines), then every
FAILED/ERROR/timeout line of every session, the session results, and the exit status last.

Usage: python3 tools/ci_report.py LOG EXIT_STATUS [--max-bytes N]
"""

from __future__ import annotations

import re
import sys

SESSION_START = re.compile(r"^nox > Running session (?P<name>.+)$")
SESSION_END = re.compile(
    r"^nox > Session (?P<name>.+?) (?P<result>was successful|failed|was skipped|aborted)\b(?P<rest>.*)$"
)
FAILURE_LINE = re.compile(r"^(FAILED|ERROR) |Timeout|exit code (124|137|-15|-9)\b")
COUNTS_LINE = re.compile(r"^=+ .*\b(passed|failed|error|errors|skipped|no tests ran)\b.* in [0-9.]+s")


def _sessions(lines: list[str]) -> list[tuple[str, str, list[str]]]:
    """(name, result, lines) per session, in the order they ran; an unfinished session has result 'unfinished'."""
    out: list[tuple[str, str, list[str]]] = []
    name, body = None, []  # type: tuple[str | None, list[str]]
    for line in lines:
        start = SESSION_START.match(line)
        if start:
            if name is not None:
                out.append((name, "unfinished", body))
            name, body = start.group("name"), []
            continue
        end = SESSION_END.match(line)
        if end and name is not None and end.group("name") == name:
            out.append((name, end.group("result") + end.group("rest"), body))
            name, body = None, []
            continue
        if name is not None:
            body.append(line)
    if name is not None:
        out.append((name, "unfinished", body))
    return out


def report(text: str, status: str, max_bytes: int = 10_000) -> str:
    lines = text.splitlines()
    sessions = _sessions(lines)
    bad = [(n, r, b) for n, r, b in sessions if not (r.startswith("was successful") or r.startswith("was skipped"))]
    summary = ["--- failed or errored tests (every session):"]
    failures = list(dict.fromkeys(line for line in lines if FAILURE_LINE.search(line)))
    if len(failures) > 60:
        failures = failures[:60] + [f"... and {len(failures) - 60} more lines like these in the full log"]
    summary += failures or ["(none)"]
    summary.append("--- nox sessions:")
    for name, result, body in sessions:
        counts = [line.strip("= ") for line in body if COUNTS_LINE.match(line)]
        summary.append(f"{name}: {result}" + (f" ({'; '.join(counts)})" if counts else ""))
    if not sessions:
        summary.append("(no session ran; the start of the log:)")
        summary += lines[:40]
    summary.append(f"--- .ci/run exit status: {status}")
    tail_text = "\n".join(summary)
    room = max(max_bytes - len(tail_text.encode()), 0)
    details: list[str] = []
    if bad and room:
        share = room // len(bad)
        for name, result, body in bad:
            kept = [line for line in body if not line.startswith("PASSED ")]
            block: list[str] = []
            size = 0
            for line in reversed(kept):  # the end of a session's output says why it failed
                size += len(line.encode()) + 1
                if size > share - 200:
                    break
                block.append(line)
            details.append(f"--- the end of session {name} ({result}), {len(block)} of {len(kept)} lines:")
            details += reversed(block)
    return "\n".join(details + [tail_text]) + "\n"


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    max_bytes = 10_000
    if "--max-bytes" in argv:
        max_bytes = int(argv[argv.index("--max-bytes") + 1])
    try:
        with open(argv[0], encoding="utf-8", errors="replace") as fh:
            text = fh.read()
    except OSError as exc:
        print(f"ci_report: cannot read the log {argv[0]}: {exc}")
        return 0
    sys.stdout.write(report(text, argv[1], max_bytes))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
