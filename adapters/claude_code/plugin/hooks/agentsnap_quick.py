"""The hook's first step, run by ``agentsnap-hook`` as ``PYTHON -S agentsnap_quick.py EVENT`` (hook JSON on stdin).

It answers the calls that are certainly harmless at the cost of a bare interpreter start: no ``site``
(``-S``), and no module beyond what the interpreter has already loaded (no json, re, shlex, pathlib;
the JSON is read with the C scanner the json package itself uses). Certainly harmless means: no
agentsnap settings file applies, and the call is a read-only shell command from a short list
(``ls``, ``cat``, ``grep``, ``git status`` ...) or a test run (``pytest``, ``cargo test``, ``go test``,
``npm test``) written without expansions or redirections, a Write/Edit of a file that does not exist
yet, or a tool the hook does not watch. MCP tools (``mcp__server__tool``) always go on: the helper judges them.

Anything else goes on, in the same process, to the helper's own entry point
(``agentsnap_claude_code.gate``: the full matcher and the settings, still without agentsnap_core;
the core only when a snapshot is due), after ``site`` has been set up as a normal start would.
Only a conservative shortcut lives here: the helper's matcher stays the one judge of what is destructive.
"""

import os
import sys

EDIT_TOOLS = ("Write", "Edit", "NotebookEdit")
CONFIG_NAME = "agentsnap.json"

# characters a word may hold outside quotes (globs included: they only name files for read-only commands)
_SAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./=:,+@%^~*?")
# redirections that write nothing the project could lose
_REDIRECTS = ("2>&1", "1>&2", ">&2", "2>/dev/null", ">/dev/null", "1>/dev/null", "&>/dev/null", "</dev/null")
# read-only whatever their arguments (none writes a file or runs another command)
_READ_ONLY = frozenset(
    "cd pwd ls cat head tail wc echo printf grep egrep fgrep which type stat du df whoami uname printenv true false"
    " cmp diff basename dirname realpath readlink id nl cut tr jq date hostname nproc uptime sleep"
    " sha256sum sha1sum sha512sum md5sum cksum b2sum od hexdump strings column fold rev paste comm seq expr".split()
)
_GIT_READ_ONLY = frozenset(
    "status log diff show rev-parse ls-files blame describe shortlog cat-file ls-tree rev-list merge-base name-rev"
    " show-ref for-each-ref count-objects check-ignore whatchanged version".split()
)
# read-only only with these exact first arguments (git tag/stash/remote/config/reflog write with others)
_GIT_LISTS = {"stash": (("list",), ("show",)), "remote": ((), ("-v",), ("show",), ("get-url",)), "tag": ((), ("-l",), ("--list",)),
              "reflog": ((), ("show",)), "config": (("--get",), ("--list",), ("-l",), ("--get-all",), ("--show-origin", "--list"))}
# test, build and check runs, taken to write build and test output only, with the first argument from this list;
# options that write a named file or fix sources are refused. Taken on trust: the helper's matcher reads the recipes
# of other make goals and the package.json scripts other `npm run X` name, but not these (the README says so).
# Not here: nox and tox, whose sessions are named by the project (`nox -s blacken` formats): the helper reads them
_RUNS = {
    "cargo": ("test", "check", "build", "clippy", "bench", "doc", "tree", "metadata"), "go": ("test", "vet", "list", "env", "version", "doc"),
    "npm": ("test", "t", "ls", "list", "outdated", "view", "explain", "why"), "yarn": ("test", "build", "why", "list", "info"),
    "pnpm": ("test", "t", "ls", "list", "outdated", "why"), "bun": ("test",), "deno": ("test", "check", "lint"),
    "make": ("test", "tests", "check", "build", "all", "typecheck"), "pip": ("list", "show", "freeze", "check"), "pip3": ("list", "show", "freeze", "check"),
    "mvn": ("test", "verify", "compile"), "gradle": ("test", "check", "build"), "./gradlew": ("test", "check", "build"),
    "dotnet": ("test", "build"), "ctest": (), "jest": (), "vitest": (), "mocha": (), "rspec": (),
    "mypy": (), "pyright": (), "flake8": (), "pylint": (), "eslint": (),
}
# runners whose every operand is a goal run in order (`mvn test clean` cleans): each must be on the list
_GOALS = frozenset(("make", "mvn", "gradle", "./gradlew", "dotnet"))
# `npm run X` and the like: scripts whose usual job is to check or build (lint and format scripts often fix files)
_RUN_SCRIPTS = frozenset("test tests build typecheck type-check check compile".split())
# options that write a file they name, fix or update sources, or run something else, whoever takes them
_WRITES = ("-o", "--o", "-u", "--update", "--fix", "--write", "--junit", "--tee", "--basetemp", "--report", "--html", "--xml",
           "--cov-report", "--emit", "--install", "--exec", "--pre", "--snapshot", "-w", "--watch", "--outdir", "--out-dir", "--outfile")
# wrappers that run the command after them as it is (`uv run pytest`, `npx jest`, `timeout 60 make test`)
_WRAPPERS = {"uv": ("run",), "poetry": ("run",), "pdm": ("run",), "hatch": ("run",), "pnpm": ("exec",), "npx": (), "bunx": (), "time": ()}
_VERSION_OF = frozenset("python python3 node npm npx yarn pnpm bun deno cargo rustc go java javac gcc g++ clang make cmake pip pip3 uv poetry ruby gem git docker".split())
_GIT_BRANCH_LIST = frozenset("-a -v -vv -r -l --all --list --remotes --verbose --show-current --no-color".split())
_FIND_ACTIONS = ("-delete", "-exec", "-ok", "-fprint", "-fls")


def _scan(command):
    """The simple commands of ``command`` as word lists, or None when it is not plain enough to judge here."""
    commands = [[]]
    word = None
    i, n = 0, len(command)
    while i < n:
        c = command[i]
        if c == " ":
            if word is not None:
                commands[-1].append(word)
                word = None
            i += 1
        elif c == "'" or c == '"':
            end = command.find(c, i + 1)
            if end < 0:
                return None
            text = command[i + 1 : end]
            if "\n" in text or (c == '"' and ("$" in text or "`" in text or "\\" in text or "!" in text)):
                return None
            word = (word or "") + text
            i = end + 1
        elif c in ";|" or command.startswith("&&", i):
            if word is not None:
                commands[-1].append(word)
                word = None
            i += 2 if command.startswith(("&&", "||"), i) else 1
            commands.append([])
        else:
            if word is None:
                for r in _REDIRECTS:
                    after = i + len(r)
                    if command.startswith(r, i) and (after == n or command[after] in " ;|"):
                        i = after
                        break
                else:
                    r = None
                if r is not None:
                    continue
            if c not in _SAFE:
                return None
            word = (word or "") + c
            i += 1
    if word is not None:
        commands[-1].append(word)
    return commands


def _read_only(words):
    name, args = words[0], words[1:]
    if name in _READ_ONLY:
        return True
    if name == "rg":
        return not any(a.startswith("--pre") for a in args)
    if name == "file":  # -C compiles the magic file named into NAME.mgc, over one that exists
        return not any(a == "--compile" or a.startswith("-") and not a.startswith("--") and "C" in a for a in args)
    if name == "sort":  # -o FILE writes
        return not any(a.startswith("--o") or (a.startswith("-") and not a.startswith("--") and "o" in a) for a in args)
    if name == "uniq":  # a second file operand is written
        return all(a.startswith("-") for a in args)
    if name == "tree":  # -o FILE writes
        return not any(a.startswith("-o") for a in args)
    if name == "find":
        return not any(a.startswith(_FIND_ACTIONS) for a in args)
    if name == "sed":  # only `sed -n 'N,Mp' FILE...`: a sed script can write (w, -i) or run commands (e)
        return args[:1] == ["-n"] and len(args) >= 2 and _line_range(args[1]) and not any(a.startswith("-") for a in args[2:])
    if name in ("mkdir", "touch"):  # create, never overwrite content
        return True
    if name in ("python", "python3") and args[:2] in (["-m", "pytest"], ["-m", "pip"], ["-m", "mypy"]):
        name, args = args[1], args[2:]
    if name == "timeout" and len(args) > 1 and args[0].isdigit():
        return _read_only(args[1:])
    if name in _WRAPPERS and args[: len(_WRAPPERS[name])] == list(_WRAPPERS[name]) and len(args) > len(_WRAPPERS[name]):
        rest = args[len(_WRAPPERS[name]) :]
        return not rest[0].startswith("-") and _read_only(rest)
    if name in _VERSION_OF and args in (["--version"], ["-V"]):
        return True
    if name in ("npm", "yarn", "pnpm", "bun") and args[:1] == ["run"]:
        return len(args) == 2 and args[1] in _RUN_SCRIPTS
    if name == "tsc":  # compiles next to the sources unless told to emit nothing
        return "--noEmit" in args and not any(a.startswith(_WRITES) for a in args)
    if name == "pytest" or name in _RUNS:
        if any(a.startswith(_WRITES) or "=" in a and not a.startswith("-") for a in args):
            return False
        verbs = _RUNS.get(name, ())
        if not verbs:
            return True
        if name not in _GOALS:
            return bool(args) and args[0] in verbs
        while args and args[0] in ("-k", "-s", "-q", "--keep-going", "--silent", "--quiet", "-j"):  # make -j 4 test, mvn -q test
            args = args[2:] if args[0] == "-j" and args[1:2] and args[1].isdigit() else args[1:]
        return bool(args) and all(a in verbs or name == "make" and a[:2] == "-j" and a[2:].isdigit() for a in args)
    if name == "git":
        while args[:1] == ["--no-pager"] or args[:1] == ["-C"]:
            args = args[1:] if args[0] == "--no-pager" else args[2:]
        if not args or any(a.startswith("--output") for a in args):
            return False
        if args[0] == "grep":  # -O / --open-files-in-pager runs a program
            return not any(a.startswith(("-O", "--open")) for a in args)
        if args[0] == "branch":
            return all(a in _GIT_BRANCH_LIST for a in args[1:])
        if args[0] in _GIT_LISTS:
            return any(tuple(args[1 : 1 + len(form)]) == form and (form or len(args) == 1) for form in _GIT_LISTS[args[0]])
        return args[0] in _GIT_READ_ONLY
    return False


def _line_range(script):
    """True for a sed script that only prints lines: ``10p``, ``1,50p``, ``5,$p``."""
    body = script[:-1]
    return script.endswith("p") and body != "" and all(c in "0123456789,$" for c in body) and body.count(",") <= 1


def harmless_command(command):
    """True only for a command line certainly without effect on files (the full matcher judges the rest)."""
    commands = _scan(command)
    if not commands:
        return False
    for words in commands:
        if not words or "=" in words[0] or not _read_only(words):
            return False
    return True


def _settings_apply(cwd):
    """True when an agentsnap settings file could apply to a project holding ``cwd`` (the user's or any parent's)."""
    config = os.path.expanduser(os.environ.get("CLAUDE_CONFIG_DIR") or os.path.join("~", ".claude"))
    if os.path.exists(os.path.join(config, CONFIG_NAME)):
        return True
    d = os.path.realpath(cwd)
    while True:
        if os.path.exists(os.path.join(d, ".claude", CONFIG_NAME)):
            return True
        parent = os.path.dirname(d)
        if parent == d:
            return False
        d = parent


class _Strict:
    strict = True
    object_hook = object_pairs_hook = None
    parse_float, parse_int = float, int
    memo = {}

    @staticmethod
    def parse_constant(name):
        raise ValueError(name)


def parse(text):
    """The hook's JSON object, or None when it cannot be read here (the full entry point reports bad input)."""
    try:
        from _json import make_scanner
    except ImportError:
        return None
    start = len(text) - len(text.lstrip())
    try:
        value, end = make_scanner(_Strict())(text, start)
    except Exception:  # noqa: BLE001 - StopIteration or a decode error: not for the shortcut to judge
        return None
    return value if isinstance(value, dict) and not text[end:].strip() else None


def harmless(payload):
    """True when the hook certainly has nothing to do for this call."""
    if payload.get("hook_event_name") != "PreToolUse":
        return False
    cwd = payload.get("cwd") or os.getcwd()
    tool_input = payload.get("tool_input")
    if not isinstance(cwd, str) or not isinstance(tool_input, dict) or _settings_apply(cwd):
        return False
    tool = payload.get("tool_name")
    if tool == "Bash":
        command = tool_input.get("command")
        return isinstance(command, str) and harmless_command(command)
    if tool in EDIT_TOOLS:
        target = tool_input.get("file_path") or tool_input.get("notebook_path")
        return isinstance(target, str) and not os.path.lexists(os.path.join(cwd, target))  # a new file: nothing to lose
    if isinstance(tool, str) and tool.startswith("mcp__"):  # judged by the helper (agentsnap_claude_code.mcptools)
        return False
    return isinstance(tool, str)  # a tool the hook does not watch


# ---------------------------------------------------------------- the warm helper (agentsnap_claude_code.daemon)
PROTOCOL = 1  # the same as agentsnap_claude_code.daemon.PROTOCOL (and run_dir, socket_name: a test holds them together)
MAGIC = b"AGSNAP%d" % PROTOCOL


def run_dir():
    d = os.environ.get("AGENTSNAP_HOOK_RUN_DIR")
    if not d:
        rt = os.environ.get("XDG_RUNTIME_DIR")
        d = os.path.join(rt, "agentsnap") if rt else f"/tmp/agentsnap-{os.getuid()}"
    return d


def socket_name(executable=None):
    h = 0xCBF29CE484222325
    for b in os.fsencode(executable or sys.executable):
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"hook-{h:016x}-p{PROTOCOL}.sock"


def _private(d):
    try:
        st = os.lstat(d)
    except OSError:
        return False
    return st.st_mode & 0o170000 == 0o040000 and st.st_uid == os.getuid() and st.st_mode & 0o077 == 0


def ask_helper(text, event):
    """``(exit status, stdout, stderr)`` from the warm helper process, or None when it cannot answer this call.

    None (missing, dead, stale, another user's socket folder, killed mid-call, past the time limit) sends
    the call to the in-process path, which snapshots or asks as it always did.
    """
    if os.environ.get("AGENTSNAP_HOOK_DAEMON", "1") == "0":
        return None
    d = run_dir()
    if not _private(d):
        return None
    try:
        import _socket
    except ImportError:
        return None
    name = socket_name()
    try:
        s = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    except OSError:
        return None
    try:
        s.settimeout(float(os.environ.get("AGENTSNAP_HOOK_DAEMON_TIMEOUT") or 48))
        path = os.path.join(d, name)
        if len(os.fsencode(path)) < 100:
            s.connect(path)
        else:  # a socket path has a length limit: connect by the name relative to its folder
            here = os.open(".", os.O_RDONLY)
            try:
                os.chdir(d)
                s.connect(name)
            finally:
                os.fchdir(here)
                os.close(here)
        try:
            cwd = os.getcwd()
        except OSError:
            cwd = "/"
        env = b"\0".join(os.fsencode(k) + b"=" + os.fsencode(v) for k, v in os.environ.items())
        s.sendall(b"\0".join([MAGIC, os.fsencode(event or ""), os.fsencode(cwd), env]) + b"\0\0" + text.encode("utf-8", "surrogateescape"))
        s.shutdown(_socket.SHUT_WR)
        chunks = []
        while True:
            b = s.recv(65536)
            if not b:
                break
            chunks.append(b)
    except (OSError, ValueError):
        return None
    finally:
        s.close()
    data = b"".join(chunks)
    head = data.split(b"\0", 4)
    if len(head) != 5 or head[0] != MAGIC or not data.endswith(b"END"):
        return None  # stale, garbled or cut short
    try:
        code, n_out, n_err = int(head[1]), int(head[2]), int(head[3])
    except ValueError:
        return None
    body = head[4]
    if len(body) != n_out + n_err + 3:
        return None
    return code, body[:n_out].decode("utf-8", "surrogateescape"), body[n_out : n_out + n_err].decode("utf-8", "surrogateescape")


def main():
    text = sys.stdin.read()
    event = sys.argv[1] if len(sys.argv) > 1 else None
    payload = parse(text)
    if payload is not None:
        payload.setdefault("hook_event_name", event)
        if harmless(payload):
            return 0
    answer = ask_helper(text, event)
    if answer is not None:
        code, out, err = answer
        if out:
            sys.stdout.write(out + "\n")
        if err:
            sys.stderr.write(err + "\n")
        return code
    # the full entry point, with the module search path a normal start has (site-packages, .pth files)
    if sys.path and os.path.abspath(sys.path[0] or ".") == os.path.dirname(os.path.abspath(__file__)):
        del sys.path[0]  # this script's folder (not there under -P / PYTHONSAFEPATH)
    import io
    import site

    site.main()
    from agentsnap_claude_code.gate import main as gate

    sys.stdin = io.StringIO(text)
    return gate(sys.argv[1:], start_helper=True)


if __name__ == "__main__":
    sys.exit(main())
