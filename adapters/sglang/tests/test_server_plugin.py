"""The SGLang general plugin (``agentsnap_sglang.server``): through SGLang's own ``HookRegistry``, the tree built by
the scheduler's factory (``registry.create_tree_cache``) is warm-started from a snapshot, and an idle scheduler
captures it when asked. Each side runs in a new process, as a scheduler process does."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib
from agentsnap_core import Repo
from agentsnap_core.testing.servers import need_module

HERE = Path(__file__).parent
SHARED = [17, 201, 5, 99, 143, 7, 64, 250, 33, 180, 2, 76, 121, 9, 230, 48]
PROMPTS = [SHARED + [40, 41, 42, 43, 44, 45], SHARED + [90, 91, 92, 93, 94]]


@pytest.fixture(autouse=True)
def _sglang():
    need_module("sglang.srt.plugins.hook_registry")


def run_child(mode: str, env: dict[str, str], *args: str) -> dict:
    proc = subprocess.run(
        [sys.executable, str(HERE / "server_child.py"), mode, *args], capture_output=True, text=True, timeout=600,
        env={**os.environ, **env, "PYTHONPATH": os.pathsep.join([str(HERE), *sys.path])},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])


def test_plugin_saves_an_idle_servers_tree_and_warm_starts_a_new_one_from_it(tmp_path):
    Repo.init(tmp_path / "repo")
    env = {"AGENTSNAP_SGLANG_REPO": str(tmp_path / "repo"), "AGENTSNAP_SGLANG_WEIGHTS": "seed-1234",
           "AGENTSNAP_SGLANG_MODEL": "tiny-llama", "AGENTSNAP_SGLANG_SAVE_TRIGGER": str(tmp_path / "save")}
    saved = run_child("save", env, json.dumps(PROMPTS))
    assert saved["attached"] and not saved["trigger_left"]
    assert saved["sequences"] == sorted(p[:20] for p in PROMPTS)  # whole pages of 4: 22 -> 20, 21 -> 20
    snap_id = saved["done"]
    assert Repo.open(tmp_path / "repo").get(snap_id).message == "warm cache"

    restored = run_child("restore", {**env, "AGENTSNAP_SGLANG_RESTORE": snap_id})
    assert restored["attached"]
    assert restored["sequences"] == saved["sequences"]
    assert restored["digests"] == saved["digests"]  # every K/V byte, before the first request
    # another checkpoint: the restore is refused (logged), the server starts with an empty cache
    assert restored["other_weights"] == {"attached": True, "sequences": []}


def test_plugin_registers_nothing_without_a_repository_and_is_declared_for_sglangs_loader(monkeypatch):
    from agentsnap_sglang import server
    from sglang.srt.plugins.hook_registry import HookRegistry

    monkeypatch.delenv("AGENTSNAP_SGLANG_REPO", raising=False)
    before = {k: list(v) for k, v in HookRegistry._hooks.items()}
    server.register()
    assert {k: list(v) for k, v in HookRegistry._hooks.items() if v} == {k: v for k, v in before.items() if v}
    project = tomllib.loads((HERE.parent / "pyproject.toml").read_text())["project"]
    assert project["entry-points"]["sglang.srt.plugins"] == {"agentsnap": "agentsnap_sglang.server:register"}
