"""Check that an adapter's plugin stays light to load (docs/CONFORMANCE.md).

Entry-point discovery imports every installed adapter's plugin module - and so its package - in every process that
uses agentsnap, each CLI command included. A plugin that imports its framework at load makes ``agentsnap snapshot``
pay for it (CrewAI took ~2.6 s of imports, AutoGen ~0.13 s) although no object of that framework can exist in a
process that never imported it. :func:`modules_imported_by_cli` runs ``init``, ``snapshot`` and ``status`` in a new
process in which the plugin is loaded and reports which of the named modules that imported.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

_PROBE = """
import sys
from agentsnap_core.cli import run
for args in (['init'], ['snapshot', '-m', 's'], ['status']):
    try:
        run(args, resident=False)
    except SystemExit as exc:
        assert not exc.code, (args, exc.code)
from agentsnap_core import plugins
loaded = {getattr(p, '__name__', None) for p in plugins.get_plugin_manager().get_plugins()}
assert sys.argv[1] in loaded, ('plugin not loaded', sys.argv[1], sorted(str(x) for x in loaded))
print('IMPORTED', ' '.join(m for m in sys.argv[2:] if m in sys.modules))
"""


def modules_imported_by_cli(plugin: str, modules: Sequence[str], work: Path) -> list[str]:
    """Which of ``modules`` a CLI session (``init``, ``snapshot``, ``status`` in ``work``, a new process) imported,
    with the plugin module ``plugin`` (e.g. ``agentsnap_crewai.plugin``) loaded; raises if the plugin was not."""
    work.mkdir(parents=True, exist_ok=True)
    (work / "file.txt").write_text("a file to snapshot\n")
    proc = subprocess.run([sys.executable, "-c", _PROBE, plugin, *modules], cwd=work, capture_output=True, text=True,
                          timeout=600)
    if proc.returncode != 0:
        raise AssertionError(f"the CLI probe failed:\n{proc.stdout}\n{proc.stderr}")
    return proc.stdout.rpartition("IMPORTED")[2].split()
