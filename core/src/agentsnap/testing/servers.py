"""Helpers for tests that need a framework or a server.

Outside CI a missing dependency skips with a reason; under ``CI=true`` it fails, so a green
CI run means the tests really ran.
"""

from __future__ import annotations

import importlib
import os
import socket
from types import ModuleType

import pytest


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def need(condition: bool, reason: str) -> None:
    """Skip (or fail under CI=true) unless ``condition`` holds."""
    if not condition:
        if in_ci():
            pytest.fail(f"required for this test under CI=true: {reason}", pytrace=False)
        pytest.skip(reason)


def need_module(name: str) -> ModuleType:
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        need(False, f"module {name} is not installed ({exc})")
        raise  # unreachable


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return int(port)
