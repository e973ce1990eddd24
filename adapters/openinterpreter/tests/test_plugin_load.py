"""This adapter's plugin is loaded by every process that uses agentsnap (entry-point discovery): a CLI command in
an environment with it installed must not import Open Interpreter (docs/CONFORMANCE.md; the CrewAI adapter's took ~4.9 s)."""

from __future__ import annotations

from pathlib import Path

from agentsnap_core.testing.pluginload import modules_imported_by_cli


def test_cli_commands_with_the_plugin_loaded_import_no_framework(tmp_path: Path) -> None:
    assert modules_imported_by_cli("agentsnap_openinterpreter.plugin", ["interpreter", "litellm", "openai", "pydantic"], tmp_path / "work") == []
