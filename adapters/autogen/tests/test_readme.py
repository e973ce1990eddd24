"""The README's offline example runs as written."""

from __future__ import annotations

from pathlib import Path

from agentsnap_core.testing.readme import code_blocks, run_python

README = Path(__file__).parents[1] / "README.md"


def test_readme_example_runs_offline(tmp_path):
    proc = run_python(code_blocks(README)[0], tmp_path)
    assert "[('bob', 'b1'), ('alice', 'a2'), ('bob', 'b2')]" in proc.stdout
