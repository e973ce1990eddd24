"""The 12-way fork-and-merge demo (examples/fanout_merge_demo.py) runs offline and brings every attempt back."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

DEMO = Path(__file__).resolve().parents[2] / "examples" / "fanout_merge_demo.py"


def test_fanout_merge_demo_merges_all_twelve_attempts() -> None:
    proc = subprocess.run([sys.executable, str(DEMO)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout
    assert "$ agentsnap merge attempt-12   # exit 1" in out and "CONFLICT (content) world: report.md" in out
    assert "$ agentsnap merge --abort   # exit 0" in out
    for row in ("| attempts merged | 12/12 |", "| report lines filled | 12/12 |", "| state keys merged | 12 |",
                "| HEAD parents | 2 |", "| verify | ok |"):
        assert row in out
    assert out.rstrip().endswith("all 12 attempts merged back")
