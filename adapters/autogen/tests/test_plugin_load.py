"""This adapter's plugin is loaded by every process that uses agentsnap (entry-point discovery): with it installed,
every `agentsnap snapshot` imported AutoGen (~0.13 s of imports, ~0.4 s a snapshot here). No AutoGen team or agent
can exist in a process that never imported autogen_agentchat, so nothing of it is imported until one does."""

from __future__ import annotations

from pathlib import Path

from agentsnap_core.testing.pluginload import modules_imported_by_cli


def test_cli_commands_with_the_plugin_loaded_import_no_autogen(tmp_path: Path) -> None:
    heavy = ["autogen_agentchat", "autogen_core", "pydantic", "asyncio"]
    assert modules_imported_by_cli("agentsnap_autogen.plugin", heavy, tmp_path / "work") == []


def test_the_package_names_still_import_on_first_use() -> None:
    import agentsnap_autogen

    assert agentsnap_autogen.TurnSnapshots.__module__ == "agentsnap_autogen._turns"
    from agentsnap_autogen import run_sync, snapshot

    assert callable(run_sync) and snapshot.__module__ == "agentsnap_autogen._team"
