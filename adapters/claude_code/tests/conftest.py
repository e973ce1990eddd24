"""Fixtures: HOME in a tmp dir, a project with tracked and untracked files, a realistic session transcript."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from agentsnap_claude_code.transcript import encode_project_dir

FIXTURES = Path(__file__).parent / "fixtures"
SESSION = "7d1f3e2a-5b6c-4d8e-9f01-23456789abcd"


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test gets its own HOME; nothing outside tmp is read or written."""
    h = tmp_path / "home"
    h.mkdir()
    monkeypatch.setenv("HOME", str(h))
    for var in ("CLAUDE_CONFIG_DIR", "CLAUDE_PROJECT_DIR", "AGENTSNAP_DIR", "AGENTSNAP_HOOK_DAEMON", "XDG_RUNTIME_DIR"):
        monkeypatch.delenv(var, raising=False)
    return h


@pytest.fixture(autouse=True)
def helper_run_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> Iterator[Path]:
    """The warm helper process (agentsnap_claude_code.daemon): off, except in the tests marked ``helper``.

    Where it is on, the helper a test's hooks start lives in the test's own socket folder and ends with the test.
    """
    run = tmp_path / "run"
    monkeypatch.setenv("AGENTSNAP_HOOK_RUN_DIR", str(run))
    monkeypatch.setenv("AGENTSNAP_HOOK_IDLE", "120")
    if request.node.get_closest_marker("helper") is None:
        monkeypatch.setenv("AGENTSNAP_HOOK_DAEMON", "0")
    yield run
    stop_helpers(run)


def stop_helpers(run: Path) -> None:
    """End the helpers this test's hooks started: the processes whose AGENTSNAP_HOOK_RUN_DIR is ``run``.

    A hook starts its helper before it exits, so by the end of the test the process exists (perhaps still starting).
    """
    import os
    import signal
    import time

    mark = f"AGENTSNAP_HOOK_RUN_DIR={run}".encode()
    pids = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if b"agentsnap_claude_code" in (d / "cmdline").read_bytes() and mark in (d / "environ").read_bytes().split(b"\0"):
                    pids.append(int(d.name))
            except OSError:
                continue
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            continue
        for _ in range(100):
            if not alive(pid):
                break
            time.sleep(0.05)


def alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie nobody reaps yet counts as gone)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A git project: src/app.py committed, src/untracked.txt and notes/ not tracked by git."""
    root = tmp_path / "work" / "my_project.v2"
    (root / "src" / "pkg").mkdir(parents=True)
    (root / "src" / "app.py").write_text("print('hello')\n")
    (root / "src" / "pkg" / "__init__.py").write_text("VERSION = 1\n")
    (root / "README.md").write_text("# demo\n")
    if shutil.which("git"):
        git = ["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@example.com"]
        subprocess.run([*git, "init", "-q"], check=True)
        subprocess.run([*git, "add", "."], check=True)
        subprocess.run([*git, "commit", "-qm", "init"], check=True)
    (root / "src" / "untracked.txt").write_text("scratch notes, never committed\n")
    (root / "src" / "run.sh").write_text("#!/bin/sh\necho run\n")
    (root / "src" / "run.sh").chmod(0o755)
    return root


def write_transcript(home: Path, cwd: Path, session: str = SESSION, text: str | None = None) -> Path:
    raw = text if text is not None else (FIXTURES / "session.jsonl").read_text()
    raw = raw.replace("__CWD__", str(cwd)).replace("__SESSION__", session)
    folder = home / ".claude" / "projects" / encode_project_dir(cwd)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{session}.jsonl"
    path.write_text(raw)
    return path


@pytest.fixture
def transcript(home: Path, project: Path) -> Path:
    return write_transcript(home, project)


def payload(project: Path, transcript: Path | None, event: str, **extra: Any) -> str:
    data: dict[str, Any] = {
        "session_id": SESSION,
        "transcript_path": str(transcript) if transcript else "",
        "cwd": str(project),
        "permission_mode": "default",
        "hook_event_name": event,
        **extra,
    }
    return json.dumps(data)


def hook_command(event: str) -> str:
    """The exact command line the plugin's hooks.json gives Claude Code for ``event``."""
    from agentsnap_claude_code.install import plugin_root

    hooks = json.loads((plugin_root() / "hooks" / "hooks.json").read_text())["hooks"]
    return hooks[event][0]["hooks"][0]["command"]


def helper_env(**extra: str) -> dict[str, str]:
    """The environment of a hook after `pip install agentsnap-claude-code`: the helper on PATH (the native hook
    client first, where a test asked for it: ``native_hook_bin``)."""
    import os
    import sys

    from agentsnap_claude_code.install import plugin_root

    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    if os.environ.get("AGENTSNAP_TEST_HOOK_BIN"):
        path = f"{os.environ['AGENTSNAP_TEST_HOOK_BIN']}{os.pathsep}{path}"
    return {**os.environ, "PATH": path, "CLAUDE_PLUGIN_ROOT": str(plugin_root()), **extra}


def run_plugin_hook(project: Path, transcript: Path | None, event: str, env: dict[str, str] | None = None, **extra: Any) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    """Run the plugin's hook as Claude Code does (its command line, JSON on stdin); return the process and its JSON."""
    proc = subprocess.run(
        hook_command(event), shell=True, input=payload(project, transcript, event, **extra), capture_output=True, text=True,
        env=env or helper_env(), cwd=project if project.is_dir() else None, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    return proc, (json.loads(proc.stdout) if proc.stdout.strip() else {})


@pytest.fixture(scope="session")
def native_hook_bin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding the native hook client (``agentsnap-claude-code install-client --at`` a copy of the
    script); a test puts it first on the hook's PATH with ``AGENTSNAP_TEST_HOOK_BIN``."""
    import os
    import sys

    if not shutil.which(os.environ.get("CC") or "cc") and os.environ.get("CI") != "true":
        pytest.skip("no C compiler (cc) to build the native hook client (under CI=true this fails instead)")
    d = tmp_path_factory.mktemp("native-hook")
    script = d / "agentsnap-claude-code-hook"
    shutil.copy2(Path(sys.executable).with_name("agentsnap-claude-code-hook"), script)
    proc = subprocess.run([str(Path(sys.executable).with_name("agentsnap-claude-code")), "install-client", "--at",
                           str(script)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert script.read_bytes()[:4] == b"\x7fELF"
    return d


def tree(root: Path) -> dict[str, bytes]:
    """Every file under root (ignored ones and .git included, the store link excluded) with its bytes."""
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file() and p.name != ".agentsnap"}


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "helper: the plugin's warm helper process is on (as for a user), not off as in the other tests")
