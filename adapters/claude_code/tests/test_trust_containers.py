"""A container run with the project mounted writable gets a snapshot first.

Met as a user: agents build and test in containers - ``docker run --rm -v "$PWD":/src -w /src image make``,
``podman run -v .:/app node npm ci``. What runs inside can change or delete any file of the mount, and the
matcher saw only ``docker``: no snapshot was taken. A bind mount of the project (``.``, ``$PWD``, ``$(pwd)``, a
path inside it or above it) that is not read-only now counts as destructive; named volumes, read-only mounts and
runs without mounts do not.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from agentsnap_claude_code.matcher import Matcher
from conftest import run_plugin_hook

MOUNTING = [
    'docker run --rm -v "$PWD":/src -w /src python:3.12 make', "docker run -v $(pwd):/app node npm ci",
    "docker run -v .:/app img", "podman run -it --rm -v ./:/w:z img", "docker run -v{cwd}:/s img",
    "docker run --volume={cwd}/src:/s img", "docker run -v {parent}:/all img", "docker container run -v .:/x img",
    "docker run --mount type=bind,source=$PWD,target=/src img", "nerdctl run -v .:/w img", "sudo docker run -v .:/w img",
]
NOT_MOUNTING = [
    "docker run -v $PWD:/src:ro img", "docker run --mount type=bind,source=$PWD,target=/src,readonly img",
    "docker run -v pgdata:/var/lib/postgresql/data postgres", "docker run --mount type=volume,source=x,target=/y img",
    "docker run -v /opt/elsewhere:/d img", "docker run --rm -e A=1 -p 8080:80 img", "docker ps -a", "docker build -t x .",
    "docker run img ls /",
]


@pytest.mark.parametrize("command", MOUNTING)
def test_a_writable_mount_of_the_project_gets_a_snapshot(tmp_path: Path, command: str) -> None:
    work = tmp_path / "work"
    work.mkdir()
    command = command.format(cwd=work, parent=tmp_path)
    assert "container-mount" in {f.rule for f in Matcher(cwd=str(work)).findings(command)}


@pytest.mark.parametrize("command", NOT_MOUNTING)
def test_read_only_named_or_no_mounts_take_no_snapshot(tmp_path: Path, command: str) -> None:
    assert Matcher(cwd=str(tmp_path)).findings(command) == []


def test_the_plugin_hook_gives_a_container_run_its_undo(project: Path, transcript: Path) -> None:
    _, out = run_plugin_hook(project, transcript, "PreToolUse", tool_name="Bash",
                             tool_input={"command": 'docker run --rm -v "$PWD":/src -w /src python:3.12 make clean'})
    assert out.get("systemMessage", "").startswith("agentsnap: snapshot "), json.dumps(out)  # before: nothing
    assert "undo with: agentsnap-claude-code restore " in out["systemMessage"]
