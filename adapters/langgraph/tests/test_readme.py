"""The README's offline example runs as written, and the CLI line it shows works."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).parents[1] / "README.md"


def test_readme_example_runs(tmp_path: Path) -> None:
    code = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)[0]
    env = {k: v for k, v in os.environ.items() if k != "AGENTSNAP_DIR"}
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    assert lines[0] == str(
        ["Capital of France?", "Paris.", "And Switzerland?", "Bern.", "And Italy?", "Rome."]
    ), proc.stdout
    log = subprocess.run(
        [sys.executable, "-m", "agentsnap_core", "log", "langgraph/trip"], cwd=tmp_path, capture_output=True, text=True, env=env
    )
    assert log.returncode == 0, log.stderr
    assert lines[1][:12] in log.stdout.splitlines()[0]
    assert "langgraph trip step 1 (loop)" in log.stdout
