"""This adapter's plugin is loaded by every process that uses agentsnap (entry-point discovery): with it installed,
`agentsnap snapshot` took ~4.9 s here, ~2.6 s of it importing CrewAI at the plugin's load. No CrewAI object can
exist in a process that never imported crewai, so nothing of it is imported until one does."""

from __future__ import annotations

from pathlib import Path

from agentsnap_core.testing.pluginload import modules_imported_by_cli


def test_cli_commands_with_the_plugin_loaded_import_no_crewai(tmp_path: Path) -> None:
    heavy = ["crewai", "pydantic", "numpy", "lancedb", "litellm"]
    assert modules_imported_by_cli("agentsnap_crewai.plugin", heavy, tmp_path / "work") == []


def test_the_package_names_still_import_on_first_use() -> None:
    import agentsnap_crewai

    assert agentsnap_crewai.AgentsnapStorage.__module__ == "agentsnap_crewai.storage"
    from agentsnap_crewai import AgentsnapCheckpointProvider, merge_memory

    assert callable(merge_memory) and AgentsnapCheckpointProvider.__module__ == "agentsnap_crewai.checkpoint"
