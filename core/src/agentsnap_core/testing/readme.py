"""Running a README's code blocks as a user would (each adapter's tests/test_readme.py and the docs tests use it)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path


def code_blocks(readme: str | os.PathLike[str], lang: str = "python") -> list[str]:
    """The fenced ```lang blocks of a Markdown file, in order."""
    return re.findall(rf"^```{re.escape(lang)}\n(.*?)^```", Path(readme).read_text(), re.S | re.M)


def run_python(code: str, workdir: str | os.PathLike[str], *, env: dict[str, str] | None = None,
               timeout: float = 300, name: str = "example.py") -> subprocess.CompletedProcess[str]:
    """Run ``code`` as a script in a fresh interpreter (this one's), in ``workdir``; fail with its stderr's tail."""
    script = Path(workdir) / name
    script.write_text(code)
    proc = subprocess.run([sys.executable, str(script)], cwd=workdir, env=env, capture_output=True, text=True,
                          timeout=timeout)
    assert proc.returncode == 0, f"{name} exited {proc.returncode}:\n{proc.stderr[-3000:]}"
    return proc
