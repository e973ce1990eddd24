"""A deliberately broken adapter: its restore reports success and does nothing.

The conformance kit must fail it; ``core/tests/test_conformance.py`` checks that it does.
"""

from __future__ import annotations

from typing import Any

from agentsnap_core.plugins import get_plugin_manager
from agentsnap_core.plugins.hookspecs import HookContext, hookimpl
from agentsnap_core.testing import AdapterCase


class ForgetfulAgent:
    def __init__(self) -> None:
        self.value = 0

    def step(self, i: int) -> None:
        self.value += 10 + i


class BrokenPlugin:
    @hookimpl
    def agentsnap_handles(self, obj: Any) -> str | None:
        return "broken" if isinstance(obj, ForgetfulAgent) else None

    @hookimpl
    def agentsnap_capture_state(self, obj: Any, context: HookContext) -> Any:
        return {"value": obj.value} if isinstance(obj, ForgetfulAgent) else None

    @hookimpl
    def agentsnap_restore_state(self, obj: Any, state: Any, context: HookContext) -> bool | None:
        return True if isinstance(obj, ForgetfulAgent) else None  # the bug: claims success, restores nothing


PLUGIN = BrokenPlugin()


def case() -> AdapterCase:
    pm = get_plugin_manager()
    if not pm.is_registered(PLUGIN):
        pm.register(PLUGIN, name="agentsnap_core.testing.broken")
    return AdapterCase(
        name="broken ForgetfulAgent",
        make=ForgetfulAgent,
        step=lambda a, i: a.step(i),
        observe=lambda a: {"value": a.value},
        factory="agentsnap_core.testing.broken:case",
    )
