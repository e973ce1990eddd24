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

import json
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
_RUN_WRAPPERS = {"uv", "poetry", "pdm", "pipenv", "hatch", "rye", "conda", "mamba", "micromamba", "pixi", "pipx"}
_RUN_VALUED = {"--with", "--python", "-p", "--env", "-e", "-n", "--name", "--prefix", "--project", "--directory", "--package", "--extra", "--group", "--env-file",
               "--spec", "--pip-args"}
#: ``python -m MODULE`` runs the command of this name (the module's own name otherwise)
_MODULE_COMMANDS = {"pre_commit": "pre-commit", "lib2to3": "2to3", "nbconvert": "jupyter-nbconvert", "codespell_lib": "codespell"}
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
    "script-delete": "python/node one-liners and heredoc scripts that delete or write files (rmtree, os.remove, open(..., 'w'), "
                     "Path.rename, df.to_csv, np.save, savefig, shutil.copy, SQL DELETE/UPDATE/DROP through a driver)",
    "tee": "tee (without -a) onto an existing file",
    "git-rm": "git rm deletes files from the working tree",
    "git-branch-delete": "git branch -D / git worktree remove / git tag -d / git update-ref -d",
    "git-prune": "git gc --prune=now / git prune / git reflog expire / filter-branch lose unreachable commits (a dropped stash, a reset branch)",
    "download-overwrite": "curl -o / -O, wget -O onto a file",
    "extract": "tar -x / unzip / 7z x / cpio -i write files over existing ones",
    "patch": "patch / git apply rewrite files",
    "formatter": "formatters and fixers that rewrite files in place (black, ruff format, prettier --write, gofmt -w, pre-commit run, ...)",
    "move-out": "mv moves files out of the project (or to a place given by a variable)",
    "container-mount": "docker / podman run with the project (or a folder of it) mounted writable: what runs inside can change any file",
    "unparsed": "could not understand the command (unbalanced quotes, a command named by a variable): snapshot rather than skip",
    "pattern": "matches a configured extra pattern",
}


class Finding(tuple):  # a NamedTuple would import typing on every harmless hook call
    """One reason a command looks destructive: ``(rule, command)``; ``where``: the directory it runs in when that is
    not the command line's own (after a ``cd``, in a script's folder: ``None`` there when it cannot be told)."""

    __slots__ = ()

    def __new__(cls, rule: str, command: str, where: str | None = "") -> Finding:
        return tuple.__new__(cls, (rule, command) if where == "" else (rule, command, where))

    @property
    def where(self) -> str | None:
        """The directory the command runs in: ``""`` the command line's own, ``None`` not known."""
        return self[2] if len(self) > 2 else ""

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
        self._seen: set[str] = set()
        self._start = cwd  # (findings made elsewhere, after a cd, say where: safety.unrestorable reads it)

    # ------------------------------------------------------------------ public
    def findings(self, command: str) -> list[Finding]:
        """Every reason ``command`` looks destructive (empty: harmless)."""
        if not command or not command.strip():
            return []
        if any(p.search(command) for p in self._ignore):
            return []
        out: list[Finding] = []
        self._seen = set()  # scripts read for this command (a loop of scripts ends)
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
        cwd = self.cwd
        try:
            for cmd in _split(tokens):
                self._check(cmd, out, depth, text)
                words = _unwrap(cmd)[0]
                if words[:1] == ["cd"]:  # later commands of the line run there (a script read from it, a target)
                    self.cwd = _cd(self.cwd, words[1:])
        finally:
            self.cwd = cwd

    def _check(self, cmd: list[str], out: list[Finding], depth: int, line: str, implicit: bool = False) -> None:
        first = len(out)
        try:
            self._check_one(cmd, out, depth, line, implicit)
        finally:
            if self.cwd != self._start:
                out[first:] = [f if len(f) > 2 else Finding(f.rule, f.command, self.cwd) for f in out[first:]]

    def _check_one(self, cmd: list[str], out: list[Finding], depth: int, line: str, implicit: bool) -> None:
        plain = _strip_redirects(cmd)
        if len(plain) > 2 and _name(plain[0]) in ("hatch", "pdm", "rye") and plain[1] == "run":  # a pyproject script
            self._scan_runner(_name(plain[0]), plain[1:], out, depth)
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
        if "$" in words[0]:  # a command named by a variable (`$RM x`, `rm$IFS-rf src`): cannot tell what runs
            out.append(Finding("unparsed", shown))
        for p in self._extra:
            if p.search(shown):
                out.append(Finding("pattern", shown))
        if name in _SHELLS or name == "eval":
            script = _shell_script(name, args)
            if script is not None:
                self._scan(script, out, depth + 1)
            elif name != "eval":
                self._run_file(_script_operand(args, _SHELL_VALUED), "shell", out, depth)
            return
        if name in ("source", "."):
            self._run_file(args[0] if args else None, "shell", out, depth)
            return
        if name in ("su", "runuser", "script", "sg", "flock", "watch") and "/" not in words[0]:  # (not ./script)
            script = _option_value(args, ("-c", "--command")) if name != "watch" else " ".join(_skip_options(args, {"-n", "--interval"}))
            if script:
                self._scan(script, out, depth + 1)
            return
        if name in _PACKAGE_RUNNERS:
            self._scan_package_scripts(name, args, out, depth)
        elif name in ("nox", "tox", "just"):
            self._scan_runner(name, args, out, depth)
        elif name in ("make", "gmake"):
            self._scan_make(args, out, depth)
        elif _interpreter(name) and "-c" not in args and "-e" not in args:
            self._run_file(_script_operand(args, _INTERPRETER_VALUED), _interpreter(name), out, depth)
        elif "/" in words[0] and name not in _RULE_FUNCS:
            self._run_file(words[0], None, out, depth)  # ./reset.sh, scripts/build: what its shebang names reads it
        rule = _RULE_FUNCS.get(_interpreter(name) or name)
        if rule is not None:
            hit = rule(self, args, via_xargs)
            if hit:
                out.append(Finding(hit, shown))
        if name == "find":
            for inner in _find_exec(args):
                self._check(inner, out, depth + 1, line, implicit=True)
        if name in _SQL_CLIENTS and _SQL.search(line):
            out.append(Finding("sql-drop", line.strip()[:200]))

    # ------------------------------------------------------------------ the project's own scripts
    def _read_script(self, path: str | None, out: list[Finding], depth: int) -> str | None:
        """The text of a script the command runs (None: nothing to read: missing, a binary, read already)."""
        if not path or self.cwd is None or "$" in path or depth >= 8:
            return None
        full = os.path.realpath(os.path.join(self.cwd, os.path.expanduser(path)))
        if full in self._seen:
            return None
        self._seen.add(full)
        try:
            with open(full, "rb") as f:
                head = f.read(4096)
                if b"\0" in head:
                    return None  # a program, not a script: its name is all there is to judge
                rest = f.read(MAX_SCRIPT + 1 - len(head))
        except (IsADirectoryError, FileNotFoundError, NotADirectoryError):
            return None
        except OSError:
            out.append(Finding("unparsed", f"{path} (cannot be read)"))
            return None
        if len(head) + len(rest) > MAX_SCRIPT:
            out.append(Finding("unparsed", f"{path} (a script too large to read)"))
            return None
        return (head + rest).decode("utf-8", "replace")

    def _run_file(self, path: str | None, reader: str | None, out: list[Finding], depth: int) -> None:
        """Judge a script file by what it holds: a shell script by these rules, another language by its deletes."""
        text = self._read_script(path, out, depth)
        if text is None:
            return
        if reader is None:  # run by name: the shebang says what reads it (none: sh)
            first = text.split("\n", 1)[0]
            words = first[2:].split() if first.startswith("#!") else ["sh"]
            if words and _name(words[0]) == "env":
                words = [w for w in words[1:] if not w.startswith("-") and "=" not in w]
            name = _name(words[0]) if words else "sh"
            reader = "shell" if name in _SHELLS else (_interpreter(name) or "")
        if reader == "shell":
            self._scan(self._heredocs(text, out), out, depth + 1)
        elif reader and _SCRIPT_DELETE.search(text):
            out.append(Finding("script-delete", f"{path} ({reader} script)"))

    def _scan_package_scripts(self, runner: str, args: list[str], out: list[Finding], depth: int) -> None:
        """``npm run X`` / ``yarn X`` / ``pnpm X`` / ``bun run X``: package.json's script X, with its pre/post scripts."""
        prefix = _option_value(args, ("--prefix", "--cwd", "-C", "--dir")) or "."
        words = _skip_options(args, {"--prefix", "--cwd", "-C", "--dir", "-w", "--workspace", "--filter", "-F"})
        names = _package_script_names(runner, words)
        if not names or self.cwd is None:
            return
        text = self._read_script(os.path.join(prefix, "package.json"), out, depth)
        try:
            scripts = (json.loads(text) if text else {}).get("scripts")
        except (ValueError, AttributeError):
            return
        if not isinstance(scripts, dict):
            return
        self._seen.discard(os.path.realpath(os.path.join(self.cwd, prefix, "package.json")))  # (another script may run npm again)
        cwd = self.cwd
        self.cwd = os.path.join(cwd, prefix)  # a package's scripts run in its folder
        try:
            for name in names:
                for key in (f"pre{name}", name, f"post{name}"):
                    body = scripts.get(key)
                    seen = f"{os.path.realpath(self.cwd)}\0{key}"
                    if isinstance(body, str) and seen not in self._seen:
                        self._seen.add(seen)
                        self._scan(body, out, depth + 1)
        finally:
            self.cwd = cwd

    def _scan_runner(self, runner: str, args: list[str], out: list[Finding], depth: int) -> None:
        """``nox -s NAME`` / ``tox -e NAME`` / ``just NAME`` / ``hatch run NAME``: the commands of what is named, read
        from the project (agentsnap_claude_code.runners)."""
        if self.cwd is None or depth >= 8:
            return
        from agentsnap_claude_code import runners

        def read(path: str) -> str | None:
            full = os.path.realpath(path)
            self._seen.discard(full)  # (a session may run nox again: the commands below are bounded by depth)
            return self._read_script(os.path.relpath(full, self.cwd), out, depth) if os.path.isfile(full) else None

        source = ""
        try:
            if runner == "nox":
                commands, source = runners.nox_commands(self.cwd, args, read)
            elif runner == "just":
                commands, source = runners.just_commands(self.cwd, args, read)
            elif runner == "tox":
                commands = runners.tox_commands(self.cwd, args, read)
            else:  # hatch run / pdm run / rye run SCRIPT
                commands = runners.pyproject_commands(self.cwd, runner, args[1:], read)
        except ValueError as e:
            out.append(Finding("unparsed", str(e)))
            return
        except Exception as e:  # noqa: BLE001 - a configuration of a shape not foreseen: snapshot rather than skip
            out.append(Finding("unparsed", f"{' '.join([runner, *args])[:120]} (its configuration could not be read: {e})"))
            return
        if source and _SCRIPT_DELETE.search(source):
            out.append(Finding("script-delete", f"{' '.join([runner, *args])[:120]} (a script in Python or another language)"))
        for line in commands:
            self._scan(line, out, depth + 1)

    def _scan_make(self, args: list[str], out: list[Finding], depth: int) -> None:
        """``make [GOAL...]``: the recipes of the goals named (else the first target) and of what they depend on."""
        if {"-n", "--dry-run", "--just-print", "--recon", "-q", "--question", "-p", "--print-data-base"} & set(args) or self.cwd is None:
            return
        folder = _option_value(args, ("-C", "--directory")) or "."
        named = _option_value(args, ("-f", "--file", "--makefile"))
        operands = _skip_options(args, {"-C", "--directory", "-f", "--file", "--makefile", "-o", "-W", "-I", "-l", "--include-dir"})
        goals = [w for w in operands if "=" not in w and not w.startswith("-") and not w.isdigit()]
        assigned = dict(w.split("=", 1) for w in operands if "=" in w and not w.startswith("-"))
        for candidate in ([named] if named else ["GNUmakefile", "makefile", "Makefile"]):
            path = os.path.join(folder, candidate)
            if self.cwd is not None and os.path.isfile(os.path.join(self.cwd, path)):
                break
        else:
            return
        text = self._read_script(path, out, depth)
        if text is None:
            return
        rules, first, variables = _parse_makefile(text)
        variables.update(assigned)
        recipes: list[str] = []

        def visit(goal: str) -> list[str]:
            if goal not in rules:
                return []
            prereqs, lines = rules[goal]
            recipes.extend(_make_expand(line, variables).lstrip("@+- \t") for line in lines)
            return [_make_expand(p, variables) for p in prereqs]

        each_once(goals or ([first] if first else []), visit)
        cwd = self.cwd
        self.cwd = os.path.join(cwd, folder)
        try:
            if recipes:
                self._scan(self._heredocs("\n".join(recipes), out), out, depth + 1)
        finally:
            self.cwd = cwd

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
    if sub == "mv" and ("f" in flags or "--force" in rest) and not ({"n"} & flags or "--dry-run" in rest):
        return "overwrite"  # git mv -f onto a file that exists
    if sub == "apply" and not ({"--check", "--stat", "--numstat", "--summary", "--cached", "--index"} & set(rest)):
        return "patch"
    if sub in ("am", "cherry-pick", "revert", "merge", "rebase", "pull") and "--abort" not in rest:
        return None  # they refuse to run over local changes
    if (sub == "branch" and ("-D" in rest or "--delete" in rest and "--force" in rest)) or (sub == "worktree" and rest[:1] == ["remove"]):
        return "git-branch-delete"
    if (sub == "tag" and ("-d" in rest or "--delete" in rest)) or (sub == "update-ref" and "-d" in rest):
        return "git-branch-delete"  # (a deleted tag is in no reflog)
    if sub == "checkout" and _checkout_overwrites(m, rest):
        return "git-checkout-discard"
    if sub == "submodule" and rest[:1] == ["deinit"] and ("f" in flags or "--force" in rest or "--all" in rest):
        return "git-clean"
    if (sub == "gc" and any(a in ("--prune=now", "--prune=all") for a in rest)) or sub == "prune" and not ({"n"} & flags or "--dry-run" in rest) \
            or (sub == "reflog" and rest[:1] in (["expire"], ["delete"])) or sub in ("filter-branch", "filter-repo"):
        return "git-prune"
    return None


def _checkout_overwrites(m: Matcher, rest: list[str]) -> bool:
    """``git checkout [TREE-ISH] PATH...`` (no ``--``): the files named are overwritten from the index or TREE-ISH."""
    if {"--ours", "--theirs", "-p", "--patch", "-m", "--merge"} & set(rest):
        return True
    operands = _skip_options(rest, {"-b", "-B", "--orphan", "-t", "--track", "--conflict"})
    operands = [a for a in operands if not a.startswith("-")]
    if len(operands) >= 2:
        return True
    return bool(operands) and m.cwd is not None and os.path.lexists(os.path.join(m.cwd, operands[0]))


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
    r"rmtree|os\.(remove|unlink|rmdir|rename|replace|truncate)|\.unlink\(|fs\.(rm|rmSync|unlink|unlinkSync|rmdir|writeFileSync|writeFile)\b|\.(rmSync|unlinkSync|rmdirSync|writeFileSync|truncateSync|renameSync)\("
    r"|File\.delete|unlink\s*\(|\bopen\s*\([^)]*,\s*(mode\s*=\s*)?[\"'](w|x|r\+|rb\+)|\.write_(text|bytes)\(|shutil\.move|File\.write"
    # Path("out.txt").open("w"); Path.rename; pandas / numpy / matplotlib writers (df.to_csv("data.csv") rewrites the
    # data it read); shutil's copies onto existing files; SQL that changes a database file through a driver
    r"|\.open\s*\(\s*(mode\s*=\s*)?[\"'](w|x|r\+|rb\+)|\.rename\(|\.to_(csv|parquet|excel|json|pickle|feather|hdf|sql|stata|orc|xml)\s*\("
    r"|\bnp\.(save|savez|savez_compressed|savetxt)\s*\(|\bnumpy\.(save|savez|savetxt)\s*\(|\.tofile\(|\.savefig\(|\bimsave\("
    r"|shutil\.(copy|copy2|copyfile|copytree)\s*\(|\.execute(many|script)?\s*\(\s*[rbuf]*[\"']{1,3}\s*(drop|delete|truncate|update|alter|replace)\b"
    , re.I)


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
    if args[:1] != ["format"] and ("--fix" in args or "--unsafe-fixes" in args) and "--diff" not in args:
        return "formatter"  # ruff check --fix, and ruff --fix . of ruff < 0.5
    return None


def _fmt_when(*flags: str) -> Callable[[Matcher, list[str], bool], str | None]:
    """A fixer that rewrites files only with one of ``flags`` (``autoflake -i``, ``rubocop -a``)."""
    return lambda m, a, x: "formatter" if set(flags) & {w.split("=", 1)[0] for w in a} else None


def _fmt_unless(*flags: str, sub: tuple[str, ...] = ()) -> Callable[[Matcher, list[str], bool], str | None]:
    """A formatter that rewrites files unless told to check (``deno fmt --check``); ``sub``: only these subcommands."""

    def check(m: Matcher, a: list[str], x: bool) -> str | None:
        if sub and not (a[:1] and a[0] in sub):
            return None
        given = {w.split("=", 1)[0] for w in a} | set(a)
        return None if given & {*flags, "--help", "-h", "--version"} else "formatter"

    return check


def _subcommands(table: dict[str, Callable[[Matcher, list[str], bool], str | None]],
                 otherwise: Callable[[Matcher, list[str], bool], str | None] | None = None) -> Callable[[Matcher, list[str], bool], str | None]:
    """Rules by subcommand (``cargo fmt`` / ``cargo fix`` / ``cargo clippy --fix``)."""

    def check(m: Matcher, a: list[str], x: bool) -> str | None:
        rule = table.get(a[0]) if a else None
        if rule is not None:
            return rule(m, a[1:], x)
        return otherwise(m, a, x) if otherwise is not None else None

    return check


def _pre_commit(m: Matcher, args: list[str], via_xargs: bool) -> str | None:
    """``pre-commit [run]``: its hooks (trailing-whitespace, end-of-file-fixer, black, ruff --fix ...) rewrite files."""
    if {"--help", "-h", "--version", "-V"} & set(args):
        return None
    sub = next((a for a in _skip_options(args, {"-c", "--config", "--color"}) if not a.startswith("-")), None)
    return "formatter" if sub in (None, "run", "try-repo", "autoupdate", "hook-impl") else None


def _nbqa(m: Matcher, args: list[str], via_xargs: bool) -> str | None:
    """``nbqa black nb.ipynb``: the tool named, applied to notebooks in place."""
    rule = _RULE_FUNCS.get(_name(args[0])) if args else None
    return rule(m, args[1:], True) if rule is not None else None


_BUILD_FORMAT_GOAL = re.compile(r"(?i)^(?:[\w.-]*:)*(spotlessapply|ktlintformat|formatkotlin|format\w*|\w+:(apply|format|sort|fix))$")


def _build_goals(m: Matcher, args: list[str], via_xargs: bool) -> str | None:
    """``gradle spotlessApply`` / ``mvn spotless:apply`` / ``mvn fmt:format``: goals that rewrite sources."""
    return "formatter" if any(_BUILD_FORMAT_GOAL.match(a) for a in args if not a.startswith("-")) else None


_CONTAINER_VALUED = {"-e", "--env", "--env-file", "--name", "-w", "--workdir", "-u", "--user", "-p", "--publish", "--network",
                     "--entrypoint", "-h", "--hostname", "--platform", "--label", "-l", "--cpus", "-m", "--memory", "--gpus",
                     "--add-host", "--dns", "--pull", "--restart", "--stop-signal", "--shm-size", "--ulimit", "--cap-add",
                     "--cap-drop", "--device", "--tmpfs", "--security-opt", "--log-driver", "--log-opt", "--ipc", "--pid"}


def _container(m: Matcher, args: list[str], via_xargs: bool) -> str | None:
    """``docker run -v "$PWD":/src img make``: a bind mount of the project (or part of it), not read-only."""
    i = 0
    while i < len(args) and args[i].startswith("-"):  # docker --context x run / podman --remote run
        i += 2 if args[i] in ("-c", "--context", "-H", "--host", "--config", "--log-level", "--url", "--connection") else 1
    if i >= len(args) or args[i] not in ("run", "create") and args[i:i + 2] != ["container", "run"]:
        return None
    rest = args[i + (2 if args[i] == "container" else 1):]
    mounts: list[tuple[str, bool]] = []
    j = 0
    while j < len(rest) and rest[j].startswith("-"):
        opt, _, value = rest[j].partition("=")
        if opt in ("-v", "--volume", "--mount"):
            if not value:
                j += 1
                value = rest[j] if j < len(rest) else ""
            if opt == "--mount":
                fields = dict(f.partition("=")[::2] for f in value.split(","))
                if fields.get("type", "volume") == "bind":
                    ro = "readonly" in fields or "ro" in fields or fields.get("readonly") == "true"
                    mounts.append((fields.get("source") or fields.get("src") or "", ro))
            else:
                parts = value.split(":")
                mounts.append((parts[0], len(parts) > 2 and "ro" in parts[2].split(",")))
        elif opt.startswith("-v") and len(opt) > 2:  # -v$PWD:/src
            parts = opt[2:].split(":")
            mounts.append((parts[0], len(parts) > 2 and "ro" in parts[2].split(",")))
        elif opt in _CONTAINER_VALUED and not value:
            j += 1
        j += 1
    for source, read_only in mounts:
        if read_only or not source:
            continue
        if "/" not in source and "$" not in source and "`" not in source and not source.startswith((".", "~")):
            continue  # a named volume (data:/var/lib/x), not a folder of the project
        if m.cwd is None or not source.startswith("/"):  # ., $PWD, $(pwd), ~/x: relative to where it runs, or unknown
            return "container-mount"
        here, there = os.path.realpath(m.cwd), os.path.realpath(source)
        if there == here or there.startswith(here + "/") or here.startswith(there.rstrip("/") + "/"):
            return "container-mount"
    return None


def _output_onto(*options: str) -> Callable[[Matcher, list[str], bool], str | None]:
    """A tool writing the file an option names (``iconv -o F``, ``openssl ... -out F``, ``gpg -o F``): over an existing one."""

    def check(m: Matcher, a: list[str], x: bool) -> str | None:
        target = _option_value(a, options)
        if target is None:
            target = next((w[len(o):] for w in a for o in options if not o.startswith("--") and w.startswith(o) and len(w) > len(o)), None)
        return "overwrite" if target is not None and target != "-" and m._exists(target) else None

    return check


def _last_operand_onto(needs: str = "") -> Callable[[Matcher, list[str], bool], str | None]:
    """``convert in.png out.png`` / ``ffmpeg -y -i in out``: the last operand is written (ffmpeg only with ``-y``)."""

    def check(m: Matcher, a: list[str], x: bool) -> str | None:
        operands = [w for w in a if not w.startswith("-")]
        if needs and needs not in a or len(operands) < (1 if needs else 2):
            return None
        return "overwrite" if m._exists(operands[-1]) else None

    return check


def _in_place_unless(*flags: str) -> Callable[[Matcher, list[str], bool], str | None]:
    """``dos2unix FILE`` rewrites FILE unless told to write a new one (``-n IN OUT``)."""
    return lambda m, a, x: None if {*flags, "--help", "--version"} & set(a) else _simple("in-place-edit")(m, a, x)


def _compressor(keeps_by_default: bool) -> Callable[[Matcher, list[str], bool], str | None]:
    """gzip / xz / bzip2 (and their un- forms) replace the file they are given; zstd and lz4 only with ``--rm``."""

    def check(m: Matcher, a: list[str], x: bool) -> str | None:
        flags = _flags(a) | {w for w in a if w.startswith("--")}
        if keeps_by_default and "--rm" not in a:
            return None
        if flags & {"c", "k", "t", "l", "h", "V", "--stdout", "--to-stdout", "--keep", "--test", "--list", "--help", "--version"}:
            return None
        return "overwrite" if x or [w for w in a if not w.startswith("-")] else None

    return check


def _simple(rule: str) -> Callable[[Matcher, list[str], bool], str | None]:
    def check(m: Matcher, args: list[str], via_xargs: bool) -> str | None:
        return rule if via_xargs or [a for a in args if not a.startswith("-")] else None

    return check


def _awk(m: Matcher, args: list[str], via_xargs: bool) -> str | None:
    return "in-place-edit" if any(args[i] == "-i" and args[i + 1] in ("inplace", "inplace.awk") for i in range(len(args) - 1)) or "-iinplace" in args else None


def _sort(m: Matcher, args: list[str], via_xargs: bool) -> str | None:
    target = _option_value(args, ("-o", "--output"))
    return "overwrite" if target is not None and m._exists(target) else None


def _sponge(m: Matcher, args: list[str], via_xargs: bool) -> str | None:
    return None if "-a" in args else _tee(m, args, via_xargs)


def _rename(m: Matcher, args: list[str], via_xargs: bool) -> str | None:
    return None if {"-n", "--no-act", "--just-print", "--help", "--version"} & set(args) else "overwrite"


def _php(m: Matcher, args: list[str], via_xargs: bool) -> str | None:
    code = _option_value(args, ("-r",))
    return "script-delete" if code is not None and _SCRIPT_DELETE.search(code) else None


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
    "cargo": _subcommands({"fmt": _fmt_unless("--check"), "fix": _fmt_unless(), "clippy": _fmt_when("--fix")}),
    "go": _subcommands({"fmt": _fmt_unless(), "fix": _fmt_unless()}),
    # formatters and fixers of other languages and tools (each rewrites files in place as used here)
    **{name: _fmt_unless("--check", "--diff") for name in ("blue", "pycln", "ssort", "mdformat", "yamlfix", "nixfmt", "alejandra")},
    **{name: _fmt_unless() for name in ("pyupgrade", "add-trailing-comma", "reorder-python-imports", "phpcbf")},
    **{name: _fmt_when("-i", "--in-place") for name in ("autoflake", "docformatter", "cmake-format", "swift-format")},
    **{name: _fmt_when("--fix") for name in ("standardrb", "standard", "xo", "markdownlint", "markdownlint-cli2", "stylelint", "oxlint")},
    "codespell": _fmt_when("-w", "--write-changes"),
    "2to3": _fmt_when("-w", "--write"),
    "djlint": _fmt_when("--reformat"),
    "gofumpt": _fmt_when("-w"),
    "elm-format": _fmt_when("--yes"),
    "ktlint": _fmt_when("-F", "--format"),
    "google-java-format": _fmt_when("-i", "--replace"),
    "clang-tidy": _fmt_when("--fix", "--fix-errors"),
    "latexindent": _fmt_when("-w", "--overwrite", "-overwrite", "--overwriteIfDifferent"),
    "rubocop": _fmt_when("-a", "-A", "--autocorrect", "--autocorrect-all", "--auto-correct", "--auto-correct-all", "-x", "--fix-layout"),
    "biome": _fmt_when("--write", "--fix", "--apply", "--apply-unsafe", "--unsafe"),
    "swiftformat": _fmt_unless("--lint", "--dryrun"),
    "scalafmt": _fmt_unless("--check", "--test", "--list"),
    "nbstripout": _fmt_unless("--dry-run", "--is-stripped", "--verify", "--status"),
    "jupyter-nbconvert": _fmt_when("--inplace", "--clear-output"),
    "jupyter": _subcommands({"nbconvert": _fmt_when("--inplace", "--clear-output")}),
    "nbqa": _nbqa,
    "sqlfluff": _subcommands({"fix": _fmt_unless(), "format": _fmt_unless()}),
    "php-cs-fixer": _subcommands({"fix": _fmt_unless("--dry-run")}),
    "buf": _subcommands({"format": _fmt_when("-w", "--write")}),
    "taplo": _subcommands({"fmt": _fmt_unless("--check"), "format": _fmt_unless("--check")}),
    "dprint": _subcommands({"fmt": _fmt_unless()}),
    "hatch": _subcommands({"fmt": _fmt_unless("--check")}),
    "zig": _subcommands({"fmt": _fmt_unless("--check")}),
    "gleam": _subcommands({"format": _fmt_unless("--check")}),
    "mix": _subcommands({"format": _fmt_unless("--check-formatted", "--dry-run")}),
    "dotnet": _subcommands({"format": _fmt_unless("--verify-no-changes")}),
    "dart": _subcommands({"format": _fmt_unless("--output", "-o"), "fix": _fmt_when("--apply")}),
    **{name: _subcommands({"fmt": _fmt_unless("-check", "--check", "-write", "--write")}) for name in ("terraform", "tofu", "packer")},
    "golangci-lint": _subcommands({"run": _fmt_when("--fix"), "fmt": _fmt_unless("--diff")}),
    **{name: _build_goals for name in ("gradle", "gradlew", "mvn", "mvnw")},
    **{name: _container for name in ("docker", "podman", "nerdctl")},
    # editors run from a script, converters and compressors that rewrite or replace the files they are given
    **{name: _simple("in-place-edit") for name in ("vim", "vi", "nvim", "ex", "ed", "mogrify")},
    **{name: _in_place_unless("-n", "--newfile", "-i", "--info") for name in ("dos2unix", "unix2dos", "mac2unix", "unix2mac")},
    **{name: _compressor(False) for name in ("gzip", "gunzip", "bzip2", "bunzip2", "xz", "unxz", "lzma", "unlzma", "compress", "uncompress")},
    **{name: _compressor(True) for name in ("zstd", "unzstd", "lz4")},
    "iconv": _output_onto("-o", "--output"),
    "openssl": _output_onto("-out"),
    "gpg": _output_onto("-o", "--output"),
    "pandoc": _output_onto("-o", "--output"),
    "ffmpeg": _last_operand_onto("-y"),
    **{name: _last_operand_onto() for name in ("convert", "magick")},
    "pre-commit": _pre_commit,
    "prek": _pre_commit,
    **{name: (lambda n: lambda m, a, x: _formatter(m, a, x, n))(name) for name in _FORMATTERS},
    "sed": _sed,
    "gsed": _sed,
    "perl": _perl,
    **{name: _script for name in _INTERPRETERS if name != "perl"},
    "deno": _subcommands({"fmt": _fmt_unless("--check"), "lint": _fmt_when("--fix")}, otherwise=_script),
    "shred": _simple("shred"),
    "srm": _simple("shred"),
    "unlink": _simple("shred"),
    "truncate": _simple("truncate"),
    "dd": _dd,
    "rsync": _rsync,
    "rimraf": _simple("rm"),
    "del": _simple("rm"),
    "del-cli": _simple("rm"),
    "trash": _simple("rm"),
    "trash-put": _simple("rm"),
    "awk": _awk,
    "gawk": _awk,
    "yq": lambda m, a, x: "in-place-edit" if {"-i", "--inplace"} & set(a) else None,
    "sort": _sort,
    "sponge": _sponge,
    "rename": _rename,
    "prename": _rename,
    "perl-rename": _rename,
    "file-rename": _rename,
    "install": lambda m, a, x: None if {"-d", "--directory"} & set(a) else _mv_cp(m, _skip_valued(a, {"-m", "--mode", "-o", "--owner", "-g", "--group", "-S", "--suffix"}), x),
}
_RULE_FUNCS["php"] = _php


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
        elif _interpreter(name) in ("python", "python3") and _module_command(words) is not None:
            words, changed = _module_command(words) or [], True  # python -m black . is black .
        elif name in _RUN_WRAPPERS and words[1:2] == ["run"]:  # uv run / poetry run ... CMD
            words, changed = _skip_options(words[2:], takes_value=_RUN_VALUED), True
        elif name in ("busybox", "setsid", "chronic", "strace", "ltrace", "catchsegv"):
            words, changed = _skip_options(words[1:], takes_value={"-o", "-e", "-p", "-s", "-E", "-u", "-P"}), True
        elif name == "flock" and "-c" not in words:
            rest = _skip_options(words[1:], takes_value={"-w", "--timeout", "-E", "--conflict-exit-code"})
            words, changed = rest[1:], True
        elif name in ("xargs", "parallel"):
            words = _skip_options(words[1:], takes_value={"-I", "-n", "-P", "-L", "-d", "-E", "-s", "-a", "--max-args", "-j"})
            via_xargs, changed = True, True
    return words, via_xargs


def _module_command(words: list[str]) -> list[str] | None:
    """``python [-X dev] -m black .`` -> ``["black", "."]`` (None: not ``-m``)."""
    i = 1
    while i < len(words) and words[i].startswith("-") and words[i] != "-m":
        if words[i] in ("-c", "--"):
            return None
        i += 2 if words[i] in _INTERPRETER_VALUED else 1
    if i + 1 < len(words) and words[i] == "-m":
        return [_MODULE_COMMANDS.get(words[i + 1], words[i + 1]), *words[i + 2 :]]
    return None


def each_once(start: Iterable[str], visit: Callable[[str], Iterable[str]]) -> None:
    """Visit the names in ``start`` and those each visit leads to (a goal's prerequisites, a recipe's dependencies,
    the sessions a nox session notifies), each name once, in order; ``visit(name)`` returns the names it leads to."""
    todo, done = list(start), set()
    while todo:
        name = todo.pop(0)
        if name not in done:
            done.add(name)
            todo.extend(visit(name))


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


#: a script larger than this is not read (the command is snapshotted rather than judged blind)
MAX_SCRIPT = 1 << 20
_SHELL_VALUED = {"-o", "+o", "-O", "+O", "--init-file", "--rcfile"}
_INTERPRETER_VALUED = {"-W", "-X", "-r", "--require", "--import", "--loader", "-I", "-E", "--env-file"}
_PACKAGE_RUNNERS = {"npm", "yarn", "pnpm", "bun"}
#: their own verbs: anything else after ``yarn`` / ``pnpm`` / ``bun`` is a script of package.json
_PACKAGE_VERBS = frozenset(
    "add remove install i ci uninstall un rm update up upgrade link unlink publish pack init create dlx exec x info why"
    " list ls outdated audit config cache login logout version help import patch rebuild prune store node bin global"
    " workspace workspaces set plugin tag view search whoami".split()
)
_NPM_SCRIPT_VERBS = {"test": "test", "t": "test", "tst": "test", "start": "start", "stop": "stop", "restart": "restart"}


def _interpreter(name: str) -> str:
    """``python3.11`` -> ``python3``; the interpreter a name runs ('' for none)."""
    if name in _INTERPRETERS:
        return name
    m = re.fullmatch(r"(python3?|ruby|node|perl|php)[\d.]+", name)
    return (m.group(1) if m.group(1) in _INTERPRETERS else "") if m else ""


def _script_operand(args: list[str], valued: set[str]) -> str | None:
    """The script file of ``sh [options] FILE`` / ``python [options] FILE`` (None: a module, stdin, none)."""
    i = 0
    while i < len(args):
        a = args[i]
        if a in ("-m", "-", "--eval", "-p", "--print", "-s"):
            return None
        if a == "--":
            return args[i + 1] if i + 1 < len(args) else None
        if a.startswith(("-", "+")):
            i += 2 if a in valued else 1
            continue
        return a
    return None


def _skip_valued(args: list[str], valued: set[str]) -> list[str]:
    """``args`` without the options in ``valued`` and their values."""
    out, skip = [], False
    for a in args:
        if skip:
            skip = False
        elif a in valued:
            skip = True
        else:
            out.append(a)
    return out


def _option_value(args: list[str], names: tuple[str, ...]) -> str | None:
    for i, a in enumerate(args):
        if a in names and i + 1 < len(args):
            return args[i + 1]
        for n in names:
            if n.startswith("--") and a.startswith(n + "="):
                return a.split("=", 1)[1]
    return None


def _package_script_names(runner: str, words: list[str]) -> list[str]:
    if not words:
        return ["install", "prepare"] if runner in ("npm", "yarn", "pnpm") else []
    verb, rest = words[0], [w for w in words[1:] if not w.startswith("-")]
    if verb in ("run", "run-script", "rum", "urn"):
        return rest[:1]
    if runner == "npm":
        if verb in _NPM_SCRIPT_VERBS:
            return ["stop", "start"] if verb == "restart" else [_NPM_SCRIPT_VERBS[verb]]
        return ["preinstall", "install", "postinstall", "prepare"] if verb in ("install", "i", "ci") and not rest else []
    if verb in ("install", "i") and not rest:
        return ["install", "prepare"]
    return [] if verb in _PACKAGE_VERBS else [verb]


def _cd(cwd: str | None, args: list[str]) -> str | None:
    """Where ``cd ARGS`` goes from ``cwd`` (None: cannot tell, every later target then counts as existing)."""
    target = next((a for a in args if not a.startswith("-")), None)
    if cwd is None or not target or "$" in target or "~" in target:
        return None
    new = os.path.normpath(os.path.join(cwd, target))
    return new if os.path.isdir(new) else None


_MAKE_RULE = re.compile(r"^([^\s:=#][^:=#]*?)\s*::?(?!=)\s*(.*)$")
_MAKE_VAR = re.compile(r"^(?:override\s+|export\s+)?([A-Za-z_][A-Za-z0-9_.]*)\s*(?::{1,3}=|\?=|\+=|!=|=)\s*(.*)$")
_MAKE_REF = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_.]*)\)|\$\{([A-Za-z_][A-Za-z0-9_.]*)\}")
#: GNU make's own defaults that recipes use as commands
_MAKE_DEFAULTS = {"RM": "rm -f", "MAKE": "make", "CC": "cc", "CXX": "g++", "CP": "cp", "MV": "mv", "SHELL": "/bin/sh"}


def _parse_makefile(text: str) -> tuple[dict[str, tuple[list[str], list[str]]], str | None, dict[str, str]]:
    """``(rules, first target, variables)`` of a makefile: for each target its prerequisites and recipe lines."""
    rules: dict[str, tuple[list[str], list[str]]] = {}
    variables = dict(_MAKE_DEFAULTS)
    first: str | None = None
    current: list[str] = []
    for line in text.replace("\\\n", " ").split("\n"):
        if line.startswith("\t"):
            for t in current:
                rules[t][1].append(line[1:])
            continue
        code = line.split("#", 1)[0].rstrip()
        var = _MAKE_VAR.match(code)
        rule = None if var else _MAKE_RULE.match(code)
        if var:
            name, value = var.groups()
            variables[name] = (variables.get(name, "") + " " + value).strip() if "+=" in code else value
            current = []
        elif rule:
            targets = [t for t in rule.group(1).split() if "%" not in t]
            prereqs, _, inline = rule.group(2).partition(";")
            current = targets
            for t in targets:
                entry = rules.setdefault(t, ([], []))
                entry[0].extend(prereqs.split("|")[0].split())
                if inline.strip():
                    entry[1].append(inline.strip())
            if first is None and targets and not targets[0].startswith("."):
                first = targets[0]
        elif code.strip():
            current = []
    return rules, first, variables


def _make_expand(text: str, variables: dict[str, str], depth: int = 0) -> str:
    """Make's ``$(VAR)`` / ``${VAR}`` from the makefile's simple assignments (unknown ones empty); ``$$`` is ``$``."""
    if depth > 8:
        return text
    expanded = _MAKE_REF.sub(lambda m: _make_expand(variables.get(m.group(1) or m.group(2), ""), variables, depth + 1), text)
    return expanded.replace("$$", "$") if depth == 0 else expanded


def is_destructive(command: str, cwd: str | None = None) -> bool:
    """Shorthand with the default rules."""
    return Matcher(cwd=cwd)(command)
