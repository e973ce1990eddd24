"""Which shell commands look destructive enough to snapshot the project first.

The command is split the way a shell would split it (quotes respected, ``;``, ``&&``, ``||``,
``|``, ``&``, newlines, subshells), each simple command is unwrapped (``sudo``, ``env``,
``xargs``, ``timeout``, ``VAR=x`` prefixes, ``bash -c '...'``, ``eval``, ``$(...)``,
``find -exec``) and checked against named rules. A quoted string is an argument, never a
command, so ``echo "rm -rf"`` and ``grep -r rm`` are harmless. A false positive costs one
incremental snapshot; a false negative can cost work, so unparseable input falls back to a
plain text search.
"""

from __future__ import annotations

import os
import re
import shlex

TYPE_CHECKING = False
if TYPE_CHECKING:  # the hook's entry point imports this module: no typing/dataclasses/inspect at run time
    from collections.abc import Callable, Iterable

__all__ = ["Finding", "Matcher", "RULES", "is_destructive"]

_SEPARATORS = {";", "&&", "||", "|", "&", "|&", "\n", "(", ")", ";;", "{", "}"}
_REDIRECTS = {">", ">|", "&>", ">>", "&>>", "<", "<<", "<<<", ">&", "<&", "<>"}
_WRAPPERS = {"npx", "pnpx", "bunx", "uvx", "sudo", "doas", "command", "builtin", "exec", "nohup", "time", "nice", "ionice", "stdbuf", "unbuffer"}
_SHELLS = {"sh", "bash", "zsh", "dash", "ksh", "ash", "fish"}
_SQL_CLIENTS = {"psql", "mysql", "mariadb", "sqlite3", "sqlite", "duckdb", "sqlcmd", "clickhouse-client", "cockroach", "pgcli", "mycli", "litecli"}
_SQL = re.compile(r"\b(drop\s+(table|database|schema|view|index)|truncate\s+(table\s+)?[\w\"`]|delete\s+from\s+[\w\"`.]+\s*(;|$|\"|'))", re.I)
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_HEREDOC = re.compile(r"<<-?\s*(['\"]?)([A-Za-z_][A-Za-z0-9_]*)\1")
_INTERPRETERS = {"python", "python3", "node", "ruby", "perl", "php", "deno", "bun"}
_SUBST = re.compile(r"\$\(((?:[^()]|\([^()]*\))*)\)|`([^`]*)`")

#: rule name -> what it protects against (shown in reasons and the README)
RULES: dict[str, str] = {
    "rm": "rm deletes files (any operand; recursive or not)",
    "shred": "shred / srm / unlink destroy files",
    "git-reset-hard": "git reset --hard discards uncommitted changes",
    "git-clean": "git clean -f deletes untracked files",
    "git-checkout-discard": "git checkout -- PATH / . / -f discards changes",
    "git-restore": "git restore (worktree) discards changes",
    "git-switch-discard": "git switch --discard-changes / -f",
    "git-stash-drop": "git stash drop / clear loses stashed work",
    "find-delete": "find -delete / -exec rm",
    "overwrite": "mv or cp onto an existing file",
    "redirect-overwrite": "> truncates an existing file",
    "in-place-edit": "sed -i / perl -i rewrite files in place",
    "truncate": "truncate resizes files",
    "dd": "dd of=FILE overwrites a file",
    "rsync-delete": "rsync --delete removes files at the destination",
    "sql-drop": "DROP / TRUNCATE / unconditional DELETE through a SQL client",
    "script-delete": "python/node one-liners and heredoc scripts that delete or write files (rmtree, os.remove, open(..., 'w'))",
    "tee": "tee (without -a) onto an existing file",
    "git-rm": "git rm deletes files from the working tree",
    "git-branch-delete": "git branch -D / git worktree remove",
    "download-overwrite": "curl -o / -O, wget -O onto a file",
    "extract": "tar -x / unzip / 7z x / cpio -i write files over existing ones",
    "patch": "patch / git apply rewrite files",
    "formatter": "formatters and fixers that rewrite files in place (black, ruff format, prettier --write, gofmt -w, ...)",
    "move-out": "mv moves files out of the project (or to a place given by a variable)",
    "unparsed": "could not understand the command (unbalanced quotes, a command named by a variable): snapshot rather than skip",
    "pattern": "matches a configured extra pattern",
}


class Finding(tuple):  # a NamedTuple would import typing on every harmless hook call
    """One reason a command looks destructive: ``(rule, command)``."""

    __slots__ = ()

    def __new__(cls, rule: str, command: str) -> Finding:
        return tuple.__new__(cls, (rule, command))

    @property
    def rule(self) -> str:
        return str(self[0])

    @property
    def command(self) -> str:
        return str(self[1])

    def as_dict(self) -> dict[str, str]:
        return {"rule": self.rule, "command": self.command}

    def __repr__(self) -> str:
        return f"Finding(rule={self.rule!r}, command={self.command!r})"

    def __str__(self) -> str:
        return f"{self.rule}: {self.command}"


class Matcher:
    """Configurable destructive-command detector.

    Attributes:
        extra_patterns: regular expressions; a simple command (or the whole line) matching one is destructive.
        ignore_patterns: regular expressions; a whole command line matching one is never destructive.
        disabled_rules: names from :data:`RULES` to switch off.
        cwd: directory used to decide whether ``mv``/``cp``/``>`` would overwrite an existing file;
            ``None`` treats every such target as existing (conservative).
    """

    def __init__(
        self,
        extra_patterns: list[str] | None = None,
        ignore_patterns: list[str] | None = None,
        disabled_rules: list[str] | None = None,
        cwd: str | None = None,
    ) -> None:
        self.extra_patterns = list(extra_patterns or [])
        self.ignore_patterns = list(ignore_patterns or [])
        self.disabled_rules = list(disabled_rules or [])
        self.cwd = cwd
        unknown = [r for r in self.disabled_rules if r not in RULES]
        if unknown:
            raise ValueError(f"unknown destructive rule(s) {unknown}; known: {sorted(RULES)}")
        self._extra = [re.compile(p) for p in self.extra_patterns]
        self._ignore = [re.compile(p) for p in self.ignore_patterns]

    # ------------------------------------------------------------------ public
    def findings(self, command: str) -> list[Finding]:
        """Every reason ``command`` looks destructive (empty: harmless)."""
        if not command or not command.strip():
            return []
        if any(p.search(command) for p in self._ignore):
            return []
        out: list[Finding] = []
        command = self._heredocs(command, out)
        self._scan(command, out, depth=0)
        out += [Finding("pattern", command.strip()[:200]) for p in self._extra if p.search(command) and not out]
        unique = dict.fromkeys(f for f in out if f.rule not in self.disabled_rules)
        return list(unique)

    def __call__(self, command: str) -> bool:
        return bool(self.findings(command))

    # ------------------------------------------------------------------ parsing
    def _heredocs(self, text: str, out: list[Finding]) -> str:
        """Check each ``<<EOF`` body as what reads it (a shell, an interpreter); return the text without bodies."""
        lines, kept, i = text.split("\n"), [], 0
        while i < len(lines):
            line = lines[i]
            kept.append(line)
            i += 1
            for m in _HEREDOC.finditer(line):
                body = []
                while i < len(lines) and lines[i].strip() != m.group(2):
                    body.append(lines[i])
                    i += 1
                i += 1  # the delimiter line
                script = "\n".join(body)
                words = line[: m.start()].split()
                reader = _name(words[-1]) if words else ""
                reader = next((_name(w) for w in words if _name(w) in _SHELLS | _INTERPRETERS), reader)
                if reader in _SHELLS:
                    self._scan(script, out, 1)
                elif reader in _INTERPRETERS and _SCRIPT_DELETE.search(script):
                    out.append(Finding("script-delete", f"{line.strip()[:120]} (heredoc)"))
        return "\n".join(kept)

    def _scan(self, text: str, out: list[Finding], depth: int) -> None:
        if depth > 8:
            return
        for body in _substitutions(text):
            self._scan(body, out, depth + 1)
        try:
            tokens = _tokens(text)
        except ValueError:  # cannot be understood: snapshot rather than skip
            out.append(Finding("unparsed", text.strip()[:200]))
            return
        for cmd in _split(tokens):
            self._check(cmd, out, depth, text)

    def _check(self, cmd: list[str], out: list[Finding], depth: int, line: str, implicit: bool = False) -> None:
        words, via_xargs = _unwrap(cmd)
        via_xargs = via_xargs or implicit
        redirects = _redirect_targets(cmd)
        for target in redirects:
            if self._exists(target):
                out.append(Finding("redirect-overwrite", f"> {target}"))
        if not words:
            return
        name, args = _name(words[0]), words[1:]
        shown = " ".join(words)[:200]
        if words[0].startswith("$"):
            out.append(Finding("unparsed", shown))
        for p in self._extra:
            if p.search(shown):
                out.append(Finding("pattern", shown))
        if name in _SHELLS or name == "eval":
            script = _shell_script(name, args)
            if script is not None:
                self._scan(script, out, depth + 1)
            return
        rule = _RULE_FUNCS.get(name)
        if rule is not None:
            hit = rule(self, args, via_xargs)
            if hit:
                out.append(Finding(hit, shown))
        if name == "find":
            for inner in _find_exec(args):
                self._check(inner, out, depth + 1, line, implicit=True)
        if name in _SQL_CLIENTS and _SQL.search(line):
            out.append(Finding("sql-drop", line.strip()[:200]))

    def _exists(self, path: str) -> bool:
        if path in ("/dev/null", "/dev/stdout", "/dev/stderr") or path.startswith("/dev/fd/") or path.startswith("&"):
            return False
        if self.cwd is None or "$" in path or "*" in path or "~" in path:
            return True
        return os.path.isfile(os.path.join(self.cwd, path))

    def _overwrites(self, args: list[str], flags: set[str]) -> bool:
        if flags & {"-n", "--no-clobber", "-i", "--interactive", "--update=none"}:
            return False
        target_dir = next((a.split("=", 1)[1] for a in args if a.startswith("--target-directory=")), None)
        if "-t" in args:
            i = args.index("-t")
            target_dir = args[i + 1] if i + 1 < len(args) else None
        operands = [a for a in args if not a.startswith("-")]
        if target_dir is not None:
            sources, dest_dir = [a for a in operands if a != target_dir], target_dir
        elif len(operands) >= 2:
            sources, dest = operands[:-1], operands[-1]
            if self.cwd is None or not os.path.isdir(os.path.join(self.cwd, dest)):
                return self._exists(dest)
            dest_dir = dest
        else:
            return False
        return any(self._exists(os.path.join(dest_dir, os.path.basename(s.rstrip("/")))) for s in sources)


# ---------------------------------------------------------------------- rules
def _rm(m: Matcher, args: list[str], via_xargs: bool) -> str | None:
    if any(a in ("--help", "--version") for a in args):
        return None
    return "rm" if via_xargs or [a for a in args if not a.startswith("-") or a == "-"] else None


def _git(m: Matcher, args: list[str], via_xargs: bool) -> str | None:
    i = 0
    while i < len(args) and args[i].startswith("-"):  # git -C dir / -c k=v
        i += 2 if args[i] in ("-C", "-c", "--git-dir", "--work-tree") else 1
    if i >= len(args):
        return None
    sub, rest = args[i], args[i + 1 :]
    flags = _flags(rest)
    if sub == "reset" and ("--hard" in rest or "--merge" in rest or "--keep" in rest):
        return "git-reset-hard"
    if sub == "clean" and ("f" in flags or "--force" in rest) and not ({"n"} & flags or "--dry-run" in rest):
        return "git-clean"
    if sub == "checkout" and ("--" in rest or "." in rest or "f" in flags or "--force" in rest):
        return "git-checkout-discard"
    if sub == "restore" and not ("--staged" in rest or "S" in flags) or sub == "restore" and "--worktree" in rest:
        return "git-restore"
    if sub == "switch" and ("--discard-changes" in rest or "f" in flags or "--force" in rest):
        return "git-switch-discard"
    if sub == "stash" and rest[:1] in (["drop"], ["clear"]):
        return "git-stash-drop"
    if sub == "rm" and "--cached" not in rest and not ({"n"} & flags or "--dry-run" in rest):
        return "git-rm"
    if sub == "apply" and not ({"--check", "--stat", "--numstat", "--summary", "--cached", "--index"} & set(rest)):
        return "patch"
    if sub in ("am", "cherry-pick", "revert", "merge", "rebase", "pull") and "--abort" not in rest:
        return None  # they refuse to run over local changes
    if (sub == "branch" and ("-D" in rest or "--delete" in rest and "--force" in rest)) or (sub == "worktree" and rest[:1] == ["remove"]):
        return "git-branch-delete"
    return None


def _find(m: Matcher, args: list[str], via_xargs: bool) -> str | None:
    return "find-delete" if "-delete" in args else None


def _mv_cp(m: Matcher, args: list[str], via_xargs: bool) -> str | None:
    return "overwrite" if m._overwrites(args, set(args)) else None


def _mv(m: Matcher, args: list[str], via_xargs: bool) -> str | None:
    operands = [a for a in args if not a.startswith("-")]
    dest = operands[-1] if len(operands) >= 2 else ""
    if dest.startswith(("$", "~", "/")) or dest == ".." or dest.startswith("../"):
        if m.cwd is None or "$" in dest or "~" in dest:
            return "move-out"
        real = os.path.normpath(os.path.join(m.cwd, dest))
        if not (real == m.cwd or real.startswith(m.cwd.rstrip("/") + "/")):
            return "move-out"
    return _mv_cp(m, args, via_xargs)


def _sed(m: Matcher, args: list[str], via_xargs: bool) -> str | None:
    inplace = any(a == "-i" or a.startswith("--in-place") or (re.match(r"^-[a-zA-Z]*i", a) and not a.startswith("--")) for a in args)
    return "in-place-edit" if inplace else None


def _perl(m: Matcher, args: list[str], via_xargs: bool) -> str | None:
    if any(re.match(r"^-[a-zA-Z]*i", a) for a in args):
        return "in-place-edit"
    return _script(m, args, via_xargs)


_SCRIPT_DELETE = re.compile(
    r"rmtree|os\.(remove|unlink|rmdir|rename|replace|truncate)|\.unlink\(|fs\.(rm|rmSync|unlink|unlinkSync|rmdir|writeFileSync|writeFile)\b"
    r"|File\.delete|unlink\s*\(|\bopen\s*\([^)]*,\s*(mode\s*=\s*)?[\"'][wx]|\.write_(text|bytes)\(|shutil\.move|File\.write"
)


def _script(m: Matcher, args: list[str], via_xargs: bool) -> str | None:
    for i, a in enumerate(args):
        if a in ("-c", "-e", "--eval", "-E") and i + 1 < len(args) and _SCRIPT_DELETE.search(args[i + 1]):
            return "script-delete"
    return None


def _tee(m: Matcher, args: list[str], via_xargs: bool) -> str | None:
    if any(a in ("-a", "--append") for a in args):
        return None
    return "tee" if any(m._exists(a) for a in args if not a.startswith("-")) else None


def _download(m: Matcher, args: list[str], via_xargs: bool) -> str | None:
    for i, a in enumerate(args):
        if a in ("-O", "--remote-name", "--remote-name-all") and args[0:1] != ["wget"]:
            return "download-overwrite"  # curl -O: the file name comes from the URL
        if a in ("-o", "--output", "-O", "--output-document") and i + 1 < len(args):
            return "download-overwrite" if m._exists(args[i + 1]) else None
        if a.startswith(("--output=", "--output-document=")):
            return "download-overwrite" if m._exists(a.split("=", 1)[1]) else None
    return None


def _curl(m: Matcher, args: list[str], via_xargs: bool) -> str | None:
    return _download(m, args, via_xargs)


def _wget(m: Matcher, args: list[str], via_xargs: bool) -> str | None:
    for i, a in enumerate(args):
        if a in ("-O", "--output-document") and i + 1 < len(args):
            return "download-overwrite" if args[i + 1] != "-" and m._exists(args[i + 1]) else None
        if a.startswith("--output-document="):
            return "download-overwrite" if m._exists(a.split("=", 1)[1]) else None
    return None


def _tar(m: Matcher, args: list[str], via_xargs: bool) -> str | None:
    first = args[0] if args else ""
    extract = "--extract" in args or "--get" in args or any(re.match(r"^-[a-zA-Z]*x", a) for a in args)
    extract = extract or (bool(first) and not first.startswith("-") and "x" in first and re.fullmatch(r"[a-zA-Z]+", first) is not None)
    return "extract" if extract and "--to-stdout" not in args and "-O" not in args else None


def _unzip(m: Matcher, args: list[str], via_xargs: bool) -> str | None:
    if any(a in ("-l", "-v", "-t", "-p", "-Z", "-n", "-z") for a in args):
        return None
    return "extract" if [a for a in args if not a.startswith("-")] else None


def _seven_zip(m: Matcher, args: list[str], via_xargs: bool) -> str | None:
    return "extract" if args[:1] in (["x"], ["e"]) else None


def _patch(m: Matcher, args: list[str], via_xargs: bool) -> str | None:
    return None if any(a in ("--dry-run", "--help", "--version") for a in args) else "patch"


_FORMATTERS: dict[str, Callable[[list[str]], bool]] = {
    "black": lambda a: not ({"--check", "--diff"} & set(a)),
    "isort": lambda a: not ({"--check", "--check-only", "--diff", "-c"} & set(a)),
    "autopep8": lambda a: bool({"-i", "--in-place"} & set(a)),
    "yapf": lambda a: bool({"-i", "--in-place"} & set(a)),
    "prettier": lambda a: bool({"--write", "-w"} & set(a)),
    "eslint": lambda a: "--fix" in a,
    "gofmt": lambda a: "-w" in a,
    "goimports": lambda a: "-w" in a,
    "rustfmt": lambda a: "--check" not in a,
    "clang-format": lambda a: "-i" in a,
    "shfmt": lambda a: "-w" in a,
    "stylua": lambda a: "--check" not in a,
}


def _formatter(m: Matcher, args: list[str], via_xargs: bool, name: str = "") -> str | None:
    check = _FORMATTERS.get(name)
    return "formatter" if check is not None and check(args) and (via_xargs or [a for a in args if not a.startswith("-")] or name in ("black", "isort")) else None


def _ruff(m: Matcher, args: list[str], via_xargs: bool) -> str | None:
    if args[:1] == ["format"] and not ({"--check", "--diff"} & set(args)):
        return "formatter"
    if args[:1] == ["check"] and ("--fix" in args or "--unsafe-fixes" in args):
        return "formatter"
    return None


def _fmt_subcommand(m: Matcher, args: list[str], via_xargs: bool) -> str | None:
    return "formatter" if args[:1] == ["fmt"] and "--check" not in args else None  # cargo fmt, go fmt


def _simple(rule: str) -> Callable[[Matcher, list[str], bool], str | None]:
    def check(m: Matcher, args: list[str], via_xargs: bool) -> str | None:
        return rule if via_xargs or [a for a in args if not a.startswith("-")] else None

    return check


def _dd(m: Matcher, args: list[str], via_xargs: bool) -> str | None:
    return "dd" if any(a.startswith("of=") and not a.startswith("of=/dev/null") for a in args) else None


def _rsync(m: Matcher, args: list[str], via_xargs: bool) -> str | None:
    return "rsync-delete" if any(a.startswith("--delete") or a == "--remove-source-files" for a in args) else None


_RULE_FUNCS = {
    "rm": _rm,
    "git": _git,
    "find": _find,
    "mv": _mv,
    "cp": _mv_cp,
    "ln": lambda m, a, x: "overwrite" if ({"-f", "--force"} & set(a) or any(re.match(r"^-[a-zA-Z]*f", w) for w in a)) and m._overwrites([w for w in a if not w.startswith("-")], set()) else None,
    "tee": _tee,
    "curl": _curl,
    "wget": _wget,
    "tar": _tar,
    "bsdtar": _tar,
    "unzip": _unzip,
    "7z": _seven_zip,
    "7za": _seven_zip,
    "patch": _patch,
    "ruff": _ruff,
    "cargo": _fmt_subcommand,
    "go": _fmt_subcommand,
    **{name: (lambda n: lambda m, a, x: _formatter(m, a, x, n))(name) for name in _FORMATTERS},
    "sed": _sed,
    "gsed": _sed,
    "perl": _perl,
    **{name: _script for name in _INTERPRETERS if name != "perl"},
    "shred": _simple("shred"),
    "srm": _simple("shred"),
    "unlink": _simple("shred"),
    "truncate": _simple("truncate"),
    "dd": _dd,
    "rsync": _rsync,
}


# ---------------------------------------------------------------------- shell helpers
def _tokens(text: str) -> list[str]:
    lex = shlex.shlex(text, posix=True, punctuation_chars=";&|()<>\n")
    lex.whitespace = " \t\r"
    lex.whitespace_split = True
    return list(lex)


def _substitutions(text: str) -> list[str]:
    return [a or b for a, b in _SUBST.findall(text) if (a or b).strip()]


def _split(tokens: list[str]) -> Iterable[list[str]]:
    cur: list[str] = []
    for t in tokens:
        if t in _SEPARATORS or t in ("if", "then", "else", "elif", "fi", "do", "done", "while", "until", "!") and not cur:
            if cur:
                yield cur
            cur = []
            continue
        cur.append(t)
    if cur:
        yield cur


def _redirect_targets(cmd: list[str]) -> list[str]:
    out = []
    for i, t in enumerate(cmd):
        if t in (">", ">|", "&>") and i + 1 < len(cmd):
            out.append(cmd[i + 1])
    return out


def _strip_redirects(cmd: list[str]) -> list[str]:
    out: list[str] = []
    skip = False
    for t in cmd:
        if skip:
            skip = False
            continue
        if t in _REDIRECTS:
            skip = True
            if out and out[-1].isdigit():
                out.pop()
            continue
        out.append(t)
    return out


def _unwrap(cmd: list[str]) -> tuple[list[str], bool]:
    """Drop assignments, wrappers and xargs/timeout prefixes; return (words, ran through xargs)."""
    words = _strip_redirects(cmd)
    via_xargs = False
    changed = True
    while words and changed:
        changed = False
        while words and _ASSIGNMENT.match(words[0]):
            words, changed = words[1:], True
        if not words:
            break
        name = _name(words[0])
        if name in _WRAPPERS:
            words, changed = _skip_options(words[1:], takes_value={"-u", "-g", "-n", "-c", "-p", "-o", "-i", "-e"}), True
        elif name == "env":
            rest = _skip_options(words[1:], takes_value={"-u", "-C", "-S"})
            while rest and _ASSIGNMENT.match(rest[0]):
                rest = rest[1:]
            words, changed = rest, True
        elif name == "timeout":
            rest = _skip_options(words[1:], takes_value={"-s", "-k", "--signal", "--kill-after"})
            words, changed = rest[1:], True
        elif name in ("xargs", "parallel"):
            words = _skip_options(words[1:], takes_value={"-I", "-n", "-P", "-L", "-d", "-E", "-s", "-a", "--max-args", "-j"})
            via_xargs, changed = True, True
    return words, via_xargs


def _skip_options(words: list[str], takes_value: set[str]) -> list[str]:
    i = 0
    while i < len(words) and words[i].startswith("-") and words[i] != "-":
        if words[i] == "--":
            return words[i + 1 :]
        i += 2 if words[i] in takes_value else 1
    return words[i:]


def _name(word: str) -> str:
    return os.path.basename(word)


def _flags(args: list[str]) -> set[str]:
    """Single-letter flags of ``-abc`` style arguments."""
    out: set[str] = set()
    for a in args:
        if a.startswith("-") and not a.startswith("--") and len(a) > 1:
            out.update(a[1:])
    return out


def _shell_script(name: str, args: list[str]) -> str | None:
    if name == "eval":
        return " ".join(args)
    for i, a in enumerate(args):
        if a.startswith("-") and not a.startswith("--") and "c" in a[1:]:
            return args[i + 1] if i + 1 < len(args) else None
    return None


def _find_exec(args: list[str]) -> list[list[str]]:
    out = []
    i = 0
    while i < len(args):
        if args[i] in ("-exec", "-execdir", "-ok", "-okdir"):
            j = i + 1
            while j < len(args) and args[j] not in (";", "\\;", "+"):
                j += 1
            out.append([a for a in args[i + 1 : j] if a != "{}"] or ["true"])
            i = j
        i += 1
    return out


def is_destructive(command: str, cwd: str | None = None) -> bool:
    """Shorthand with the default rules."""
    return Matcher(cwd=cwd)(command)
