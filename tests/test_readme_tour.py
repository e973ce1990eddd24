"""The top-level README's tour and Python example run as written, line by line, with what they promise checked.

Three lines are not run here, and each is run elsewhere: `pip install ./core` (this session installed it; `nox -s
dist` runs it in a clean venv), `agentsnap ui` (a server until Ctrl-C: `core/tests/test_ui.py` starts it), and the
two top commands (`sh tools/nox ...`: `.ci/run` is the second; `test_tools_nox_*` below run the bootstrap itself).
The tour's `/tmp/team-store` is moved under the test's own temp dir so that parallel runs cannot meet.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
NOT_RUN_HERE = ("pip install ", "agentsnap ui")


def tour_lines() -> list[str]:
    block = re.search(r"## The 60-second tour\n\n```bash\n(.*?)```", README.read_text(), re.S).group(1)
    return [line.split("  #")[0].strip() for line in block.splitlines() if line.strip()]


def test_tour_runs_word_for_word(tmp_path: Path) -> None:
    work = tmp_path / "my-agent-workdir"
    (work / "src").mkdir(parents=True)
    (work / "src" / "app.py").write_text("def add(a, b): return a - b\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTSNAP_")}
    env["PATH"] = f"{Path(sys.executable).parent}:{env['PATH']}"
    cwd = tmp_path
    ran = []
    for line in tour_lines():
        if line.startswith(NOT_RUN_HERE):
            continue
        line = line.replace("/tmp/team-store", str(tmp_path / "team-store"))
        if line.startswith("cd "):
            cwd = (cwd / line[3:]).resolve()
            continue
        proc = subprocess.run(["bash", "-c", line], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, f"`{line}` exited {proc.returncode}: {proc.stderr[-800:]}"
        assert "Traceback" not in proc.stderr, line
        ran.append((line, proc.stdout))
    out = dict(ran)
    assert len(ran) >= 15, [r[0] for r in ran]
    # what the comments promise
    assert "src/app.py" in out["agentsnap status"] and "notes.txt" in out["agentsnap status"]
    assert "def add" in out["agentsnap diff"]
    assert (work / "src" / "app.py").exists() and not (work / "notes.txt").exists()  # restore HEAD
    assert (work / "src" / "app.py").read_text() == "def add(a, b): return a + b\n"  # merged from attempt-2
    assert all((tmp_path / "tries" / f"attempt-{i}" / "src" / "app.py").exists() for i in (1, 2, 3))
    assert (tmp_path / "copy" / "src" / "app.py").read_text() == "def add(a, b): return a + b\n"  # cloned
    assert "fix add" in out["agentsnap log --all --graph"]


def test_python_example_runs(tmp_path: Path) -> None:
    code = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)[0]
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTSNAP_")}
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "['attempt-1', 'attempt-2', 'attempt-3']" in proc.stdout


def test_readme_top_commands_use_the_bootstrap() -> None:
    first = README.read_text().split("```bash\n", 1)[1].split("```", 1)[0].splitlines()
    assert [line.split("#")[0].strip() for line in first] == ["sh tools/nox -s demo", "sh tools/nox"]
    assert "sh tools/nox" in (ROOT / ".ci" / "run").read_text()  # CI runs the README's test command


DEBIAN_PYTHON = Path("/usr/bin/python3")


def _is_externally_managed(py: Path) -> bool:
    probe = "import sysconfig, os; print(os.path.exists(os.path.join(sysconfig.get_path('stdlib'), 'EXTERNALLY-MANAGED')))"
    return py.exists() and subprocess.run([str(py), "-c", probe], capture_output=True, text=True).stdout.strip() == "True"


def test_tools_nox_works_on_an_externally_managed_system_python(tmp_path: Path) -> None:
    """On a PEP 668 Python (Debian 12's /usr/bin/python3 here) `pip install uv nox` is refused; tools/nox works."""
    if not _is_externally_managed(DEBIAN_PYTHON):
        if os.environ.get("CI") == "true":
            pytest.fail("no externally managed system python3 at /usr/bin/python3 (Debian's python3 + python3-pip)")
        pytest.skip("no externally managed system python3")
    refused = subprocess.run([str(DEBIAN_PYTHON), "-m", "pip", "install", "--dry-run", "nox"], capture_output=True, text=True)
    assert refused.returncode != 0 and "externally-managed-environment" in refused.stderr
    env = {**os.environ, "PYTHON": str(DEBIAN_PYTHON), "AGENTSNAP_NOX_VENV": str(tmp_path / "venv")}
    proc = subprocess.run(["sh", str(ROOT / "tools" / "nox"), "-l"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "dist" in proc.stdout and "core" in proc.stdout
    assert (tmp_path / "venv" / "bin" / "uv").exists()


def test_tools_nox_says_what_to_do_without_python(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHON": "no-such-python3", "AGENTSNAP_NOX_VENV": str(tmp_path / "venv")}
    proc = subprocess.run(["sh", str(ROOT / "tools" / "nox"), "-l"], env=env, capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "install Python" in proc.stderr
    assert not (tmp_path / "venv").exists()
