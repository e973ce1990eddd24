"""The README's example runs word for word on a real vLLM CPU engine (two engines, one after the other).

The one input it asks of the reader, a local model directory (`MODEL`), is this suite's tiny random Llama
(`tinyllama.build`), passed through the environment variable the example reads.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from agentsnap_core.testing.servers import need_module

README = Path(__file__).parents[1] / "README.md"


def test_readme_example_loads_the_prompt_from_the_snapshot(tmp_path: Path) -> None:
    need_module("vllm")
    import tinyllama

    code = re.findall(r"^```python\n(.*?)^```", README.read_text(), re.S | re.M)[0]
    model = tinyllama.build(tmp_path / "model")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTSNAP_")}
    env["MODEL"] = str(model)
    work = tmp_path / "work"
    work.mkdir()
    proc = subprocess.run([sys.executable, "-c", code], cwd=work, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    cached = int(proc.stdout.strip().splitlines()[-1])
    if cached <= 0:
        pytest.fail(f"the example's promise failed: num_cached_tokens = {cached}\n{proc.stderr[-2000:]}")
