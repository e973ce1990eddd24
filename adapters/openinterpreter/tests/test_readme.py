"""The README's example runs offline as written."""

from __future__ import annotations

import re
from pathlib import Path

from agentsnap_core.testing.readme import code_blocks

README = Path(__file__).parents[1] / "README.md"


def test_readme_example_runs_offline(tmp_path, monkeypatch, capsys):
    code = code_blocks(README)[0]
    monkeypatch.chdir(tmp_path)  # the example chdirs into its own temporary directory; this puts the cwd back
    exec(compile(code, str(README), "exec"), {"__name__": "readme"})
    out = capsys.readouterr().out
    assert "variables back: answer" in out
    assert "'content': '42\\n'" in out
    assert "[] ['answer']" in out  # the restore into a new interpreter: nothing missing, `answer` back
    sample = re.findall(r"^```\n(restored .*?)^```$", README.read_text(), flags=re.S | re.M)[0]
    shown = [line for line in sample.splitlines() if line.startswith("    [")]
    assert shown and all(line in out for line in shown)  # the README shows what the example prints
