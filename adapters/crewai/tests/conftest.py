"""Test setup: CrewAI offline (telemetry, tracing and version checks off), imported once per session."""

from __future__ import annotations

import os

os.environ.setdefault("CREWAI_DISABLE_TELEMETRY", "true")
os.environ.setdefault("OTEL_SDK_DISABLED", "true")
os.environ.setdefault("CREWAI_DISABLE_VERSION_CHECK", "true")
os.environ.setdefault("CREWAI_TRACING_ENABLED", "false")
os.environ.setdefault("CREWAI_STORAGE_DIR", os.path.join(os.environ.get("TMPDIR", "/tmp"), "agentsnap-crewai-tests"))
