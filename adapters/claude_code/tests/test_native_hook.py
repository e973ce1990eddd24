"""The native hook client (``agentsnap-claude-code install-client``; issue 20, item 5: a snapshotting call at git's
cost). test_helper.py runs every helper scenario through it as well (its ``client`` fixture: stale, hung, killed,
forged or untrusted helpers); here: the hook command ``install`` writes finds it too, and installing and removing
it never leaves anything but a working hook."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import helper_env, run_plugin_hook
from test_helper import _head, _rm, _snap_id, _wait_for_helper
from test_quick import _imports

HOOK_CLI = Path(sys.executable).with_name("agentsnap-claude-code")


@pytest.mark.helper
def test_the_hook_command_install_writes_uses_a_native_client_beside_the_helpers_python(
    project: Path, transcript: Path, helper_run_dir: Path, native_hook_bin: Path, tmp_path: Path
) -> None:
    pybin = tmp_path / "pybin"
    pybin.mkdir()
    (pybin / "python").symlink_to(sys.executable)
    env = helper_env(AGENTSNAP_HOOK_HELPER=f"{pybin / 'python'} -m agentsnap_claude_code.gate", PYTHONPROFILEIMPORTTIME="1")
    # no native client beside that Python: its quick script answers (a Python ran)
    proc, out = run_plugin_hook(project, transcript, "PreToolUse", env=env, tool_name="Bash", tool_input={"command": "ls -la"})
    assert out == {} and _imports(proc.stderr)
    shutil.copy2(native_hook_bin / "agentsnap-claude-code-hook", pybin / "agentsnap-claude-code-hook")
    # no helper yet: the native client gives the call to Python (which snapshots, and starts a helper)
    proc, out = run_plugin_hook(project, transcript, "PreToolUse", env=env, **_rm(1))
    assert "agentsnap_core" in {m.split(".")[0] for m in _imports(proc.stderr)} and "undo with" in out["systemMessage"]
    _wait_for_helper(helper_run_dir)
    (project / "src" / "app.py").write_text("print('changed')\n")
    proc, out = run_plugin_hook(project, transcript, "PreToolUse", env=env, **_rm(2))
    assert not _imports(proc.stderr)  # the native client handed it to the helper: no Python started
    snap = _snap_id(out)
    assert _head(project)[0].startswith(snap)
    shutil.rmtree(project / "src")
    restored = subprocess.run([str(HOOK_CLI), "restore", snap, "-C", str(project)], capture_output=True, text=True,
                              env=helper_env())
    assert restored.returncode == 0, restored.stderr
    assert (project / "src" / "app.py").read_text() == "print('changed')\n"


def test_install_client_refuses_another_file_and_remove_puts_a_working_python_hook_back(
    tmp_path: Path, native_hook_bin: Path
) -> None:
    other = tmp_path / "other"
    other.write_text("#!/bin/sh\necho mine\n")
    other.chmod(0o755)
    proc = subprocess.run([str(HOOK_CLI), "install-client", "--at", str(other)], capture_output=True, text=True)
    assert proc.returncode == 2 and "is not the agentsnap-claude-code-hook script" in proc.stderr
    assert "Traceback" not in proc.stderr and other.read_text() == "#!/bin/sh\necho mine\n"
    copy = tmp_path / "bin" / "agentsnap-claude-code-hook"
    copy.parent.mkdir()
    shutil.copy2(native_hook_bin / "agentsnap-claude-code-hook", copy)
    proc = subprocess.run([str(HOOK_CLI), "install-client", "--at", str(copy), "--remove", "--json"],
                          capture_output=True, text=True)
    assert proc.returncode == 0 and json.loads(proc.stdout)["client"] == "python"
    assert copy.read_bytes()[:2] == b"#!"
    call = json.dumps({"hook_event_name": "PreToolUse", "tool_name": "Bash", "tool_input": {"command": "ls"},
                       "cwd": str(tmp_path)})
    ran = subprocess.run([str(copy), "PreToolUse"], input=call, capture_output=True, text=True, timeout=120)
    assert (ran.returncode, ran.stdout, ran.stderr) == (0, "", "")
    proc = subprocess.run([str(HOOK_CLI), "install-client", "--at", str(copy), "--remove"], capture_output=True,
                          text=True)
    assert proc.returncode == 0 and "no native hook client" in proc.stdout
