"""The hook's first step, plugin/hooks/agentsnap_quick.py (issue 20, item 5: a harmless call costs a bare start).

Through the plugin's real hook command (hooks.json, JSON on stdin): a harmless call is answered by the
interpreter started without ``site`` and without importing json, re, pathlib or anything of agentsnap
(the interpreter's own import log, ``PYTHONPROFILEIMPORTTIME``, is the witness); anything the shortcut
cannot vouch for goes on to the helper's matcher and snapshots exactly as before. The shortcut never calls
harmless what the matcher calls destructive.
"""

from __future__ import annotations

import json
import os
import subprocess
import types
from pathlib import Path

import pytest
from agentsnap_claude_code.install import helper_command, plugin_root
from agentsnap_claude_code.matcher import Matcher
from conftest import helper_env, payload, run_plugin_hook
from test_matcher import TABLE

QUICK = plugin_root() / "hooks" / "agentsnap_quick.py"
quick = types.ModuleType("agentsnap_quick")  # executed, not imported: no __pycache__ inside the plugin folder
quick.__file__ = str(QUICK)
exec(compile(QUICK.read_text(encoding="utf-8"), str(QUICK), "exec"), quick.__dict__)

HEAVY = ("site", "re", "json", "pathlib", "shlex", "typing", "agentsnap_claude_code", "agentsnap_core")


def _imports(stderr: str) -> set[str]:
    """Modules the hook's Python imported, from its import-time log."""
    return {line.split("|")[-1].strip() for line in stderr.splitlines() if line.startswith("import time:") and "|" in line} - {"imported package"}


def _hook_imports(project: Path, transcript: Path, event: str, **extra: object) -> tuple[set[str], dict]:
    proc, out = run_plugin_hook(project, transcript, event, env=helper_env(PYTHONPROFILEIMPORTTIME="1"), **extra)
    return _imports(proc.stderr), out


@pytest.mark.parametrize(
    "extra",
    [
        {"tool_name": "Bash", "tool_input": {"command": "ls -la src && git status"}},
        {"tool_name": "Bash", "tool_input": {"command": "cd src && grep -rn 'print(' . | head -20 2>/dev/null"}},
        {"tool_name": "Bash", "tool_input": {"command": "git --no-pager log --oneline -5; git diff --stat"}},
        {"tool_name": "Write", "tool_input": {"file_path": "src/new.py", "content": "x = 1\n"}},
        {"tool_name": "Read", "tool_input": {"file_path": "src/app.py"}},
    ],
    ids=["ls+git-status", "cd+grep|head", "git-log;git-diff", "write-new-file", "read"],
)
def test_a_harmless_call_is_answered_without_site_json_re_or_agentsnap(project: Path, transcript: Path, extra: dict) -> None:
    imported, out = _hook_imports(project, transcript, "PreToolUse", **extra)
    assert out == {}
    assert imported and not {m.split(".")[0] for m in imported} & set(HEAVY), sorted(imported)
    assert not (project / ".agentsnap").exists()


def test_a_harmless_command_the_shortcut_does_not_know_goes_to_the_matcher_without_the_core(project: Path, transcript: Path) -> None:
    imported, out = _hook_imports(project, transcript, "PreToolUse", tool_name="Bash", tool_input={"command": "docker compose ps"})
    assert out == {} and "agentsnap_claude_code.matcher" in imported and "site" in imported
    assert not any(m.startswith("agentsnap_core") for m in imported)


def test_a_destructive_call_goes_through_the_full_hook_and_snapshots(project: Path, transcript: Path) -> None:
    imported, out = _hook_imports(project, transcript, "PreToolUse", tool_name="Bash", tool_input={"command": "rm -rf src"}, tool_use_id="toolu_q1")
    assert "agentsnap_core" in {m.split(".")[0] for m in imported}
    assert "undo with: agentsnap-claude-code restore" in out["systemMessage"]


def test_an_edit_of_an_existing_file_is_snapshotted(project: Path, transcript: Path) -> None:
    _, out = _hook_imports(project, transcript, "PreToolUse", tool_name="Write", tool_input={"file_path": "src/app.py", "content": "x\n"})
    assert out == {}
    assert (project / ".agentsnap").exists()  # the link to the store: a snapshot was taken


def test_a_settings_file_makes_the_shortcut_defer_to_the_helper(project: Path, transcript: Path) -> None:
    """`extra_patterns` can make even `ls` destructive: with any settings file the shortcut judges nothing."""
    (project / ".claude").mkdir()
    (project / ".claude" / "agentsnap.json").write_text(json.dumps({"extra_patterns": [r"^ls\b"]}))
    (project / "src" / "deep").mkdir()
    imported, out = _hook_imports(project / "src" / "deep", transcript, "PreToolUse", tool_name="Bash", tool_input={"command": "ls -la"}, tool_use_id="toolu_q2")
    assert "snapshot" in out["systemMessage"] and "agentsnap_core" in {m.split(".")[0] for m in imported}


TRICKY = [
    "ls $(rm -rf x)", "ls `rm x`", 'ls "$(rm x)"', "ls 'a'\"$(rm x)\"", "ls > existing.txt", "cat a >> b", "ls 2>existing.txt",
    "ls\nrm x", "ls & rm x", "ls&&rm x", "echo hi; rm x", "ls && rm -rf x", "ls || rm x", "ls | xargs rm", "FOO=1 rm x", '"rm" -rf x',
    "cd /; rm -rf *", "(rm x)", "{ rm x; }", "ls {a,b}", "cat <<EOF\nx\nEOF", "ls \\$(rm)", "ls;", "git branch -D x", "git branch -m a b",
    "git diff --output=x", "git log --output x", "git -c core.pager=rm log", "git stash drop", "git checkout .", "git reset --hard",
    "git clean -fdx", "git", "find . -delete", "find . -exec rm {} +", "find . -execdir rm {} ;", "find . -fprint out", "find . -ok rm {} ;",
    "sort -o out in", "sort -uo out in", "sort --output=out in", "uniq a b", "tree -o out", "rg --pre rm x", "rg --pre=rm x", "bash -c 'ls'",
    "sudo ls", "env ls", "xargs ls", "/bin/ls", "l* -la", "ls\t-la", "echo café > x", "python3 -c 'print(1)'", "awk 1 x",
    "pytest --basetemp=build", "python -m pytest --basetemp build", "python -m pip install x", "python script.py", "cargo fmt", "cargo",
    "go fmt ./...", "go build -o existing.txt", "go test -o existing.txt", "npm run format", "npm install", "make clean", "cp a b",
    "sed -n 1p -i x", "sed -i -n 1p x", "sed -n '1w out' x", "sed -n 's/a/b/p' x", "sed -n '1e rm x' x", "sed -n p x", "sed 10p x",
    "git grep -O rm x", "git grep --open-files-in-pager=rm x",
    # the runners, package managers and git verbs the shortcut knows, with what makes them write
    "make", "make clean", "make test clean", "make install", "make distclean", "make test DESTDIR=/", "make -C sub test", "make -f x.mk test",
    "make format", "make lint", "mvn test clean", "mvn clean test", "gradle test clean", "./gradlew clean", "dotnet clean",
    "npm run lint", "npm run format", "npm run fix", "npm run build -- --watch", "npm run", "npm test -- -u", "npm test -- --updateSnapshot",
    "npm ci", "npm install", "npm uninstall x", "npm prune", "yarn", "yarn add x", "yarn format", "pnpm install", "pnpm run lint",
    "npx prettier --write .", "npx rimraf dist", "npx --yes rm x", "npx", "uv run make clean", "uv run --with x pytest", "uv sync",
    "poetry run black .", "timeout 60 rm -rf x", "timeout -s KILL 5 rm x", "time rm x", "time", "timeout 60",
    "cargo clippy --fix", "cargo clean", "cargo build --out-dir=x", "cargo doc -o x", "go env -w GOFLAGS=x", "go mod tidy", "go clean",
    "go generate ./...", "go build", "go install ./...", "pip install x", "pip uninstall -y x", "pip3 download x", "python -m pip install x",
    "python -m black .", "python -m pytest --junitxml=r.xml", "pytest --junit-xml=r.xml", "pytest -o cache_dir=/x", "pytest --cov-report=html:x",
    "pytest --snapshot-update", "mypy --junit-xml out.xml src", "mypy --html-report out src", "mypy --install-types", "flake8 --output-file x",
    "flake8 --tee x", "pylint --output=x src", "eslint --fix src", "eslint -o out src", "eslint --output-file out src", "tsc", "tsc -p .",
    "tsc --noEmit --outDir x", "jest -u", "jest --updateSnapshot", "vitest -u", "vitest --update", "deno lint --fix", "deno fmt",
    "tox -e py --installpkg x", "git tag v1", "git tag -d v1", "git tag -a v1 -m x", "git stash", "git stash pop", "git stash drop",
    "git stash clear", "git stash push", "git remote add o u", "git remote remove o", "git remote set-url o u", "git reflog expire --all",
    "git reflog delete HEAD@{1}", "git config user.name x", "git config --unset x", "git config --add x y", "git config", "rm --version",
    "deploy.sh --version", "./deploy --version", "python -v", "python --version x", "dotnet test clean",
    # sessions the project names: `nox -s blacken` formats, `tox -e fix` fixes (the helper reads noxfile / tox.ini)
    "tox -e py311", "nox -s lint", "nox -s blacken", "tox -e fix", "nox", "tox", "uv run nox -s format",
    "file -C -m magic", "file --compile -m magic", "file -zC -m magic",
]


@pytest.mark.parametrize("command", [c for c, rule in TABLE if rule] + TRICKY)
def test_the_shortcut_never_vouches_for_a_destructive_or_unclear_command(command: str) -> None:
    assert not quick.harmless_command(command)


READ_ONLY = [
    "ls -la", "ls -la src && git status", "cat README.md | head -50", "grep -rn 'rm -rf' docs/", 'grep -i "drop table" migrations/*.sql',
    "echo 'rm -rf /'", 'echo "rm -rf"', "git log --oneline -5", "git status && git diff", "git --no-pager diff HEAD~1 --stat",
    "git -C sub log -3", "git branch", "git branch -a", "git show HEAD:src/app.py", "find . -name '*.py' -type f", "wc -l src/*.py",
    "cd src && ls", "pwd", "rg -n TODO src", "sort data.txt | uniq -c", "du -sh . 2>/dev/null", "tree -L 2", "jq .name package.json",
    "which python3 2>&1", "diff a.txt b.txt", "stat -c %s README.md", "head -c 100 x; tail -n 5 y", "git rev-parse --show-toplevel",
    "python -m pytest -q", "python3 -m pytest tests/test_x.py -k name 2>&1 | tail -20", "pytest -x", "cargo test --release", "cargo check",
    "go test ./...", "go vet ./...", "npm test", "mkdir -p build/out", "touch existing.txt",
    "sed -n '1,80p' src/app.py", "sed -n 10p existing.txt", "sed -n '5,$p' a b", "git grep -n TODO -- src",
    # build, test and lint runs, package managers' read-only verbs, more read-only git
    "make test", "make -j4 check", "make -j 4 test build", "make -k -s tests", "mvn -q test", "mvn verify", "gradle test", "./gradlew check",
    "dotnet test", "npm run build", "npm run test", "npm run typecheck", "npm test -- --ci", "npm ls", "npm outdated", "yarn test", "yarn build",
    "pnpm test", "bun test", "deno test", "npx jest", "npx vitest run", "uv run pytest -q", "poetry run pytest", "uv run python -m pytest -x",
    "timeout 600 make test", "time cargo test", "cargo build --release", "cargo clippy", "cargo tree", "go list ./...", "go env GOPATH",
    "go version", "pip list", "pip show requests", "pip3 freeze", "python -m pip list", "python -m mypy src", "mypy src", "pyright",
    "flake8 src", "pylint src", "eslint src", "tsc --noEmit", "tsc --noEmit -p .", "jest", "vitest run", "mocha",
    "ctest", "rspec", "python --version", "python3 -V", "node --version", "git --version", "cargo --version", "git tag", "git tag -l",
    "git stash list", "git stash show -p", "git remote -v", "git remote", "git remote get-url origin", "git config --get user.email",
    "git config --list", "git reflog", "git reflog show", "git cat-file -p HEAD", "git ls-tree HEAD", "git rev-list --count HEAD",
    "git merge-base HEAD main", "git for-each-ref", "git show-ref", "git count-objects -v", "git check-ignore -v build", "date",
    "sha256sum README.md", "file src/app.py", "hostname", "nproc", "seq 1 5", "cat a | sort | uniq -c | sort -rn | head",
]


@pytest.mark.parametrize("command", READ_ONLY)
def test_what_the_shortcut_calls_harmless_the_matcher_does_too(command: str, tmp_path: Path) -> None:
    (tmp_path / "existing.txt").write_text("keep me\n")
    assert quick.harmless_command(command)
    assert Matcher(cwd=str(tmp_path)).findings(command) == []


def test_the_shortcut_reads_the_hook_json_or_leaves_it_to_the_helper() -> None:
    assert quick.parse(' {"tool_name": "Bash", "tool_input": {"command": "ls \\u00e9"}, "n": 1.5}\n') == {
        "tool_name": "Bash", "tool_input": {"command": "ls é"}, "n": 1.5
    }
    for bad in ("", "[]", "{", '{"a": NaN}', '{"a": 1} x', "not json"):
        assert quick.parse(bad) is None


def test_the_hook_command_that_install_writes_takes_the_same_shortcut(project: Path, transcript: Path) -> None:
    """`agentsnap-claude-code install` names the helper's Python in AGENTSNAP_HOOK_HELPER (no console script on PATH)."""
    env = {**helper_env(PYTHONPROFILEIMPORTTIME="1"), "PATH": "/usr/bin:/bin"}
    assert not any(os.access(os.path.join(d, "agentsnap-claude-code-hook"), os.X_OK) for d in env["PATH"].split(":"))

    def run(command: str, **extra: object) -> tuple[set[str], str]:
        proc = subprocess.run(f"{helper_command()} PreToolUse", shell=True, input=payload(project, transcript, "PreToolUse", tool_name="Bash", tool_input={"command": command}, **extra),
                              capture_output=True, text=True, env=env, cwd=project, timeout=300)
        assert proc.returncode == 0, proc.stderr
        return _imports(proc.stderr), proc.stdout

    imported, out = run("git status")
    assert out == "" and imported and "site" not in imported
    imported, out = run("rm -rf src", tool_use_id="toolu_q3")
    assert "site" in imported and "undo with: agentsnap-claude-code restore" in json.loads(out)["systemMessage"]


def test_a_broken_helper_behind_the_shortcut_still_makes_a_destructive_command_ask(project: Path, transcript: Path, tmp_path: Path) -> None:
    """The helper's package fails to import (shadowed by a broken one on PYTHONPATH): harmless calls pass, rm asks."""
    broken = tmp_path / "broken" / "agentsnap_claude_code"
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text("raise ImportError('half-upgraded install')\n")
    env = helper_env(PYTHONPATH=str(broken.parent))
    _, out = run_plugin_hook(project, transcript, "PreToolUse", env=env, tool_name="Bash", tool_input={"command": "git status"})
    assert out == {}
    proc, out = run_plugin_hook(project, transcript, "PreToolUse", env=env, tool_name="Bash", tool_input={"command": "rm -rf src"})
    spec = out["hookSpecificOutput"]
    assert spec["permissionDecision"] == "ask" and "exit status 1" in spec["permissionDecisionReason"]
    assert "half-upgraded install" in proc.stderr


def test_what_the_shortcut_calls_harmless_the_matcher_does_too_on_random_commands(tmp_path: Path) -> None:
    """Thousands of commands built from the shortcut's own vocabulary and the options that make commands write."""
    import random

    (tmp_path / "existing.txt").write_text("keep me\n")
    names = sorted({*quick._READ_ONLY, *quick._RUNS, *quick._WRAPPERS, *quick._VERSION_OF, "git", "python", "python3", "pytest", "rg",
                    "sort", "uniq", "tree", "find", "sed", "mkdir", "touch", "timeout", "tsc", "rm", "mv", "cp", "tee", "curl", "tar"})
    verbs = sorted({v for vs in quick._RUNS.values() for v in vs} | quick._GIT_READ_ONLY | set(quick._GIT_LISTS) | quick._RUN_SCRIPTS)
    extra = ["run", "exec", "-m", "pytest", "pip", "mypy", "--", "-j", "4", "-j4", "60", "clean", "install", "fmt", "format", "-delete",
             "-exec", "--fix", "--write", "-w", "-o", "out", "-u", "--update", "-i", "-n", "1p", "10,20p", "existing.txt", "new.txt", "src/",
             "--version", "-V", "-l", "--list", "--get", "list", "show", "-v", "drop", "pop", "-D", "-rf", ".", "--noEmit", "X=1", "-C", "sub",
             "--output=existing.txt", "--basetemp=x", "--junitxml=r.xml", "-p", "--hard", "--", "s/a/b/", "origin", "v1"]
    joins = [" ", " && ", " ; ", " | ", " || "]
    matcher = Matcher(cwd=str(tmp_path))
    rng = random.Random(20)
    vouched = 0
    for _ in range(4000):
        parts = []
        for _ in range(rng.choice((1, 1, 1, 2))):
            words = [rng.choice(names)] + [rng.choice(verbs if rng.random() < 0.5 else extra) for _ in range(rng.randint(0, 4))]
            parts.append(" ".join(words))
        command = parts[0] if len(parts) == 1 else rng.choice(joins[1:]).join(parts)
        if quick.harmless_command(command):
            vouched += 1
            assert matcher.findings(command) == [], command
    assert vouched > 300  # the test does reach the shortcut's yes-answers
