"""Test setup: CrewAI offline (telemetry, tracing and version checks off), imported once per session."""

from __future__ import annotations

import os
import shutil
import tempfile

os.environ.setdefault("CREWAI_DISABLE_TELEMETRY", "true")
os.environ.setdefault("OTEL_SDK_DISABLED", "true")
os.environ.setdefault("CREWAI_DISABLE_VERSION_CHECK", "true")
os.environ.setdefault("CREWAI_TRACING_ENABLED", "false")

#: one scratch directory per pytest run for CrewAI's default storage and the conformance kit's stores, removed when
#: the run ends (child processes of the tests inherit it through the environment and leave the removal to the parent)
_OWN_TMP: str | None = None
if "CREWAI_STORAGE_DIR" not in os.environ:
    _OWN_TMP = tempfile.mkdtemp(prefix="agentsnap-crewai-tests-")
    os.environ["CREWAI_STORAGE_DIR"] = _OWN_TMP


def pytest_unconfigure(config: object) -> None:
    if _OWN_TMP is not None:
        shutil.rmtree(_OWN_TMP, ignore_errors=True)
