"""Coverage-guided fuzzing (atheris / libFuzzer) of the object, msgpack, chunk-list and tree decoders.

Runs in a subprocess (libFuzzer owns the process) for a bounded number of inputs; any exception that is
not an :class:`AgentSnapError` is a crash and fails the test. Skipped when atheris is not installed,
except in ``nox -s reliability`` (``AGENTSNAP_REQUIRE_ATHERIS=1``), which installs it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

RUNS = 200_000 if os.environ.get("AGENTSNAP_LONG") == "1" else 15_000

TARGET = textwrap.dedent(
    """
    import sys
    import atheris

    with atheris.instrument_imports(include=["agentsnap"]):
        from agentsnap_core.format import objects
        from agentsnap_core.layers import world
        from agentsnap_core.format.encoding import unpack
        from agentsnap_core.errors import AgentSnapError

    def one(data):
        fdp = atheris.FuzzedDataProvider(data)
        which = fdp.ConsumeIntInRange(0, 3)
        rest = fdp.ConsumeBytes(fdp.remaining_bytes())
        try:
            if which == 0:
                objects.decode(objects.digest(rest[4] if len(rest) > 4 else 1, rest[15:]), rest)
            elif which == 1:
                unpack(rest, "fuzz")
            elif which == 2:
                objects.unpack_chunk_list("0" * 64, rest)
            else:
                doc = unpack(rest, "tree")
                if isinstance(doc, dict) and isinstance(doc.get("entries"), list):
                    world.validate_entries([tuple(e) if isinstance(e, list) and len(e) == 5 else e
                                            for e in doc["entries"]])
        except AgentSnapError:
            pass

    atheris.Setup(sys.argv, one)
    atheris.Fuzz()
    """
)


def test_atheris_decoders(tmp_path: Path) -> None:
    if os.environ.get("AGENTSNAP_REQUIRE_ATHERIS") != "1":
        pytest.importorskip("atheris")
    script = tmp_path / "fuzz_target.py"
    script.write_text(TARGET)
    run = subprocess.run(
        [sys.executable, str(script), f"-runs={RUNS}", "-max_len=2048", "-seed=12", "-timeout=10"],
        capture_output=True, text=True, timeout=600, cwd=tmp_path,
    )
    tail = (run.stdout + run.stderr)[-3000:]
    assert run.returncode == 0, tail
    done = [line for line in run.stderr.splitlines() if line.startswith("Done")]
    print(f"\natheris: {done[-1] if done else tail[-200:]}")
