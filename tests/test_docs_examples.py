"""Every fenced ```bash / ```python block of docs/*.md is run here as a user following the page would, or is
listed in NOT_RUN_HERE with the reason and the test that runs its equivalent (issue 21, "every docs command").

Each doc gets a fresh `agentsnap init`-ed working tree in a temp dir, with this venv's bin first on PATH.
What a block needs from the user and the page does not give (the agent script a fan-out runs, the files the
attempts edit, `$EDITOR`) is made by the test, and said at the place. Server URLs in docs/STORES.md are
replaced by real servers from `agentsnap_core.testing.servers` (a missing server skips outside CI, fails
under CI=true). `test_every_block_is_run_or_listed` fails when a block is added or changed in a doc
without this file knowing it.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
BIN = Path(sys.executable).parent


def blocks() -> dict[tuple[str, int], str]:
    """(doc name, n-th bash/python block of that doc) -> the block's text; fences at line start only."""
    out = {}
    for doc in sorted(DOCS.glob("*.md")):
        found = re.findall(r"^```(?:bash|python)\n(.*?)^```", doc.read_text(), re.S | re.M)
        out.update({(doc.name, i): text for i, text in enumerate(found)})
    return out


def block(doc: str, i: int) -> str:
    return blocks()[(doc, i)]


def commands(text: str) -> list[str]:
    """A bash block's commands, comments and blank lines dropped."""
    return [line.split("  #")[0].strip() for line in text.splitlines() if line.strip() and not line.startswith("#")]


#: (doc, block) -> the first line the block must start with (so an edited block is noticed) and who runs it
RUN_HERE = {
    ("FANOUT.md", 0): ('agentsnap snapshot -m "tests fail"', "test_fanout_cli_block"),
    ("MERGE.md", 0): ("agentsnap fork -n 12 --worktrees ../tries", "test_merge_cli_block"),
    ("PYTHON_API.md", 0): ("import agentsnap_core", "test_python_api_blocks_in_one_process"),
    ("PYTHON_API.md", 1): ("client = agentsnap_core.Client(", "test_python_api_blocks_in_one_process"),
    ("PYTHON_API.md", 2): ("agentsnap prune --keep-last 20", "test_retention_cli_block"),
    ("PYTHON_API.md", 3): ("@agentsnap_core.register_migration(", "test_python_api_blocks_in_one_process"),
    ("PYTHON_API.md", 4): ("with agentsnap_core.rollback(agent):", "test_python_api_blocks_in_one_process"),
    ("PYTHON_API.md", 5): ("class Worker(agentsnap_core.Snapshottable):", "test_python_api_blocks_in_one_process"),
    ("STORES.md", 0): ("agentsnap remote add team", "test_stores_remote_block"),
    ("UI.md", 0): ('pip install "agentsnap-core[ui]"', "test_ui_blocks"),
    ("UI.md", 1): ("python -m agentsnap_core.ui.demo /tmp/ui-demo", "test_ui_blocks"),
}

#: (doc, block) -> (first line, why not here, the test that runs it or its runnable equivalent)
NOT_RUN_HERE = {
    ("CONFORMANCE.md", 0): ("from agentsnap_core.testing import AdapterCase", "a template: make_fresh_agent, run_one_turn and "
                            "my_adapter are the reader's", "core/tests/test_conformance.py"),
    ("EFFECTS.md", 0): ("from agentsnap_core import Repo", "a sketch: smtp and agent are the reader's", "core/tests/test_effects.py"),
    ("FANOUT.md", 1): ("from agentsnap_core import Repo", "a sketch: solve, grade and send_email are the reader's; "
                       "examples/fanout_email.py is its runnable form", "core/tests/test_fanout.py"),
    ("MERGE.md", 1): ("from agentsnap_core import Repo\nfrom agentsnap_core.operations import merge", "a sketch: resolved_state, ours_id, a, b are the reader's",
                      "core/tests/test_merge.py"),
    ("MERGE.md", 2): ("from agentsnap_core.operations.merge_layers import LLMSummarizer", "needs an LLM client (client.complete)",
                      "core/tests/test_merge_layers.py"),
    ("SECURITY.md", 0): ("from agentsnap_core import Repo\nfrom agentsnap_core.format import crypto", "changes the key setup of a store; run with a real key",
                         "core/tests/test_crypto.py"),
    ("SECURITY.md", 1): ("crypto.generate_signing_key(", "writes ~/.agentsnap-signing.pem; url and origin are the reader's",
                         "core/tests/test_crypto.py"),
}

#: runnable files in examples/ that the docs name -> the test that runs each
EXAMPLES_RUN_BY = {
    "examples/fanout_patches.py": ("core/tests/test_fanout.py", "fanout_patches.py"),
    "examples/fanout_email.py": ("core/tests/test_fanout.py", "fanout_email.py"),
    "examples/api": ("core/tests/test_api_seeds.py", '"examples" / "api"'),
}


def test_every_block_is_run_or_listed() -> None:
    found = blocks()
    assert set(found) == set(RUN_HERE) | set(NOT_RUN_HERE), "a docs block is neither run here nor listed: " + str(
        sorted(set(found) ^ (set(RUN_HERE) | set(NOT_RUN_HERE))))
    assert not set(RUN_HERE) & set(NOT_RUN_HERE)
    for key, (first, runner) in RUN_HERE.items():
        assert found[key].startswith(first), (key, found[key][:80])
        assert callable(globals().get(runner)), runner
    for key, (first, why, where) in NOT_RUN_HERE.items():
        assert found[key].startswith(first), (key, found[key][:80])
        assert why and (ROOT / where).is_file(), (key, where)


def test_examples_named_by_the_docs_are_run_by_a_test() -> None:
    named = set(re.findall(r"examples/[\w/.]*\w", " ".join(p.read_text() for p in DOCS.glob("*.md"))))
    assert named == set(EXAMPLES_RUN_BY), named
    for example, (test, mention) in EXAMPLES_RUN_BY.items():
        assert (ROOT / example).exists(), example
        assert mention in (ROOT / test).read_text(), (test, mention)


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTSNAP_")}
    return {**env, "PATH": f"{BIN}:{env['PATH']}", "EDITOR": "true", **extra}


def sh(line: str, cwd: Path, code: int = 0, **env: str) -> str:
    proc = subprocess.run(["bash", "-c", line], cwd=cwd, env=_env(**env), capture_output=True, text=True, timeout=300)
    assert proc.returncode == code, f"`{line}` exited {proc.returncode} (want {code}): {proc.stdout[-800:]}{proc.stderr[-800:]}"
    assert "Traceback" not in proc.stderr, f"`{line}`: {proc.stderr[-2000:]}"
    return proc.stdout


def new_work(tmp_path: Path, name: str = "work") -> Path:
    work = tmp_path / name
    work.mkdir()
    sh("agentsnap init", work)
    return work


def test_fanout_cli_block(tmp_path: Path) -> None:
    """docs/FANOUT.md's first block, word for word; agent.py and count_passed.py are the reader's, made here."""
    work = new_work(tmp_path)
    (work / "agent.py").write_text(
        "import os\nn = int(os.environ.get('AGENTSNAP_FORK_INDEX', '0'))\nopen('answer.txt', 'w').write(str(n % 5))\n")
    (work / "count_passed.py").write_text("import os\nprint(open('answer.txt').read() if os.path.exists('answer.txt') else 0)\n")
    run = commands(block("FANOUT.md", 0))
    assert len(run) == 2
    sh(run[0], work)
    out = sh(run[1], work)
    assert "best: fanout-" in out and "merged fanout-" in out, out
    assert re.search(r"^\s+1\s+\d+\s+ok\s", out, re.M), out  # the ranking table the page shows
    # the output the page shows: a line per fork, the header, the ranking, the winner merged (HEAD was the base)
    assert len(re.findall(r"^fork \d+ ok score [0-4]$", out, re.M)) == 12, out
    assert re.search(r"^fan-out [0-9a-f]{8} from [0-9a-f]{12} \(local, higher is better\)$", out, re.M), out
    assert re.search(r"^best: fanout-[0-9a-f]{8}-\d+ \(score 4\)$", out, re.M), out
    assert re.search(r"^merged fanout-[0-9a-f]{8}-\d+: fast-forward -> [0-9a-f]{12}$", out, re.M), out
    assert (work / "answer.txt").read_text() == "4"  # the winner (score 4) was merged into the working tree


def test_merge_cli_block(tmp_path: Path) -> None:
    """docs/MERGE.md's first block. The attempts' work ("# ... every attempt works ...") is made here:
    attempt-7 adds a file (merges cleanly), attempt-3 edits the line HEAD edited too (conflicts). `$EDITOR` is
    a script that keeps both values. `--continue` and `--abort` are alternatives: the abort is run first
    and checked to give back the exact pre-merge tree, then the merge is redone and continued."""
    work = new_work(tmp_path)
    (work / "src").mkdir()
    (work / "src" / "app.py").write_text("x = 1\n")
    sh("agentsnap snapshot -m base", work)
    fork, merge7, merge3, conflict, editor, cont, abort = commands(block("MERGE.md", 0))
    sh(fork, work)
    tries = tmp_path / "tries"
    assert {p.name for p in tries.iterdir()} == {f"attempt-{i}" for i in range(1, 13)}
    (tries / "attempt-7" / "notes.md").write_text("from attempt 7\n")
    sh("agentsnap snapshot -m notes", tries / "attempt-7")
    (tries / "attempt-3" / "src" / "app.py").write_text("x = 3\n")
    sh("agentsnap snapshot -m three", tries / "attempt-3")
    (work / "src" / "app.py").write_text("x = 2\n")
    sh("agentsnap snapshot -m two", work)

    sh(merge7, work)
    assert (work / "notes.md").read_text() == "from attempt 7\n"
    before = (work / "src" / "app.py").read_text()
    sh(merge3, work, code=1)
    assert "<<<<<<<" in (work / "src" / "app.py").read_text()
    shown = sh(conflict, work)
    assert "x = 2" in shown and "x = 3" in shown, shown
    sh(abort, work)
    assert (work / "src" / "app.py").read_text() == before
    assert sorted(p.name for p in work.iterdir()) == [".agentsnap", "notes.md", "src"]

    sh(merge3, work, code=1)
    assert editor == "$EDITOR src/app.py"
    resolve = tmp_path / "resolve-editor"  # the reader's editing, done by a script
    resolve.write_text("#!/bin/sh\nprintf 'x = 2\\nx3 = 3\\n' > \"$1\"\n")
    resolve.chmod(0o755)
    sh(editor, work, EDITOR=str(resolve))
    assert (work / "src" / "app.py").read_text() == "x = 2\nx3 = 3\n"
    sh(cont, work)
    assert len(json.loads(sh("agentsnap show --json", work))["parents"]) == 2


def test_retention_cli_block(tmp_path: Path) -> None:
    """docs/PYTHON_API.md's retention block; `[--dry-run] [--json]` are optional: run without, then with both."""
    work = new_work(tmp_path)
    for i in range(3):
        (work / "f.txt").write_text(str(i))
        sh(f"agentsnap snapshot -m s{i}", work)
    prune, gc, du = commands(block("PYTHON_API.md", 2))
    assert prune.endswith(" [--dry-run] [--json]")
    plain = prune.removesuffix(" [--dry-run] [--json]")
    assert '"v"' in sh(f"{plain} --dry-run --json", work)
    sh(plain, work)
    sh(gc, work)
    usage = sh(du, work)
    assert usage.startswith("agent ") and "store: " in usage, usage
    sh("agentsnap du --by branch --json --warn-bytes 1", work)  # the comment's variants


PYTHON_API_GLUE = {
    # what the reader has and the page leaves out, before each block
    0: "class SearchTool(agentsnap_core.Snapshottable):\n    def __init__(self): self.queries = ['q']\n"
       "def make_client(): return object()\n",
    1: "",
    3: "",
    4: "MyAgent.call_tool = lambda self, *a: self.memory.append('tool')\nimport os; os.makedirs('sandbox', exist_ok=True)\n",
    5: "",
}


def test_python_api_blocks_in_one_process(tmp_path: Path) -> None:
    """docs/PYTHON_API.md's Python blocks, in order, in one process (as a reader's script). The page's
    `agent`/`state` after the class are made (agent = MyAgent()); the glue above is all that is added."""
    parts = ["import agentsnap_core\n"]
    for i in (0, 1, 3, 4, 5):
        text = block("PYTHON_API.md", i)
        if i == 0:
            cls, uses = text.split("\nagent.state_dict()", 1)
            text = cls + "\nagent = MyAgent()\nstate = agent.state_dict()\nagent.state_dict()" + uses
        parts += [PYTHON_API_GLUE[i], text]
    parts.append("print('tool' in agent.memory, rb.rolled_back, rb.snapshot is not None, Worker().step('t'))\n")
    work = new_work(tmp_path)
    proc = subprocess.run([sys.executable, "-c", "\n".join(parts)], cwd=work, env=_env(), capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split()[-4:] == ["True", "False", "True", "None"], proc.stdout


def test_stores_remote_block(tmp_path: Path, combined_url: str) -> None:
    """docs/STORES.md's push/fetch/pull/clone block against real servers: the team remote's
    'postgresql://me:pw@db/agents?objects=s3://snaps/team' becomes a fresh combined PostgreSQL + SeaweedFS store,
    and the clone line clones that same team store (the page's s3:// URL stands for it)."""
    work = new_work(tmp_path)
    (work / "a.txt").write_text("one\n")
    sh("agentsnap snapshot -m one", work)
    run = commands(block("STORES.md", 0))
    assert len(run) == 7 and run[4].startswith("agentsnap clone s3://")
    assert run[6] == "agentsnap push team --delete attempt-1 attempt-2"
    run[0] = f"agentsnap remote add team '{combined_url}'"
    run[4] = f"agentsnap clone '{combined_url}' ./copy"
    for i, line in enumerate(run):
        if i == 6:  # (the branches it deletes: two forks pushed first)
            sh("agentsnap fork -n 2 && agentsnap push team attempt-1 attempt-2", work)
        sh(line, work)
    assert (work / "copy" / "a.txt").read_text() == "one\n"
    fetched = json.loads(sh("agentsnap fetch team --json", work))
    assert not any("attempt" in ref for ref in [*fetched["updated"], *fetched["up_to_date"]]), fetched
    from urllib.parse import urlsplit

    listed = sh("agentsnap remote list", work)  # "Passwords ... are replaced by *** in ... remote list"
    assert "team" in listed and "***" in listed and urlsplit(combined_url).password not in listed, listed
    again = json.loads(sh("agentsnap push team --json", work))  # "A second push of the same work copies 0 objects"
    assert again["objects"] == 0 and again["up_to_date"] == ["refs/heads/main"], again


def test_ui_blocks(tmp_path: Path) -> None:
    """docs/UI.md's two blocks. The demo store is made as shown (its /tmp/ui-demo under the test's temp dir) and
    served as the first block's third line says (`--port 8765 --no-open`, the port replaced by a free one so that
    parallel runs cannot meet), until Ctrl-C. Not run here: `pip install "agentsnap-core[ui]"` (this session
    installed core; `nox -s dist` installs from wheels) and the plain `agentsnap ui`, which also opens a browser
    (the page in a real headless browser: core/tests/test_ui_browser.py)."""
    import http.client
    import signal

    from agentsnap_core.testing.servers import free_port

    install, plain, fixed = commands(block("UI.md", 0))
    assert install.startswith("pip install ") and plain == "agentsnap ui"
    assert fixed == "agentsnap ui --port 8765 --no-open"
    make, serve = block("UI.md", 1).strip().split(" && ")
    assert serve == "agentsnap -C /tmp/ui-demo ui"
    demo = tmp_path / "ui-demo"
    sh(make.replace("/tmp/ui-demo", str(demo)), tmp_path)
    assert json.loads(sh(f"agentsnap -C {demo} log --all --json", tmp_path)).__len__() >= 5

    port = free_port()
    line = serve.replace("/tmp/ui-demo", str(demo)) + fixed.removeprefix("agentsnap ui").replace("8765", str(port))
    proc = subprocess.Popen(["bash", "-c", f"exec {line}"], cwd=tmp_path, env=_env(PYTHONUNBUFFERED="1"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline()
        m = re.fullmatch(rf"agentsnap ui: http://127\.0\.0\.1:{port}/\?token=([A-Za-z0-9_-]+)\n", url)
        assert m, url
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        conn.request("GET", f"/api/refs?token={m[1]}")
        resp = conn.getresponse()
        assert resp.status == 200 and "main" in json.loads(resp.read())["branches"]
        conn.close()
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0 and "Traceback" not in err, err


def test_sketches_not_run_parse_and_name_only_what_agentsnap_core_has() -> None:
    """The Python sketches in NOT_RUN_HERE are at least valid Python, and every agentsnap_core name they import
    or use as `module.name` exists (a renamed function makes the page wrong even where the reader fills the gaps)."""
    import ast
    import importlib

    for key in NOT_RUN_HERE:
        text = block(*key)
        tree = ast.parse(text, filename=f"docs/{key[0]} block {key[1]}")
        modules = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("agentsnap_core"):
                mod = importlib.import_module(node.module)
                for alias in node.names:
                    if not hasattr(mod, alias.name):
                        importlib.import_module(f"{node.module}.{alias.name}")  # a submodule, or ImportError
                    modules[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        if key == ("SECURITY.md", 1):  # continues the previous block: `crypto` from there
            modules["crypto"] = "agentsnap_core.format.crypto"
            modules["remote"] = "agentsnap_core.operations.remote"
        if key == ("MERGE.md", 2):  # continues the Python section: `merge` from there
            modules["merge"] = "agentsnap_core.operations.merge"
        used = [(n.value.id, n.attr) for n in ast.walk(tree)
                if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id in modules]
        for name, attr in used:
            target = modules[name]
            try:
                obj = importlib.import_module(target)
            except ImportError:
                obj = getattr(importlib.import_module(target.rpartition(".")[0]), target.rpartition(".")[2])
            if isinstance(obj, type):
                continue  # attributes of an instance (res.status...) are not checked here
            assert hasattr(obj, attr), f"docs/{key[0]}: {target}.{attr} does not exist"
        assert used or modules, key
