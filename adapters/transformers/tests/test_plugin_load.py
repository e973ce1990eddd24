"""This adapter's plugin is loaded by every process that uses agentsnap (entry-point discovery): a CLI command in
an environment with it installed must not pay for torch, transformers or the KV worker threads' imports."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

PROBE = (
    "import sys\n"
    "from agentsnap_core.cli import run\n"
    "for args in (['init'], ['snapshot', '-m', 's'], ['status']):\n"
    "    try:\n"
    "        run(args, resident=False)\n"
    "    except SystemExit as exc:\n"
    "        assert not exc.code, (args, exc.code)\n"
    "from agentsnap_core import plugins\n"
    "names = [p.__name__ for p in plugins.get_plugin_manager().get_plugins() if hasattr(p, '__name__')]\n"
    "assert 'agentsnap_transformers.plugin' in names, names\n"
    "print('LOADED', ' '.join(m for m in ('torch', 'transformers', 'concurrent.futures', 'logging') if m in sys.modules))\n"
)


def test_cli_commands_with_the_plugin_loaded_import_no_heavy_module(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("a")
    proc = subprocess.run([sys.executable, "-c", PROBE], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.rpartition("LOADED")[2].split() == []
