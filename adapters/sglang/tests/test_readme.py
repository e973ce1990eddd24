"""The README's example runs word for word with SGLang's real cache classes on CPU.

One line is put in front of it: `import sglang_cpu`, this suite's shim that replaces two image-preprocessing modules
needing torchvision (absent from this CPU test environment, present on a real SGLang server) by placeholders; every
KV class the example uses is SGLang's own (see tests/sglang_cpu.py).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).parents[1] / "README.md"


def test_readme_example_captures_and_restores(tmp_path: Path) -> None:
    code = re.findall(r"^```python\n(.*?)^```", README.read_text(), re.S | re.M)[0]
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTSNAP_")}
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).parent), env.get("PYTHONPATH", "")])
    probe = "\nprint(snap.id, repo.get(snap.id).layers.get('cache') is not None)\n"
    proc = subprocess.run([sys.executable, "-c", "import sglang_cpu\n" + code + probe], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    snap_id, has_cache = proc.stdout.split()[-2:]
    assert len(snap_id) == 64 and has_cache == "True"
    assert (tmp_path / "sg-demo" / ".agentsnap").is_dir()
