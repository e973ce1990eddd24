"""The warm helper process (agentsnap_claude_code.daemon; issue 20, item 5: a snapshotting call at git's cost).

Through the plugin's real hook command (hooks.json, JSON on stdin): once a call has started the helper,
the hook's own Python imports nothing of agentsnap and the helper answers exactly as the in-process path
would. The helper is an optimisation, never the protection: killed mid-snapshot, stale, too slow, or
reachable through a socket folder others can enter, the hook falls back to the in-process path, which
snapshots (or asks) as before, and the store stays whole.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
import types
from pathlib import Path

import pytest
from agentsnap_claude_code import daemon, projectstore
from agentsnap_claude_code.install import plugin_root
from conftest import alive, helper_env, run_plugin_hook
from test_quick import _imports

QUICK = plugin_root() / "hooks" / "agentsnap_quick.py"
pytestmark = pytest.mark.helper  # the helper on (conftest turns it off elsewhere)


@pytest.fixture(autouse=True, params=["python", "native"])
def client(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every test here twice: the hook's Python client (the quick script), and the native hook client
    (`agentsnap-claude-code install-client`) in its place on PATH, which must behave the same."""
    if request.param == "native":
        monkeypatch.setenv("AGENTSNAP_TEST_HOOK_BIN", str(request.getfixturevalue("native_hook_bin")))
    return request.param

quick = types.ModuleType("agentsnap_quick")
quick.__file__ = str(QUICK)
exec(compile(QUICK.read_text(encoding="utf-8"), str(QUICK), "exec"), quick.__dict__)


def _rm(n: int) -> dict:
    return {"tool_name": "Bash", "tool_input": {"command": "rm -rf src"}, "tool_use_id": f"toolu_helper{n}"}


def _hook(project: Path, transcript: Path, **extra: object) -> tuple[set[str], dict, str]:
    proc, out = run_plugin_hook(project, transcript, "PreToolUse", env=helper_env(PYTHONPROFILEIMPORTTIME="1"), **extra)
    return {m.split(".")[0] for m in _imports(proc.stderr)}, out, proc.stderr


def _snap_id(out: dict) -> str:
    m = re.search(r"undo with: agentsnap-claude-code restore ([0-9a-f]{12}) ", out.get("systemMessage", ""))
    assert m, out
    return m.group(1)


def _wait_for_helper(run: Path) -> int:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        pid = _pid(run)
        if pid and (run / daemon.socket_name()).exists():
            return pid
        time.sleep(0.05)
    raise AssertionError("no helper started")


def _pid(run: Path) -> int | None:
    lock = run / (daemon.socket_name() + ".lock")
    text = lock.read_text().strip() if lock.exists() else ""
    return int(text) if text.isdigit() and alive(int(text)) else None


def _start_helper(patch: str) -> subprocess.Popen[bytes]:
    """A helper process with ``patch`` applied to its code (how a test makes it die, hang or go stale)."""
    code = f"import sys\n{patch}\nfrom agentsnap_claude_code.daemon import main\nsys.exit(main())\n"
    return subprocess.Popen([sys.executable, "-c", code], env=helper_env(), start_new_session=True, stdin=subprocess.DEVNULL)


def _head(project: Path) -> tuple[str, dict]:
    from agentsnap_claude_code.config import load_settings
    from agentsnap_claude_code.projectstore import open_project_repo

    with open_project_repo(project, load_settings(project), create=False) as repo:
        head = repo.head()[1]
        assert head
        return head, {"verify": repo.verify()}


def _holds_after_rm(project: Path, snap: str, app: str) -> None:
    """``snap`` is HEAD and the store verifies; after ``rm -rf src`` the user's undo brings src/app.py back as ``app``."""
    import shutil

    head, info = _head(project)
    assert head.startswith(snap) and info["verify"]["ok"]
    shutil.rmtree(project / "src")
    proc = subprocess.run(["agentsnap-claude-code", "restore", snap, "-C", str(project)], capture_output=True, text=True, env=helper_env())
    assert proc.returncode == 0, proc.stderr
    assert (project / "src" / "app.py").read_text() == app


def test_the_helper_answers_a_snapshotting_call_and_the_hook_imports_nothing_of_agentsnap(project: Path, transcript: Path, helper_run_dir: Path, client: str) -> None:
    first, out, _ = _hook(project, transcript, **_rm(1))
    assert "agentsnap_core" in first and "undo with" in out["systemMessage"]  # no helper yet: in-process, and it starts one
    _wait_for_helper(helper_run_dir)
    store = Path.home() / ".local" / "share" / "agentsnap" / "claude-code"
    modes = {p: p.stat().st_mode for p in store.rglob("*") if p.is_file()}
    (project / "src" / "app.py").write_text("print('changed')\n")
    imported, out, _ = _hook(project, transcript, **_rm(2))
    assert not imported & {"site", "agentsnap_core", "agentsnap_claude_code", "json", "re"}, sorted(imported)
    if client == "native":
        assert not imported  # no Python started at all: the native client handed the call over
    new = {p: p.stat().st_mode for p in store.rglob("*") if p.is_file() and p not in modes}
    assert new and set(new.values()) <= set(modes.values())  # written with the hook's umask, not the socket's 077
    snap = _snap_id(out)
    assert "before tool call" in out["systemMessage"] or "before this call" in out["systemMessage"]
    _holds_after_rm(project, snap, "print('changed')\n")  # the snapshot holds the change
    # a harmless call the quick script does not know is answered by the helper too
    imported, out, _ = _hook(project, transcript, tool_name="Bash", tool_input={"command": "docker compose ps"})
    assert out == {} and "site" not in imported
    if client == "native":  # and so is one the quick script would have answered itself
        imported, out, _ = _hook(project, transcript, tool_name="Bash", tool_input={"command": "ls -la src && git status"})
        assert out == {} and not imported


def test_the_helper_keeps_the_stat_cache_in_memory_and_every_snapshot_holds_the_tree_as_it_was(project: Path, transcript: Path, helper_run_dir: Path) -> None:
    """From its second call on a project the helper keeps the stat cache decoded (core layers/world.py: a call reads
    no stat cache file and writes it after answering): each snapshot still holds exactly the tree of its moment."""
    _hook(project, transcript, **_rm(10))
    _wait_for_helper(helper_run_dir)
    store = Path.home() / ".local" / "share" / "agentsnap" / "claude-code"
    states = []
    for n in range(5):
        (project / "src" / "app.py").write_text(f"print({n})\n")
        (project / "src" / f"new{n}.txt").write_text(str(n))
        if n == 2:
            (project / "src" / "new0.txt").unlink()
        imported, out, _ = _hook(project, transcript, **_rm(11 + n))
        assert "agentsnap_core" not in imported  # the helper answered
        states.append((_snap_id(out), {p.name: p.read_text() for p in (project / "src").iterdir() if p.is_file()}))
        if n == 1:  # (the marker is written after the answer of the call that began keeping it)
            deadline = time.monotonic() + 30
            while not list(store.rglob("statcache.msgpack.kept")) and time.monotonic() < deadline:
                time.sleep(0.05)
            assert list(store.rglob("statcache.msgpack.kept"))
    assert _head(project)[1]["verify"]["ok"]
    for snap, files in states:
        proc = subprocess.run(["agentsnap-claude-code", "restore", snap, "-C", str(project)], capture_output=True,
                              text=True, env=helper_env())
        assert proc.returncode == 0, proc.stderr
        assert {p.name: p.read_text() for p in (project / "src").iterdir() if p.is_file()} == files, snap


def test_the_helper_asks_git_what_it_ignores_again_exactly_when_that_can_have_changed(project: Path, transcript: Path, helper_run_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The bulky-folder check (`git ls-files --ignored`, a subprocess on every snapshotting call) is answered from the
    helper's change journal while nothing it depends on changed: a file's content written runs no git. A folder made
    or removed, a `.gitignore` written (at the root or deeper), `.git/info/exclude` written each ask git again, and
    every snapshot leaves out exactly the folders git ignores at that moment (the message names them)."""
    import shutil

    real = shutil.which("git")
    assert real
    wrap, log = tmp_path / "git-wrapper", tmp_path / "git-calls.log"
    wrap.mkdir()
    (wrap / "git").write_text(f'#!/bin/sh\necho "$*" >> "{log}"\nexec "{real}" "$@"\n')
    (wrap / "git").chmod(0o755)
    monkeypatch.setenv("PATH", f"{wrap}{os.pathsep}{os.environ['PATH']}")
    (project / ".gitignore").write_text("*.log\ndist/\n")
    (project / ".claude").mkdir()
    (project / ".claude" / "agentsnap.json").write_text(json.dumps({"bulky_files": 20}))
    calls = iter(range(100, 200))

    def snapshot(change: str = "") -> tuple[bool, str]:
        """One snapshotting call after writing src/app.py: (whether git was asked, the folders left out)."""
        (project / "src" / "app.py").write_text(f"print({change!r})\n")
        before = log.read_text().count("ls-files") if log.exists() else 0
        _, out = run_plugin_hook(project, None, "PreToolUse", env=helper_env(), **_rm(next(calls)))  # (no transcript
        assert "undo with" in out["systemMessage"], out  # to wait for)
        asked = log.read_text().count("ls-files") > before
        m = re.search(r"NOT captured \(ignored by git, over 20 files[^)]*\): ([^;]+?)(?:;|$)", out["systemMessage"])
        return asked, (m.group(1) if m else "")

    def written(path: Path, text: str) -> None:
        """A settings file written, then older than the window in which the helper does not vouch for a file's
        times (a write within the same timestamp could follow): so the next call's answer does not hang on timing."""
        path.write_text(text)
        time.sleep(2 * projectstore._RACY_NS / 1e9)

    def folder(rel: str) -> None:
        for i in range(30):
            (project / rel / f"d{i % 3}").mkdir(parents=True, exist_ok=True)
            (project / rel / f"d{i % 3}" / f"f{i}.js").write_text("x\n")

    written(project / "src" / ".gitignore", "*.tmp\n")
    folder("dist")  # left out from the first snapshot on: never watched
    snapshot("first")
    _wait_for_helper(helper_run_dir)
    for n in range(3):  # the helper's first calls on the project: its journal begins to watch every directory
        snapshot(f"warm {n}")
    assert snapshot("content only") == (False, "dist/")  # nothing git reads changed: not asked
    folder("node_modules")
    assert snapshot("a folder made") == (True, "dist/")  # not ignored (yet): captured
    assert snapshot("content only") == (False, "dist/")
    written(project / ".gitignore", "*.log\ndist/\nnode_modules/\n")
    assert snapshot(".gitignore written") == (True, "dist/, node_modules/")
    assert snapshot("content only") == (False, "dist/, node_modules/")
    folder("vendor")
    assert snapshot("vendor made") == (True, "dist/, node_modules/")
    written(project / ".git" / "info" / "exclude", (project / ".git" / "info" / "exclude").read_text() + "/vendor/\n")
    assert snapshot("exclude written") == (True, "dist/, node_modules/, vendor/")
    folder("src/gen")
    assert snapshot("src/gen made") == (True, "dist/, node_modules/, vendor/")
    assert snapshot("content only") == (False, "dist/, node_modules/, vendor/")
    written(project / "src" / ".gitignore", "*.tmp\ngen/\n")
    assert snapshot("src/.gitignore written") == (True, "dist/, node_modules/, src/gen/, vendor/")
    shutil.rmtree(project / "node_modules")
    assert snapshot("node_modules removed") == (True, "dist/, src/gen/, vendor/")
    shutil.rmtree(project / "vendor")
    assert snapshot("vendor removed") == (True, "dist/, src/gen/")
    assert snapshot("content only") == (False, "dist/, src/gen/")
    for d in list((project / "src" / "gen").iterdir()):  # a folder left out after its directories were watched
        shutil.rmtree(d)
    assert snapshot("src/gen emptied") == (True, "dist/")  # ignored by git still, but no longer bulky: captured
    assert snapshot("content only") == (False, "dist/")
    for d in list((project / "dist").iterdir()):  # a folder no watch ever saw: its own directory tells
        shutil.rmtree(d)
    assert snapshot("dist emptied") == (True, "")
    assert _head(project)[1]["verify"]["ok"]


def test_a_file_written_just_now_never_vouches_for_a_reused_answer(tmp_path: Path) -> None:
    """The helper reuses the bulky-folder answer (and a kept store) only while the files they depend on keep their
    identity. A file written within the same timestamp window as it is looked at could be written again unseen: its
    identity must then differ from every other look at it, or a `.gitignore` (or key file) rewritten twice within
    a few milliseconds would pass as unchanged."""
    f = tmp_path / ".gitignore"
    f.write_text("build/\n")
    first, second = projectstore._identity(f), projectstore._identity(f)
    assert first is not None and first != second
    os.utime(f, ns=(0, 0))  # long ago: now it vouches, the same each time
    time.sleep(2 * projectstore._RACY_NS / 1e9)  # (its change time is the utime's)
    assert projectstore._identity(f) == projectstore._identity(f) is not None


def test_the_helper_keeps_the_store_open_and_sees_it_deleted_or_its_settings_changed(project: Path, transcript: Path, helper_run_dir: Path) -> None:
    """The helper keeps a project's store open between calls. Deleted meanwhile (another process, `rm -rf` of the
    data folder), the next call snapshots into the store made anew, never into the deleted files; a setting another
    process changed (the core CLI's `agentsnap config world.include_git false`) is what the next snapshot follows."""
    import shutil

    from agentsnap_claude_code.config import load_settings
    from agentsnap_claude_code.projectstore import open_project_repo, store_dir_for

    def call(n: int) -> str:
        (project / "src" / "app.py").write_text(f"print({n})\n")
        _, out = run_plugin_hook(project, None, "PreToolUse", env=helper_env(), **_rm(300 + n))
        return _snap_id(out)

    def world_of(snap: str) -> dict:
        with open_project_repo(project, load_settings(project), create=False) as repo:
            return repo.get(snap).layers["world"]

    call(0)
    _wait_for_helper(helper_run_dir)
    call(1)
    call(2)
    store = store_dir_for(project.resolve(), load_settings(project))
    assert (store / "index.sqlite").is_file()
    shutil.rmtree(store)
    snap = call(3)
    assert (store / "index.sqlite").is_file()
    _holds_after_rm(project, snap, "print(3)\n")
    rec = world_of(call(4))
    assert rec.get("include_git") is True and not rec.get("git_not_captured"), rec  # (capture_git: on by default)
    proc = subprocess.run(["agentsnap", "config", "world.include_git", "false"], cwd=project, capture_output=True,
                          text=True, env=helper_env())
    assert proc.returncode == 0, proc.stderr
    rec = world_of(call(5))
    assert not rec.get("include_git") and rec.get("git_not_captured") == [".git"], rec


def test_a_kept_store_follows_its_encryption_key_file(project: Path, transcript: Path, helper_run_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An encrypted store the helper keeps open is opened again when the key file it was opened with is written
    anew: another key under the same name is refused as a fresh open refuses it (the call is asked about), never
    used through the key read before."""
    from agentsnap_claude_code.config import load_settings
    from agentsnap_claude_code.projectstore import open_project_repo
    from agentsnap_core.format import crypto

    key_file = tmp_path / "store.key"
    key_file.write_text(crypto.generate_key())
    key_file.chmod(0o600)
    monkeypatch.setenv("AGENTSNAP_ENCRYPTION_KEY_FILE", str(key_file))

    def call(n: int) -> dict:
        (project / "src" / "app.py").write_text(f"print({n})\n")
        return run_plugin_hook(project, None, "PreToolUse", env=helper_env(), **_rm(500 + n))[1]

    call(0)
    with open_project_repo(project, load_settings(project), create=False) as repo:
        crypto.enable_encryption(repo)
    _wait_for_helper(helper_run_dir)
    assert "undo with" in call(1)["systemMessage"] and "undo with" in call(2)["systemMessage"]
    key_file.write_text(crypto.generate_key())
    out = call(3)
    assert out["hookSpecificOutput"]["permissionDecision"] == "ask" and "not this store's key" in str(out), out


def test_a_snapshot_cut_short_inside_a_transaction_leaves_the_next_call_a_working_store(project: Path, transcript: Path, helper_run_dir: Path) -> None:
    """A helper call whose snapshot fails half-way (here: its index transaction begun, then an error, as the time
    limit's alarm can do) is asked about; the store the helper kept open is dropped, so the next call snapshots."""
    _start_helper(
        "from agentsnap_core.stores import local\nreal = local.SqliteRefs.commit_snapshots\ncalls = []\n"
        "def flaky(self, *a, **k):\n    calls.append(1)\n    if len(calls) == 2:\n"
        "        self._db().execute('BEGIN IMMEDIATE')  # left open, as a call cut short inside it\n"
        "        raise TimeoutError('cut short')\n    return real(self, *a, **k)\n"
        "local.SqliteRefs.commit_snapshots = flaky\n"
    )
    _wait_for_helper(helper_run_dir)
    outs = []
    for n in range(3):
        (project / "src" / "app.py").write_text(f"print({n})\n")
        _, out = run_plugin_hook(project, None, "PreToolUse", env=helper_env(), **_rm(400 + n))
        outs.append(out)
    assert "undo with" in outs[0]["systemMessage"], outs[0]
    assert outs[1]["hookSpecificOutput"]["permissionDecision"] == "ask" and "cut short" in str(outs[1]), outs[1]
    _holds_after_rm(project, _snap_id(outs[2]), "print(2)\n")


def test_a_helper_killed_mid_snapshot_leaves_the_store_whole_and_the_call_protected(project: Path, transcript: Path, helper_run_dir: Path) -> None:
    killer = _start_helper(
        "import os, signal\nfrom agentsnap_core.layers import world\nput = world.put_tree\n"
        "def dying(*a, **k):\n    put(*a, **k)  # the tree object is written, the manifest and the ref are not\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\nworld.put_tree = dying\n"
    )
    _wait_for_helper(helper_run_dir)
    imported, out, _ = _hook(project, transcript, **_rm(3))
    assert killer.wait(timeout=60) == -9  # the helper died inside the snapshot
    assert "agentsnap_core" in imported  # the hook's own Python took the snapshot instead
    snap = _snap_id(out)
    head, info = _head(project)
    assert head.startswith(snap)
    assert info["verify"]["ok"], info["verify"]["problems"]
    # the next call works (a helper started by the fallback, or in-process)
    (project / "src" / "app.py").write_text("print('again')\n")
    _, out, _ = _hook(project, transcript, **_rm(4))
    assert _snap_id(out) != snap and _head(project)[0].startswith(_snap_id(out))


def test_a_stale_helper_steps_aside(project: Path, transcript: Path, helper_run_dir: Path) -> None:
    """Its code changed on disk since it started (a pip upgrade): it says so and exits; the call goes in-process."""
    stale = _start_helper("from agentsnap_claude_code import daemon\nn = iter(range(10**9))\ndaemon._fingerprint = lambda paths: [next(n)]\n")
    _wait_for_helper(helper_run_dir)
    imported, out, _ = _hook(project, transcript, **_rm(5))
    assert stale.wait(timeout=60) == 0
    assert "agentsnap_core" in imported and _head(project)[0].startswith(_snap_id(out))


def test_a_helper_past_its_time_limit_leaves_the_call_to_the_in_process_path(project: Path, transcript: Path, helper_run_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    hung = _start_helper("import time\nfrom agentsnap_claude_code import gate\ngate.respond = lambda *a: time.sleep(600)\n")
    try:
        _wait_for_helper(helper_run_dir)
        monkeypatch.setenv("AGENTSNAP_HOOK_DAEMON_TIMEOUT", "1")
        imported, out, _ = _hook(project, transcript, **_rm(6))
        assert "agentsnap_core" in imported and _head(project)[0].startswith(_snap_id(out))
    finally:
        hung.kill()
        hung.wait()


class _Forger:
    """A socket at the helper's address that answers every call with a forged "nothing to do" (or a cut reply)."""

    def __init__(self, run: Path, reply: bytes) -> None:
        self.srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        here = os.getcwd()
        os.chdir(run)
        try:
            self.srv.bind(daemon.socket_name())
        finally:
            os.chdir(here)
        self.srv.listen(4)
        self.calls = 0
        self.reply = reply
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.srv.accept()
            except OSError:
                return
            with conn:
                self.calls += 1
                conn.sendall(self.reply)

    def close(self) -> None:
        self.srv.close()


NOTHING_TO_DO = daemon._reply(0, "", "")


def _forged(project: Path, transcript: Path, folder: Path, reply: bytes) -> tuple[int, dict]:
    """A destructive call with a forger at the helper's address in ``folder``: (calls it got, the hook's JSON)."""
    forger = _Forger(folder, reply)
    try:
        _, out, _ = _hook(project, transcript, **_rm(7))
        return forger.calls, out
    finally:
        forger.close()


@pytest.mark.parametrize("mode", [0o755, 0o711, 0o770])
def test_a_socket_folder_others_can_enter_is_never_trusted(project: Path, transcript: Path, helper_run_dir: Path, mode: int) -> None:
    helper_run_dir.mkdir()
    helper_run_dir.chmod(mode)
    calls, out = _forged(project, transcript, helper_run_dir, NOTHING_TO_DO)
    assert calls == 0 and "undo with" in out["systemMessage"]


def test_a_linked_socket_folder_is_never_trusted(project: Path, transcript: Path, helper_run_dir: Path, tmp_path: Path) -> None:
    real = tmp_path / "elsewhere"
    real.mkdir(mode=0o700)
    helper_run_dir.symlink_to(real)
    calls, out = _forged(project, transcript, real, NOTHING_TO_DO)
    assert calls == 0 and "undo with" in out["systemMessage"]


@pytest.mark.parametrize("reply", [NOTHING_TO_DO[:-1], NOTHING_TO_DO[:9], b"", daemon.MAGIC + b"\0stale", b"AGSNAP0\x000\x000\x000\x00END"])
def test_a_reply_cut_short_or_of_another_version_sends_the_call_in_process(project: Path, transcript: Path, helper_run_dir: Path, reply: bytes) -> None:
    helper_run_dir.mkdir(mode=0o700)
    calls, out = _forged(project, transcript, helper_run_dir, reply)
    assert calls == 1 and "undo with" in out["systemMessage"]


def test_the_quick_script_and_the_helper_agree_on_the_socket(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert quick.PROTOCOL == daemon.PROTOCOL and quick.MAGIC == daemon.MAGIC
    for env in ({"AGENTSNAP_HOOK_RUN_DIR": str(tmp_path)}, {"XDG_RUNTIME_DIR": str(tmp_path)}, {}):
        for var in ("AGENTSNAP_HOOK_RUN_DIR", "XDG_RUNTIME_DIR"):
            monkeypatch.delenv(var, raising=False)
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        assert quick.run_dir() == daemon.run_dir()
    assert quick.socket_name() == daemon.socket_name() and quick.socket_name("/other/python") != daemon.socket_name()


def test_one_helper_per_socket_and_it_leaves_when_idle(helper_run_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTSNAP_HOOK_IDLE", "1")
    first = _start_helper("")
    pid = _wait_for_helper(helper_run_dir)
    second = _start_helper("")
    assert second.wait(timeout=60) == 0  # the lock is held: it leaves at once
    assert first.wait(timeout=60) == 0 and pid == first.pid  # idle: it leaves, and takes its socket along
    assert not (helper_run_dir / daemon.socket_name()).exists()
    assert (helper_run_dir.stat().st_mode & 0o777) == 0o700


def test_the_helper_answers_as_the_in_process_path(project: Path, transcript: Path, helper_run_dir: Path) -> None:
    """Same JSON for the same calls, whichever answers (settings file, ask about the store, bad input)."""
    (project / ".claude").mkdir()
    (project / ".claude" / "agentsnap.json").write_text(json.dumps({"extra_patterns": [r"^ls\b"]}))
    calls = [
        {"tool_name": "Bash", "tool_input": {"command": f"rm -rf {Path.home()}"}},
        {"tool_name": "Bash", "tool_input": {"command": "docker compose ps"}},
        {"tool_name": "Bash", "tool_input": {"command": "npm run lint"}},
    ]
    cold = [run_plugin_hook(project, transcript, "PreToolUse", env=helper_env(AGENTSNAP_HOOK_DAEMON="0"), **c)[1] for c in calls]
    _start_helper("")
    _wait_for_helper(helper_run_dir)
    warm = []
    for c in calls:
        proc, out = run_plugin_hook(project, transcript, "PreToolUse", env=helper_env(PYTHONPROFILEIMPORTTIME="1"), **c)
        assert "site" not in _imports(proc.stderr)
        warm.append(out)
    assert warm == cold and cold[0]["hookSpecificOutput"]["permissionDecision"] == "ask"


def test_a_call_from_another_user_gets_no_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    """Behind the 0700 folder, the helper also checks the caller's uid (SO_PEERCRED / LOCAL_PEERCRED)."""
    request = daemon.MAGIC + b"\0PreToolUse\0/\0HOME=/nonexistent\0\0" + json.dumps({"tool_name": "Bash", "tool_input": {"command": "rm -rf src"}}).encode()
    for uid, answered in ((os.getuid(), True), (os.getuid() + 1, False)):
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        assert daemon._peer_uid(ours) == os.getuid()
        with monkeypatch.context() as m:
            m.setattr(daemon, "_peer_uid", lambda conn, uid=uid: uid)
            m.setattr("agentsnap_claude_code.gate.respond", lambda text, event: (0, "answered", ""))
            theirs.sendall(request)
            theirs.shutdown(socket.SHUT_WR)
            with ours:
                assert daemon._handle(ours, [], [])
        try:
            reply = theirs.recv(1 << 16)
        except ConnectionResetError:  # closed without reading the call
            reply = b""
        assert reply == (daemon._reply(0, "answered", "") if answered else b"")
        theirs.close()
