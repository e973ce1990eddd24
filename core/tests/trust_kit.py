"""Shared by the test_trust_*.py files: the real CLI in a subprocess, and a fresh working tree with a store."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def cli(root: Path, *args: str) -> tuple[int, str, str]:
    """Run ``python -m agentsnap_core ARGS`` in ``root`` (what a user sees): ``(exit status, stdout, stderr)``."""
    proc = subprocess.run(
        [sys.executable, "-m", "agentsnap_core", *args], cwd=root, capture_output=True, text=True, timeout=300
    )
    return proc.returncode, proc.stdout, proc.stderr


def new_work(tmp_path: Path, files: dict[str, str | bytes]) -> Path:
    """``tmp_path/work`` holding ``files``, with a store made by ``agentsnap init``."""
    root = tmp_path / "work"
    root.mkdir()
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data if isinstance(data, bytes) else data.encode())
    code, _, err = cli(root, "init")
    assert code == 0, err
    return root
