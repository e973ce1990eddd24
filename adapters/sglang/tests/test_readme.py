"""The README's example runs word for word with SGLang's real cache classes on CPU.

One line is put in front of it: `import sglang_cpu`, this suite's shim that replaces two image-preprocessing modules
needing torchvision (absent from this CPU test environment, present on a real SGLang server) by placeholders; every
KV class the example uses is SGLang's own (see tests/sglang_cpu.py).
"""

from __future__ import annotations

import os
from pathlib import Path

from agentsnap_core.testing.readme import code_blocks, run_python

README = Path(__file__).parents[1] / "README.md"


def test_readme_example_captures_and_restores(tmp_path: Path) -> None:
    code = code_blocks(README)[0]
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTSNAP_")}
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).parent), env.get("PYTHONPATH", "")])
    probe = "\nprint(snap.id, repo.get(snap.id).layers.get('cache') is not None)\n"
    proc = run_python("import sglang_cpu\n" + code + probe, tmp_path, env=env, timeout=600)
    snap_id, has_cache = proc.stdout.split()[-2:]
    assert len(snap_id) == 64 and has_cache == "True"
    assert (tmp_path / "sg-demo" / ".agentsnap").is_dir()
