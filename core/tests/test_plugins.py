"""Plugin loading: entry points, the allow-list, documented hooks."""

from __future__ import annotations

import importlib.metadata
import inspect
from pathlib import Path
from typing import Any

import pytest
from agentsnap_core import Repo, hookimpl, plugins
from agentsnap_core.plugins import hookspecs
from agentsnap_core.testing import registered_plugin


def test_every_hookspec_is_documented_and_named() -> None:
    specs = [(n, f) for n, f in inspect.getmembers(hookspecs, inspect.isfunction) if n.startswith("agentsnap_")]
    assert len(specs) >= 16
    for name, fn in specs:
        assert fn.__doc__ and "eturn" in fn.__doc__, f"{name} must say what it returns"
    tests_text = "".join(p.read_text() for p in Path(__file__).parent.glob("test_*.py"))
    core_text = "".join(p.read_text() for p in (Path(hookspecs.__file__).parent).glob("*.py") if p.name != "hookspecs.py")
    untested = [n for n, _ in specs if n not in tests_text and n not in core_text]
    assert not untested, f"hooks neither used by core nor exercised in tests: {untested}"


class FakeEngine:
    def __init__(self) -> None:
        self.kv = {"pages": [1, 2, 3]}
        self.paused = 0
        self.events: list[str] = []
        self.sent: list[str] = []


class FakeEnginePlugin:
    """Exercises the cache/model hooks and a new-style wrapper around capture."""

    @hookimpl
    def agentsnap_handles(self, obj: Any) -> str | None:
        return "fake-engine" if isinstance(obj, FakeEngine) else None

    @hookimpl
    def agentsnap_capture_cache(self, obj: Any, context: dict[str, Any]) -> Any:
        if isinstance(obj, FakeEngine):
            obj.events.append(f"capture while paused={obj.paused}")
            return dict(obj.kv)
        return None

    @hookimpl
    def agentsnap_restore_cache(self, obj: Any, cache: Any, context: dict[str, Any]) -> bool | None:
        if isinstance(obj, FakeEngine):
            obj.kv = dict(cache)
            return True
        return None

    @hookimpl
    def agentsnap_capture_model(self, obj: Any, context: dict[str, Any]) -> Any:
        return {"lora": b"\x00\x01"} if isinstance(obj, FakeEngine) else None

    @hookimpl
    def agentsnap_restore_model(self, obj: Any, model: Any, context: dict[str, Any]) -> bool | None:
        return True if isinstance(obj, FakeEngine) else None

    @hookimpl
    def agentsnap_capture_effects(self, obj: Any, context: dict[str, Any]) -> Any:
        return {"sent": list(obj.sent)} if isinstance(obj, FakeEngine) else None

    @hookimpl
    def agentsnap_restore_effects(self, obj: Any, effects: Any, context: dict[str, Any]) -> bool | None:
        if isinstance(obj, FakeEngine):
            obj.sent = list(effects["sent"])
            return True
        return None

    @hookimpl(wrapper=True)
    def agentsnap_capture(self, obj: Any, context: dict[str, Any]) -> Any:
        if not isinstance(obj, FakeEngine):
            return (yield)
        obj.paused += 1
        try:
            return (yield)
        finally:
            obj.paused -= 1
            obj.events.append("resumed")


def test_wrapper_pauses_around_capture_and_layers_roundtrip(repo: Repo) -> None:
    with registered_plugin(FakeEnginePlugin()):
        eng = FakeEngine()
        eng.sent = ["email-1"]
        snap = repo.capture(eng, "engine")
        assert eng.events == ["capture while paused=1", "resumed"]
        assert set(snap.layers) >= {"cache", "model", "effects"}
        other = FakeEngine()
        other.kv = {"pages": []}
        repo.restore_into(other, snap.id)
        assert other.kv == {"pages": [1, 2, 3]} and other.sent == ["email-1"]
    from agentsnap_core.plugins import get_plugin_manager

    assert get_plugin_manager().hook.agentsnap_handles(obj=FakeEngine()) is None  # unregistered again


def test_unhandled_object_gives_clear_error(repo: Repo) -> None:
    from agentsnap_core import AgentSnapError

    with pytest.raises(AgentSnapError, match="no installed adapter handles"):
        repo.capture(object(), "nothing handles this")


class _EP:
    def __init__(self, name: str, module: Any) -> None:
        self.name, self.module = name, module

    def load(self) -> Any:
        return self.module


class PluginA:
    @hookimpl
    def agentsnap_handles(self, obj: Any) -> str | None:
        return None


def test_entry_point_discovery_and_allow_list(monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = PluginA(), PluginA()
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda group: [_EP("alpha", a), _EP("beta", b)])
    monkeypatch.setenv("AGENTSNAP_PLUGIN_CACHE", "off")  # the stand-in scan, not a cached list (test_plugin_cache.py)
    try:
        plugins.reset_plugin_manager()
        monkeypatch.delenv("AGENTSNAP_PLUGINS", raising=False)
        names = {p["name"] for p in plugins.list_plugins()}
        assert {"alpha", "beta", "agentsnap_core.plugins.defaults"} <= names
        plugins.get_plugin_manager()  # idempotent
        assert len([p for p in plugins.list_plugins() if p["name"] == "alpha"]) == 1

        plugins.reset_plugin_manager()
        monkeypatch.setenv("AGENTSNAP_PLUGINS", "beta")
        names = {p["name"] for p in plugins.list_plugins()}
        assert "beta" in names and "alpha" not in names

        plugins.reset_plugin_manager()
        monkeypatch.setenv("AGENTSNAP_PLUGINS", "none")
        assert {p["name"] for p in plugins.list_plugins()} == {"agentsnap_core.plugins.defaults"}
    finally:
        plugins.reset_plugin_manager()


def test_plugins_doc_lists_every_hook() -> None:
    """docs/PLUGINS.md names every hookspec, and names no hook that does not exist."""
    import re

    doc = (Path(__file__).parents[2] / "docs" / "PLUGINS.md").read_text()
    specs = {n for n, _ in inspect.getmembers(hookspecs, inspect.isfunction) if n.startswith("agentsnap_")}
    listed = set(re.findall(r"^\| `(agentsnap_\w+)` \|", doc, re.M))
    assert listed == specs, f"missing from docs/PLUGINS.md: {specs - listed}; not hooks: {listed - specs}"


def test_plugins_doc_lists_every_context_key() -> None:
    """docs/PLUGINS.md's context table names every HookContext key, and no key HookContext does not have."""
    import re

    doc = (Path(__file__).parents[2] / "docs" / "PLUGINS.md").read_text()
    keys = set(hookspecs.HookContext.__annotations__)
    listed = set(re.findall(r"^\| `([a-z_]+)` \| `", doc, re.M)) - {n for n in dir(hookspecs) if n.startswith("agentsnap_")}
    assert listed == keys, f"missing from docs/PLUGINS.md: {keys - listed}; not context keys: {listed - keys}"


def test_a_plugin_with_a_misspelt_hook_is_refused_by_name() -> None:
    """pluggy would never call `agentsnap_capture_stat`: loading says so instead of failing silently later."""
    import pluggy
    from agentsnap_core.errors import AgentSnapError
    from agentsnap_core.plugins import check_hooks

    class Typo:
        @hookimpl
        def agentsnap_capture_stat(self, obj: Any, context: dict[str, Any]) -> Any:
            return None

    pm = pluggy.PluginManager("agentsnap")
    pm.add_hookspecs(hookspecs)
    pm.register(Typo(), name="typo-plugin")
    with pytest.raises(AgentSnapError, match="typo-plugin.*agentsnap_capture_stat"):
        check_hooks(pm)


def test_an_allow_list_naming_no_installed_plugin_is_refused_not_ignored(monkeypatch: pytest.MonkeyPatch) -> None:
    """``AGENTSNAP_PLUGINS=langgrph`` (a typo of an installed plugin's name) loaded no adapter and said nothing:
    every snapshot then silently went without the framework's state. Now it is refused, naming what is installed."""
    from agentsnap_core.errors import AgentSnapError

    monkeypatch.setattr(importlib.metadata, "entry_points", lambda group: [_EP("alpha", PluginA())])
    monkeypatch.setenv("AGENTSNAP_PLUGIN_CACHE", "off")
    try:
        plugins.reset_plugin_manager()
        monkeypatch.setenv("AGENTSNAP_PLUGINS", "alpha,alpah")
        with pytest.raises(AgentSnapError, match=r"names 'alpah', which no installed agentsnap plugin .*installed: alpha"):
            plugins.get_plugin_manager()
        plugins.reset_plugin_manager()
        monkeypatch.setenv("AGENTSNAP_PLUGINS", "alpha, agentsnap_core.plugins.defaults")  # the built-in's name too
        assert {p["name"] for p in plugins.list_plugins()} == {"alpha", "agentsnap_core.plugins.defaults"}
    finally:
        plugins.reset_plugin_manager()
