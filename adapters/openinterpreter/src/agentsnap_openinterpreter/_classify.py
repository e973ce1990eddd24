"""Which code cells are safe to run twice: a conservative, configurable classifier.

A cell is ``pure`` (re-running it after a restore only rebuilds interpreter state) or
``irreversible`` (it may write files, start processes, touch the network, or cannot be analysed).
In doubt, a cell is irreversible: a restore then skips it and says so, instead of repeating a
side effect. ``idempotent`` is accepted from a user override and treated like pure on replay.

Python cells are read with :mod:`ast` (nothing is executed); shell cells are split into simple
commands and each must be a known read-only command with no output redirection. Other languages
are irreversible unless an override says otherwise.
"""

from __future__ import annotations

import ast
import re
import shlex
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from agentsnap_core.effects import IDEMPOTENT, IRREVERSIBLE, PURE
from agentsnap_core.errors import InvalidInput

__all__ = ["CommandClassifier", "Verdict"]

#: shell programs that only read (or change the shell's own state, which a replay should rebuild)
SHELL_READ_ONLY = frozenset(
    {
        "ls", "cat", "echo", "printf", "pwd", "head", "tail", "wc", "grep", "egrep", "fgrep", "which", "type",
        "env", "printenv", "date", "whoami", "id", "uname", "hostname", "true", "false", "stat", "file", "du",
        "df", "sort", "uniq", "cut", "tr", "basename", "dirname", "realpath", "readlink", "test", "[", "cd",
        "export", "unset", "alias", "set", "find", "sed", "awk", "diff", "cmp", "md5sum",
        "sha256sum", "tree", "less", "more", "column", "seq", "sleep", "history", "git", "python", "python3",
    }
)
#: extra checks for read-only programs that have writing modes
_SHELL_ARG_DENY = {
    "find": {"-delete", "-exec", "-execdir", "-ok", "-okdir", "-fprint", "-fprintf", "-fls"},
    "sed": {"-i", "--in-place"},
    "awk": {"-i"},
    "sort": {"-o"},
}
_GIT_READ_ONLY = frozenset({"status", "log", "diff", "show", "rev-parse", "ls-files", "blame", "describe"})
_PYTHON_READ_ONLY = frozenset({"--version", "-V"})
_SHELL_SPLIT = re.compile(r"&&|\|\||[;|\n&]")
_REDIRECT_OK = re.compile(r"\d?>\s*/dev/null|\d?>&\d|&>\s*/dev/null")

#: modules whose import alone is fine (computation, parsing, reading)
SAFE_MODULES = frozenset(
    {
        "math", "cmath", "json", "re", "statistics", "datetime", "time", "collections", "itertools", "functools",
        "operator", "random", "string", "textwrap", "decimal", "fractions", "typing", "dataclasses", "enum",
        "os", "os.path", "pathlib", "sys", "glob", "fnmatch", "csv", "io", "copy", "pprint", "base64", "hashlib",
        "uuid", "bisect", "heapq", "array", "struct", "difflib", "unicodedata", "calendar", "zoneinfo", "locale",
        "platform", "inspect", "ast", "abc", "contextlib", "warnings", "numbers", "secrets", "pickle", "html",
        "xml", "zlib", "gzip", "numpy", "pandas", "scipy", "matplotlib", "sympy", "PIL", "yaml", "tomllib",
    }
)
#: calls that change the world, whatever object they are called on
UNSAFE_CALLS = frozenset(
    {
        # processes
        "system", "popen", "Popen", "run", "call", "check_call", "check_output", "spawnl", "spawnv", "execv",
        "execve", "execvp", "fork", "kill", "killpg", "startfile",
        # files and directories
        "remove", "unlink", "rmdir", "removedirs", "rmtree", "rename", "renames", "makedirs", "mkdir", "chmod",
        "chown", "symlink", "link", "truncate", "write_text", "write_bytes", "touch", "move", "copy", "copy2",
        "copyfile", "copytree", "copyfileobj", "mkstemp", "mkdtemp", "NamedTemporaryFile", "chdir_and_write",
        "to_csv", "to_excel", "to_parquet", "to_json", "to_pickle", "to_sql", "to_hdf", "to_feather", "savefig",
        "save", "savez", "savetxt", "tofile", "dump", "putenv", "utime",
        # network and messages
        "urlopen", "urlretrieve", "sendmail", "send_message", "sendall", "sendto", "connect", "post", "put",
        "patch", "delete", "request",
        # cannot be analysed
        "exec", "eval", "compile", "__import__", "import_module",
    }
)


@dataclass(frozen=True)
class Verdict:
    """A cell's class and the reason for it.

    Attributes:
        kind: ``pure`` / ``idempotent`` / ``irreversible``.
        reason: why, in a few words (shown in restore reports).
        binds: names a Python cell binds at top level (what a replay brings back, or what stays missing).
    """

    kind: str
    reason: str
    binds: tuple[str, ...] = ()


@dataclass
class CommandClassifier:
    """Classify a code cell as pure or irreversible.

    Args:
        shell_read_only: shell programs treated as read-only.
        safe_modules: Python modules a pure cell may import.
        unsafe_calls: function/method names that make a Python cell irreversible.
        override: ``override(language, code)`` returning a kind (or None to use the rules); wins over the rules.
        pure_languages: languages whose cells are always pure (e.g. ``{"html"}``).
    """

    shell_read_only: frozenset[str] = SHELL_READ_ONLY
    safe_modules: frozenset[str] = SAFE_MODULES
    unsafe_calls: frozenset[str] = UNSAFE_CALLS
    override: Callable[[str, str], str | None] | None = None
    pure_languages: frozenset[str] = field(default_factory=frozenset)

    def __call__(self, language: str, code: str, tainted: Iterable[str] = ()) -> Verdict:
        """Classify ``code`` in ``language``; ``tainted`` are names bound by earlier irreversible cells."""
        lang = (language or "").lower().strip()
        binds = _python_binds(code) if lang in ("python", "py") else ()
        if self.override is not None:
            kind = self.override(lang, code)
            if kind is not None:
                if kind not in (PURE, IDEMPOTENT, IRREVERSIBLE):
                    raise InvalidInput(f"classifier override returned {kind!r}; use pure, idempotent or irreversible")
                return Verdict(kind, "marked by the override", binds)
        if lang in self.pure_languages:
            return Verdict(PURE, f"{lang} is configured pure", binds)
        if lang in ("python", "py"):
            kind, reason = self._python(code, frozenset(tainted))
        elif lang in ("shell", "bash", "sh", "zsh"):
            kind, reason = self._shell(code)
        else:
            kind, reason = IRREVERSIBLE, f"{lang or 'unknown'} code is not analysed"
        return Verdict(kind, reason, binds)

    # ------------------------------------------------------------------ python
    def _python(self, code: str, tainted: frozenset[str]) -> tuple[str, str]:
        try:
            tree = ast.parse(code)
        except SyntaxError:
            return IRREVERSIBLE, "not plain Python (magics, shell escapes or a syntax error)"
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                for name in names:
                    if name not in self.safe_modules and name.split(".")[0] not in self.safe_modules:
                        return IRREVERSIBLE, f"imports {name}"
            elif isinstance(node, ast.Name) and node.id in tainted:
                return IRREVERSIBLE, f"uses {node.id}, bound by an irreversible cell"
            elif isinstance(node, ast.Call):
                fn = node.func
                called = fn.id if isinstance(fn, ast.Name) else fn.attr if isinstance(fn, ast.Attribute) else None
                if called == "open" and _opens_for_writing(node):
                    return IRREVERSIBLE, "opens a file for writing"
                if called in self.unsafe_calls:
                    return IRREVERSIBLE, f"calls {called}()"
                if called is None and not isinstance(fn, ast.Lambda):
                    return IRREVERSIBLE, "calls a computed function"
        return PURE, "computes only"

    # ------------------------------------------------------------------ shell
    def _shell(self, code: str) -> tuple[str, str]:
        if "`" in code or "$(" in code or "<(" in code or ">(" in code:
            return IRREVERSIBLE, "command substitution"
        plain = _REDIRECT_OK.sub(" ", code)
        if ">" in plain:
            return IRREVERSIBLE, "redirects output to a file"
        for part in _SHELL_SPLIT.split(plain):
            part = part.strip()
            if not part or part.startswith("#"):
                continue
            try:
                words = shlex.split(part, comments=True)
            except ValueError:
                return IRREVERSIBLE, f"cannot parse: {part[:60]}"
            while words and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", words[0]):
                words = words[1:]  # VAR=value prefix
            if not words:
                continue
            prog = words[0].rsplit("/", 1)[-1]
            if prog not in self.shell_read_only:
                return IRREVERSIBLE, f"runs {prog}"
            deny = _SHELL_ARG_DENY.get(prog, set())
            if any(w == d or w.startswith(d + "=") or (d == "-i" and w.startswith("-i")) for w in words[1:] for d in deny):
                return IRREVERSIBLE, f"{prog} with a writing option"
            if prog == "git" and (len(words) < 2 or words[1] not in _GIT_READ_ONLY):
                return IRREVERSIBLE, f"git {words[1] if len(words) > 1 else ''}".strip()
            if prog in ("python", "python3") and not (len(words) == 2 and words[1] in _PYTHON_READ_ONLY):
                return IRREVERSIBLE, "runs a Python program"
        return PURE, "read-only commands"


def _opens_for_writing(call: ast.Call) -> bool:
    mode: ast.expr | None = call.args[1] if len(call.args) > 1 else None
    for kw in call.keywords:
        if kw.arg == "mode":
            mode = kw.value
    if mode is None:
        return False
    if isinstance(mode, ast.Constant) and isinstance(mode.value, str):
        return any(c in mode.value for c in "wax+")
    return True  # a computed mode: assume the worst


def _python_binds(code: str) -> tuple[str, ...]:
    """Top-level names a Python cell binds (assignments, defs, classes, imports, for/with targets)."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return ()
    names: list[str] = []

    def targets(node: ast.AST) -> None:
        for sub in ast.walk(node):
            if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store):
                names.append(sub.id)

    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.append(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.extend((a.asname or a.name).split(".")[0] for a in node.names if a.name != "*")
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            for t in node.targets if isinstance(node, ast.Assign) else [node.target]:
                targets(t)
        elif isinstance(node, (ast.For, ast.AsyncFor)):
            targets(node.target)
        elif isinstance(node, (ast.With, ast.AsyncWith)):
            for item in node.items:
                if item.optional_vars is not None:
                    targets(item.optional_vars)
        elif isinstance(node, ast.Expr) and isinstance(node.value, ast.NamedExpr):
            names.append(node.value.target.id)
    return tuple(dict.fromkeys(names))
