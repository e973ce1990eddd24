"""This adapter's plugin is loaded by every process that uses agentsnap (entry-point discovery): a CLI command in
an environment with it installed must not pay for torch, transformers or the KV worker threads' imports."""

from __future__ import annotations

from pathlib import Path

from agentsnap_core.testing.pluginload import modules_imported_by_cli


def test_cli_commands_with_the_plugin_loaded_import_no_heavy_module(tmp_path: Path) -> None:
    heavy = ["torch", "transformers", "concurrent.futures", "logging"]
    assert modules_imported_by_cli("agentsnap_transformers.plugin", heavy, tmp_path / "work") == []
