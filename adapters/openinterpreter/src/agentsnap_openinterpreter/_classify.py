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

from agentsnap_core.errors import InvalidInput
from agentsnap_core.layers.effects import IDEMPOTENT, IRREVERSIBLE, PURE

__all__ = ["CommandClassifier", "Verdict"]

#: shell programs that only read (or change the shell's own state, which a replay rebuilds); each word after
#: the program is also checked: see ``_shell_args_ok``
SHELL_READ_ONLY = frozenset(
    {
        "ls", "cat", "echo", "printf", "pwd", "head", "tail", "wc", "grep", "egrep", "fgrep", "which", "type",
        "printenv", "date", "whoami", "id", "uname", "hostname", "true", "false", "stat", "file", "du",
        "df", "sort", "uniq", "cut", "tr", "basename", "dirname", "realpath", "readlink", "test", "[", "cd",
        "export", "unset", "alias", "set", "find", "sed", "awk", "diff", "cmp", "md5sum",
        "sha256sum", "tree", "column", "seq", "sleep", "git", "python", "python3",
        # wrappers: read-only when the command they run is (checked recursively)
        "env", "xargs", "time", "nice", "timeout", "command",
    }
)
#: options that make a read-only program write (a short option also matches inside a bundle such as ``-uo``)
_SHELL_ARG_DENY = {
    "find": ("-delete", "-exec", "-execdir", "-ok", "-okdir", "-fprint", "-fprint0", "-fprintf", "-fls"),
    "sort": ("-o", "--output"),
    "tree": ("-o",),
    "date": ("-s", "--set"),
    "file": ("-C", "--compile"),
    "git": ("--output",),
}
_GIT_READ_ONLY = frozenset({"status", "log", "diff", "show", "rev-parse", "ls-files", "blame", "describe"})
_PYTHON_READ_ONLY = frozenset({"--version", "-V"})
_SHELL_OPS = frozenset({";", "&&", "||", "|", "&", "\n", "(", ")", ";;", "|&"})
_SHELL_KEYWORDS = frozenset({"if", "then", "else", "elif", "fi", "while", "until", "do", "done", "{", "}", "!"})
_REDIRECT = re.compile(r"[<>&]*>[>|&]*|<>")
#: wrapper options that take a value (``timeout -s KILL 5 cmd``, ``xargs -I{} cmd``)
_WRAPPER_VALUE_OPTS = {
    "env": frozenset({"-u", "--unset", "-C", "--chdir", "-S", "--split-string"}),
    "xargs": frozenset({"-I", "-i", "-n", "-L", "-l", "-d", "-E", "-e", "-P", "-s", "-a", "--arg-file", "--delimiter"}),
    "nice": frozenset({"-n", "--adjustment"}),
    "timeout": frozenset({"-s", "--signal", "-k", "--kill-after"}),
}
_SED_ADDR = r"(?:\d+(?:~\d+)?|\$|/(?:[^/\\]|\\.)*/[IM]?)"
_SED_COMMAND = re.compile(
    rf"\s*(?:{_SED_ADDR}(?:\s*,\s*(?:{_SED_ADDR}|[+~]\d+))?)?\s*!?\s*"
    r"(?:[pdDnNqQ=lPhHgGxz]?|[aic]\\?.*|y(.)(?:(?!\1).)*\1(?:(?!\1).)*\1"
    r"|s(?P<d>[^\s\w\\])(?:(?!(?P=d))[^\\]|\\.)*(?P=d)(?:(?!(?P=d))[^\\]|\\.)*(?P=d)[gpiIm0-9]*)\s*"
)
_AWK_WRITES = re.compile(r"system\s*\(|\||>|getline|\bclose\s*\(|fflush")

#: modules a pure cell may import; what it may *call* from them is decided by ``MODULE_CALLS``
SAFE_MODULES = frozenset(
    {
        "math", "cmath", "json", "re", "statistics", "datetime", "time", "collections", "itertools", "functools",
        "operator", "random", "string", "textwrap", "decimal", "fractions", "typing", "dataclasses", "enum",
        "os", "os.path", "pathlib", "sys", "glob", "fnmatch", "csv", "io", "copy", "pprint", "base64", "hashlib",
        "uuid", "bisect", "heapq", "array", "struct", "difflib", "unicodedata", "calendar", "zoneinfo", "locale",
        "platform", "inspect", "ast", "abc", "contextlib", "warnings", "numbers", "secrets", "html",
        "zlib", "numpy", "pandas", "scipy", "matplotlib", "sympy", "PIL", "yaml", "tomllib", "keyword", "binascii",
    }
)
#: ``module -> functions a pure cell may call or pass around``; ``"*"``: any (pure computation), ``"-"``: any
#: except ``WRITER_NAMES`` (large numeric libraries); a module missing here allows nothing
MODULE_CALLS: dict[str, frozenset[str] | str] = {
    **{m: "*" for m in ("math", "cmath", "re", "statistics", "datetime", "collections", "itertools", "functools",
                        "operator", "random", "string", "textwrap", "decimal", "fractions", "typing", "dataclasses",
                        "enum", "copy", "pprint", "base64", "hashlib", "uuid", "bisect", "heapq", "array", "struct",
                        "difflib", "unicodedata", "calendar", "zoneinfo", "fnmatch", "abc", "numbers", "secrets",
                        "html", "zlib", "keyword", "binascii", "tomllib", "os.path", "glob", "warnings", "ast",
                        "inspect", "platform", "contextlib", "time", "locale", "csv")},
    **{m: "-" for m in ("numpy", "pandas", "scipy", "sympy", "matplotlib", "PIL", "yaml")},
    "json": frozenset({"loads", "dumps", "load", "JSONDecoder", "JSONEncoder", "JSONDecodeError"}),
    "os": frozenset({"getcwd", "getcwdb", "listdir", "scandir", "walk", "getenv", "getpid", "getppid", "cpu_count",
                     "chdir", "fspath", "fsencode", "fsdecode", "get_terminal_size", "getlogin", "getuid", "getgid",
                     "geteuid", "stat", "lstat", "access", "readlink", "strerror", "uname", "urandom", "path",
                     "environ", "sep", "linesep", "pathsep", "curdir", "pardir", "name", "devnull", "extsep"}),
    "sys": frozenset({"getsizeof", "getrecursionlimit", "getdefaultencoding", "getfilesystemencoding", "exc_info",
                      "intern", "argv", "path", "version", "version_info", "platform", "executable", "maxsize",
                      "modules", "byteorder", "stderr", "float_info", "implementation"}),
    "io": frozenset({"StringIO", "BytesIO", "open"}),
    "pathlib": frozenset({"Path", "PurePath", "PurePosixPath", "PosixPath", "PureWindowsPath"}),
}
#: names that write wherever they come from (numpy.save, DataFrame.to_csv, Figure.savefig ...), or that run
#: what they read or are given: yaml's loaders that build Python objects (every ``*_all`` form too),
#: pandas.read_pickle (unpickles), pandas.read_sql* (runs any SQL statement, ``DELETE ... RETURNING`` included,
#: in a database the snapshot does not hold); pandas.ExcelWriter / HDFStore create or truncate their file when
#: made (``store["df"] = df`` then writes with no call a rule could see); numpy.DataSource downloads into a
#: directory; sympy.preview runs LaTeX and a viewer
WRITER_NAMES = frozenset(
    {
        "save", "savez", "savez_compressed", "savetxt", "savefig", "tofile", "memmap", "open_memmap", "dump",
        "dump_all", "unsafe_load", "full_load", "load", "load_all", "unsafe_load_all", "full_load_all",
        "to_csv", "to_excel", "to_parquet", "to_json", "to_pickle",
        "to_sql", "to_hdf", "to_feather", "to_markdown", "to_html", "to_latex", "to_stata", "to_orc", "to_xml",
        "to_clipboard", "to_gbq", "write", "writelines", "write_text", "write_bytes",
        "read_pickle", "read_sql", "read_sql_query", "read_sql_table", "ExcelWriter", "HDFStore", "DataSource",
        "preview",
    }
)
#: numpy readers that, given a URL, download it into the current directory (numpy.lib._datasource.open with its
#: default ``destpath=os.curdir``): ``np.loadtxt("https://host/d.txt")`` leaves ``host/d.txt`` in the tree
_NUMPY_URL_READERS = frozenset({"loadtxt", "genfromtxt", "fromregex", "recfromtxt", "recfromcsv"})
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")
#: builtins a pure cell may call (``open`` is allowed for reading only)
BUILTIN_CALLS = frozenset(
    {
        "abs", "all", "any", "ascii", "bin", "bool", "bytearray", "bytes", "callable", "chr", "classmethod",
        "complex", "dict", "dir", "divmod", "enumerate", "filter", "float", "format", "frozenset", "getattr",
        "hasattr", "hash", "hex", "id", "int", "isinstance", "issubclass", "iter", "len", "list", "map", "max",
        "memoryview", "min", "next", "object", "oct", "ord", "pow", "print", "property", "range", "repr",
        "reversed", "round", "set", "slice", "sorted", "staticmethod", "str", "sum", "super", "tuple", "type", "zip",
    }
)
#: builtins that are not pure even when only referenced (``w = open``; ``map(exec, ...)``)
_BUILTIN_DANGER = frozenset({"open", "exec", "eval", "compile", "__import__", "breakpoint", "input", "exit", "quit",
                             "setattr", "delattr", "globals", "locals", "vars", "help"})
#: methods a pure cell may call on any object: they only read, or change the object in memory
READ_ONLY_METHODS = frozenset(
    {
        # str / bytes
        "capitalize", "casefold", "center", "count", "encode", "decode", "endswith", "expandtabs", "find", "format",
        "format_map", "index", "isalnum", "isalpha", "isascii", "isdecimal", "isdigit", "isidentifier", "islower",
        "isnumeric", "isprintable", "isspace", "istitle", "isupper", "join", "ljust", "lower", "lstrip",
        "partition", "removeprefix", "removesuffix", "rfind", "rindex", "rjust", "rpartition", "rsplit", "rstrip",
        "split", "splitlines", "startswith", "strip", "swapcase", "title", "translate", "upper", "zfill",
        "maketrans", "hex",
        # containers (in-memory changes: a replay rebuilds them)
        "append", "extend", "insert", "pop", "clear", "sort", "reverse", "get", "items", "keys", "values",
        "update", "setdefault", "popitem", "add", "discard", "remove", "union", "intersection", "difference",
        "symmetric_difference", "issubset", "issuperset", "isdisjoint", "fromkeys", "most_common", "elements",
        "appendleft", "popleft", "extendleft", "rotate",
        # reading files and paths
        "read", "readline", "readlines", "seek", "tell", "close", "readable", "seekable", "exists", "is_file",
        "is_dir", "is_symlink", "is_absolute", "is_relative_to", "iterdir", "glob", "rglob", "stat", "lstat",
        "resolve", "absolute", "expanduser", "with_suffix", "with_name", "with_stem", "joinpath", "relative_to",
        "match", "full_match", "as_posix", "as_uri", "samefile", "read_text", "read_bytes", "walk", "cwd", "home",
        # regular expressions
        "search", "fullmatch", "findall", "finditer", "sub", "subn", "group", "groups", "groupdict", "span",
        "start", "end",
        # numbers, arrays, frames
        "sum", "mean", "median", "std", "var", "min", "max", "argmin", "argmax", "cumsum", "cumprod", "prod",
        "round", "astype", "reshape", "ravel", "flatten", "transpose", "dot", "tolist", "item", "all", "any",
        "nonzero", "clip", "argsort", "squeeze", "head", "tail", "describe", "groupby", "agg", "aggregate",
        "apply", "map", "filter", "merge", "concat", "sort_values", "sort_index", "reset_index",
        "set_index", "dropna", "fillna", "isna", "notna", "isnull", "notnull", "unique", "nunique",
        "value_counts", "pivot", "pivot_table", "melt", "query", "loc", "iloc", "sample", "to_numpy", "to_list",
        "to_dict", "to_records", "to_frame", "to_datetime", "to_numeric", "to_string", "info", "corr", "cov",
        "rolling", "resample", "shift", "diff", "pct_change", "abs", "plot", "bar", "hist", "scatter", "show",
        "is_integer", "conjugate", "bit_length", "as_integer_ratio", "isoformat", "strftime", "timestamp",
        "date", "weekday", "isoweekday", "total_seconds", "astimezone", "evalf", "simplify", "expand", "subs",
        "factor", "solve", "integrate", "limit", "series",
    }
)
#: Open Interpreter's computer API (``computer.*`` in the kernel when ``import_computer_api`` is on, as in OS
#: mode; interpreter/core/computer/*/ in 0.4.3) calls that only look, read or ask a model. Mouse, keyboard,
#: mail.send, sms.send, calendar.create_event, files.edit, os.notify, browser.go_to_url, skills.* ... are not here.
COMPUTER_READ_ONLY = frozenset(
    {
        "display.width", "display.height", "display.size", "display.center", "display.info", "display.view",
        "display.screenshot", "display.find", "display.find_text", "display.get_text_as_list_of_lists",
        "clipboard.view", "files.search", "browser.search", "browser.fast_search", "browser.search_google",
        "calendar.get_events", "contacts.get_phone_number", "contacts.get_email_address",
        "contacts.get_full_names_from_first_name", "mail.get", "mail.unread_count", "sms.get",
        "os.get_selected_text", "docs.search", "ai.chat", "ai.query", "ai.summarize", "vision.ocr", "vision.query",
        "skills.list", "skills.search", "mouse.position",
    }
)
#: attribute names that are a side effect when merely referenced (``map(Path.unlink, paths)``, ``f = p.write``)
_METHOD_DANGER = frozenset(
    {
        "unlink", "rmdir", "rename", "replace", "touch", "mkdir", "chmod", "lchmod", "chown", "symlink_to",
        "hardlink_to", "link_to", "write", "writelines", "write_text", "write_bytes", "truncate", "copy_into",
        "move", "move_into", "system", "popen", "remove", "send", "sendall", "sendto", "commit", "delete",
        "post", "put", "patch", "request", "urlopen", "kill", "terminate",
    }
) | WRITER_NAMES
_MODE = re.compile(r"[rwxabtU+]{1,4}")


def _dotted(node: ast.expr) -> list[str] | None:
    """``a.b.c`` as ``["a", "b", "c"]`` (None when the chain does not start at a plain name)."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return parts[::-1]


def _module_allows(calls: dict[str, frozenset[str] | str], module: str, name: str) -> bool:
    policy = calls.get(module)
    if policy is None:
        return False
    if policy == "*":
        return True
    if policy == "-":
        return name not in WRITER_NAMES and not name.startswith(("save", "write")) \
            and (not name.startswith("to_") or name in READ_ONLY_METHODS)
    return name in policy


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
    """Classify a code cell as pure or irreversible: pure only if every command and call in it is read-only.

    Args:
        shell_read_only: shell programs treated as read-only (their options are still checked).
        safe_modules: Python modules a pure cell may import.
        module_calls: what a pure cell may call from each module (see :data:`MODULE_CALLS`).
        read_only_methods: methods a pure cell may call on any object.
        computer_read_only: Open Interpreter ``computer.*`` API calls that only read (OS mode).
        override: ``override(language, code)`` returning a kind (or None to use the rules); wins over the rules.
        pure_languages: languages whose cells are always pure (e.g. ``{"html"}``).
    """

    shell_read_only: frozenset[str] = SHELL_READ_ONLY
    safe_modules: frozenset[str] = SAFE_MODULES
    module_calls: dict[str, frozenset[str] | str] = field(default_factory=lambda: dict(MODULE_CALLS))
    read_only_methods: frozenset[str] = READ_ONLY_METHODS
    computer_read_only: frozenset[str] = COMPUTER_READ_ONLY
    override: Callable[[str, str], str | None] | None = None
    pure_languages: frozenset[str] = field(default_factory=frozenset)

    def __call__(self, language: str, code: str, tainted: Iterable[str] = (), defined: Iterable[str] = ()) -> Verdict:
        """Classify ``code`` in ``language``.

        Args:
            tainted: names bound by earlier irreversible cells (using one makes a cell irreversible).
            defined: names bound by earlier pure cells (their functions were checked: calling them is pure).
        """
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
            reason = self._python(code, frozenset(tainted), frozenset(defined))
        elif lang in ("shell", "bash", "sh", "zsh"):
            reason = self._shell(code)
        else:
            reason = f"{lang or 'unknown'} code is not analysed"
        if reason is None:
            return Verdict(PURE, "read-only commands" if lang in ("shell", "bash", "sh", "zsh") else "computes only", binds)
        return Verdict(IRREVERSIBLE, reason, binds)

    # ------------------------------------------------------------------ python
    def _python(self, code: str, tainted: frozenset[str], defined: frozenset[str]) -> str | None:
        """None when every import, call and reference in ``code`` is read-only; else why not."""
        try:
            tree = ast.parse(code)
        except SyntaxError:
            return "not plain Python (magics, shell escapes or a syntax error)"
        aliases: dict[str, list[str]] = {}  # local name -> dotted path of the module (attribute) it names
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if not self._safe_module(a.name):
                        return f"imports {a.name}"
                    aliases[a.asname or a.name.split(".")[0]] = (a.name if a.asname else a.name.split(".")[0]).split(".")
            elif isinstance(node, ast.ImportFrom):
                module = node.module or ""
                if node.level or not self._safe_module(module):
                    return f"imports {'.' * node.level}{module}"
                for a in node.names:
                    if a.name == "*":
                        return f"imports * from {module}"
                    aliases[a.asname or a.name] = [*module.split("."), a.name]
        local = set(defined) | _local_names(tree)
        parents = {id(child): node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
        for node in _innermost_first(tree):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in tainted:
                return f"uses {node.id}, bound by an irreversible cell"
            if isinstance(node, ast.Call):
                why = self._call(node, aliases, local)
                if why:
                    return why
            elif isinstance(node, (ast.Name, ast.Attribute)) and isinstance(node.ctx, ast.Load):
                parent = parents.get(id(node))
                if isinstance(parent, ast.Attribute) or (isinstance(parent, ast.Call) and parent.func is node):
                    continue  # part of a longer chain, or called: checked there
                why = self._reference(node, aliases, local)
                if why:
                    return why
        return None

    def _safe_module(self, name: str) -> bool:
        return name in self.safe_modules or name.split(".")[0] in self.safe_modules

    def _resolve(self, node: ast.expr, aliases: dict[str, list[str]], local: set[str]) -> list[str] | None:
        parts = _dotted(node)
        if parts is None or parts[0] in local or parts[0] not in aliases:
            return None
        return [*aliases[parts[0]], *parts[1:]]

    def _qualified(self, parts: list[str], called: bool) -> bool:
        """Whether ``module.attr...`` (resolved from an import) may be used in a pure cell."""
        for i in range(len(parts), 0, -1):
            module = ".".join(parts[:i])
            if module not in self.module_calls:
                continue
            rest = parts[i:]
            if not rest:
                return self.module_calls[module] in ("*", "-")  # the module itself, passed around
            if not _module_allows(self.module_calls, module, rest[0]):
                return False
            if len(rest) == 1:
                return True
            last = rest[-1]
            return last in self.read_only_methods if called else last not in _METHOD_DANGER
        return False

    def _call(self, call: ast.Call, aliases: dict[str, list[str]], local: set[str]) -> str | None:
        fn = call.func
        if isinstance(fn, ast.Lambda):
            return None
        name = fn.id if isinstance(fn, ast.Name) else fn.attr if isinstance(fn, ast.Attribute) else None
        if name is None:
            return "calls a computed function"
        resolved = self._resolve(fn, aliases, local)
        if name == "open" and (resolved is None or resolved[0] != "os"):
            builtin = isinstance(fn, ast.Name) and resolved is None
            mode_at = 1 if builtin or (resolved is not None and resolved[0] in ("io", "codecs")) else 0
            return "opens a file for writing" if _opens_for_writing(call, mode_at) else None
        if resolved is not None:
            if resolved[0] == "numpy" and name in _NUMPY_URL_READERS and _names_url(call):
                return f"calls {name}() on a URL (numpy downloads it into the working directory)"
            return None if self._qualified(resolved, called=True) else f"calls {name}()"
        parts = _dotted(fn)
        if parts and parts[0] == "computer" and "computer" not in local and len(parts) > 1:  # OS mode's API
            api = ".".join(parts[1:])
            return None if api in self.computer_read_only else f"calls computer.{api}()"
        if isinstance(fn, ast.Name):
            if name in local or name in BUILTIN_CALLS or _builtin_exception(name):
                return None
            return f"calls {name}()"
        # a method on a value (a variable, a literal, a call's result)
        if name in ("replace", "rename"):  # str.replace(old, new) / datetime.replace(year=...) / Path.replace(target)
            one_target = len(call.args) == 1 or any(k.arg == "target" for k in call.keywords)
            return f"calls {name}()" if one_target else None
        if name == "copy":  # dict.copy() / Path.copy(target)
            return f"calls {name}()" if call.args or call.keywords else None
        if name in self.read_only_methods or _is_dunder(name):
            return None
        if name in local and name not in _METHOD_DANGER:
            return None  # a method this cell (or an earlier pure one) defines
        return f"calls {name}()"

    def _reference(self, node: ast.Name | ast.Attribute, aliases: dict[str, list[str]], local: set[str]) -> str | None:
        """A function used as a value (``map(os.remove, xs)``, ``w = open``)."""
        resolved = self._resolve(node, aliases, local)
        if resolved is not None:
            return None if self._qualified(resolved, called=False) else f"refers to {'.'.join(resolved)}"
        if isinstance(node, ast.Name):
            return f"refers to {node.id}" if node.id in _BUILTIN_DANGER and node.id not in local else None
        return f"refers to .{node.attr}" if node.attr in _METHOD_DANGER else None

    # ------------------------------------------------------------------ shell
    def _shell(self, code: str) -> str | None:
        """None when every simple command in ``code`` is read-only; else why not."""
        if "`" in code or "$(" in code or "<(" in code or ">(" in code:
            return "command substitution"
        try:
            tokens = _shell_tokens(code)
        except ValueError as exc:
            return f"cannot parse ({exc})"
        words: list[str] = []
        i = 0
        while i <= len(tokens):
            tok = tokens[i] if i < len(tokens) else ";"
            if tok in _SHELL_OPS:
                why = self._command(words)
                if why:
                    return why
                words = []
            elif _REDIRECT.fullmatch(tok) or tok in ("<", "<<", "<<<"):
                if words and words[-1].isdigit():
                    words.pop()  # the fd of 2>&1
                target = tokens[i + 1] if i + 1 < len(tokens) else ""
                i += 1
                if ">" in tok and not (target == "/dev/null" or (tok.endswith("&") and (target.isdigit() or target == "-"))):
                    return "redirects output to a file"
            else:
                words.append(tok)
            i += 1
        return None

    def _command(self, words: list[str]) -> str | None:
        while words and (re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", words[0], re.S) or words[0] in _SHELL_KEYWORDS):
            words = words[1:]  # VAR=value prefix, if/then/do/! ...
        if not words or words[0] == "for":
            return None
        prog, args = words[0].rsplit("/", 1)[-1], words[1:]
        if prog not in self.shell_read_only:
            return f"runs {prog}"
        if prog in _WRAPPER_VALUE_OPTS or prog in ("time", "command"):
            return self._wrapped(prog, args)
        for opt in _SHELL_ARG_DENY.get(prog, ()):
            if any(_has_option(w, opt) for w in args):
                return f"{prog} {opt} writes"
        check = _ARG_CHECKS.get(prog)
        return check(args) if check else None

    def _wrapped(self, prog: str, args: list[str]) -> str | None:
        """``env``/``xargs``/``time``/``nice``/``timeout``/``command``: check the command they run."""
        if prog == "command" and args[:1] in (["-v"], ["-V"]):
            return None
        value_opts = _WRAPPER_VALUE_OPTS.get(prog, frozenset())
        rest = list(args)
        while rest and rest[0].startswith("-") and rest[0] != "-":
            opt = rest.pop(0)
            if opt in value_opts and rest:
                rest.pop(0)
        if prog == "env":
            while rest and "=" in rest[0]:
                rest.pop(0)
        if prog == "timeout" and rest:
            rest.pop(0)  # the duration
        if prog == "nice" and rest and rest[0].lstrip("-").isdigit():
            rest.pop(0)
        return self._command(rest) if rest else None


def _innermost_first(tree: ast.AST) -> list[ast.AST]:
    """Nodes in source order, inner before outer (``open(p, 'w').write(x)`` is about the open)."""
    out: list[ast.AST] = []

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            visit(child)
        out.append(node)

    visit(tree)
    return out


def _local_names(tree: ast.AST) -> set[str]:
    """Every name a cell binds anywhere (assignments, loop targets, defs, classes, parameters)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
    return names


def _builtin_exception(name: str) -> bool:
    import builtins

    return isinstance(getattr(builtins, name, None), type) and issubclass(getattr(builtins, name), BaseException)


def _is_dunder(name: str) -> bool:
    return name in ("__init__", "__post_init__", "__enter__", "__exit__", "__repr__", "__str__", "__len__",
                    "__iter__", "__next__", "__getitem__", "__contains__", "__eq__", "__hash__", "__format__")


def _shell_tokens(code: str) -> list[str]:
    lex = shlex.shlex(code, posix=True, punctuation_chars=";&|()<>\n")
    lex.whitespace = " \t\r"
    lex.whitespace_split = True
    lex.commenters = "#"
    return [t for t in lex if t != ""] if code.strip() else []


def _has_option(word: str, opt: str) -> bool:
    if word == opt or (opt.startswith("--") and word.startswith(opt + "=")):
        return True
    if len(opt) == 2 and word.startswith("-") and not word.startswith("--") and len(word) > 2:
        return opt[1] in word[1:]  # a bundle: sort -uo FILE
    return False


def _positional(args: list[str], value_opts: frozenset[str] = frozenset()) -> list[str]:
    out: list[str] = []
    skip = False
    for w in args:
        if skip:
            skip = False
        elif w.startswith("-") and w != "-":
            skip = w in value_opts
        else:
            out.append(w)
    return out


def _sed_args(args: list[str]) -> str | None:
    scripts: list[str] = []
    rest = list(args)
    files_only = False
    while rest:
        w = rest.pop(0)
        if files_only or not w.startswith("-") or w == "-":
            if not scripts:
                scripts.append(w)
            files_only = True
        elif w in ("-e", "--expression") and rest:
            scripts.append(rest.pop(0))
        elif w.startswith("--expression="):
            scripts.append(w.split("=", 1)[1])
        elif w.startswith("--") and w in ("--quiet", "--silent", "--regexp-extended", "--separate", "--null-data",
                                          "--posix", "--debug", "--unbuffered"):
            continue
        elif re.fullmatch(r"-[nErsuz]+", w):
            continue
        else:
            return f"sed {w}"  # -i, -f script, unknown options
    for script in scripts:
        for command in re.split(r"[;\n]", script):
            if not _SED_COMMAND.fullmatch(command):
                return f"sed command {command.strip()[:30]!r} may write or run"
    return None


def _awk_args(args: list[str]) -> str | None:
    rest = list(args)
    while rest and rest[0].startswith("-") and rest[0] != "-":
        opt = rest.pop(0)
        if opt in ("-v", "-F") and rest:
            rest.pop(0)
        elif not re.fullmatch(r"-(?:F.+|v.+=.*)", opt):
            return f"awk {opt}"  # -f progfile, -i inplace, -E ...
    program = rest[0] if rest else ""
    return "awk program may write or run commands" if _AWK_WRITES.search(program) else None


def _git_args(args: list[str]) -> str | None:
    if not args or args[0] not in _GIT_READ_ONLY:
        return f"git {args[0] if args else ''}".strip()
    return None


_ARG_CHECKS: dict[str, Callable[[list[str]], str | None]] = {
    "sed": _sed_args,
    "awk": _awk_args,
    "git": _git_args,
    "python": lambda a: None if len(a) == 1 and a[0] in _PYTHON_READ_ONLY else "runs a Python program",
    "python3": lambda a: None if len(a) == 1 and a[0] in _PYTHON_READ_ONLY else "runs a Python program",
    "uniq": lambda a: "uniq writes its second file" if len(_positional(a, frozenset({"-f", "-s", "-w"}))) > 1 else None,
    "hostname": lambda a: "hostname sets the name" if _positional(a) or any(w in ("-F", "--file", "-b", "--boot") for w in a) else None,
    "date": lambda a: "date sets the clock" if any(not w.startswith("+") for w in _positional(a, frozenset({"-d", "-r", "-f", "--date", "--reference"}))) else None,
}


def _opens_for_writing(call: ast.Call, mode_at: int) -> bool:
    """``open(path, mode)`` (``mode_at=1``) or ``Path.open(mode)`` (``mode_at=0``) opens for writing."""
    mode: ast.expr | None = call.args[mode_at] if len(call.args) > mode_at else None
    for kw in call.keywords:
        if kw.arg == "mode":
            mode = kw.value
    if mode is None:
        return False
    if isinstance(mode, ast.Constant) and isinstance(mode.value, str):
        if mode_at == 0 and not _MODE.fullmatch(mode.value) and not any(k.arg == "mode" for k in call.keywords):
            return False  # Image.open("photo.png"): a path, not a mode
        return any(c in mode.value for c in "wax+")
    return True  # a computed mode: assume the worst


def _names_url(call: ast.Call) -> bool:
    """Whether the file argument of a numpy reader is written in the cell as a URL (a string or an f-string that
    starts with ``scheme://``); a path held in a variable is taken as the local file it almost always is."""
    target: ast.expr | None = call.args[0] if call.args else None
    for kw in call.keywords:
        if kw.arg in ("fname", "file"):
            target = kw.value
    if isinstance(target, ast.JoinedStr):  # f"https://{host}/d.txt"
        target = target.values[0] if target.values else None
    return isinstance(target, ast.Constant) and isinstance(target.value, str) and bool(_URL.match(target.value))


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
