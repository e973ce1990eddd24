"""This adapter's plugin is loaded by every process that uses agentsnap (entry-point discovery): with it installed,
every `agentsnap snapshot` imported LangGraph and LangChain through the package's PFSaver (~0.4 s of imports here,
without bytecode). Nothing of them is imported until PFSaver (or another name that needs them) is used."""

from __future__ import annotations

from pathlib import Path

from agentsnap_core.testing.pluginload import modules_imported_by_cli


def test_cli_commands_with_the_plugin_loaded_import_no_langgraph(tmp_path: Path) -> None:
    heavy = ["langgraph", "langchain_core", "pydantic"]
    assert modules_imported_by_cli("agentsnap_langgraph.plugin", heavy, tmp_path / "work") == []


def test_the_package_names_still_import_on_first_use() -> None:
    import agentsnap_langgraph

    assert agentsnap_langgraph.PFSaver.__module__ == "agentsnap_langgraph.saver"
    from agentsnap_langgraph import guard_tools, thread_ref

    assert callable(guard_tools) and callable(thread_ref)
