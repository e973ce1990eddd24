"""The README's offline example runs as written."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).parents[1] / "README.md"


def test_readme_example_runs_offline(tmp_path):
    code = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)[0]
    script = tmp_path / "example.py"
    script.write_text(code)
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "[('bob', 'b1'), ('alice', 'a2'), ('bob', 'b2')]" in proc.stdout
