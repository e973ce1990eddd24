"""The commands a ``nox``, ``tox``, ``just`` or ``hatch/pdm/rye run`` call would run, read from the project's files.

``nox -s format`` and ``tox -e fix`` name a session whose commands (``black .``, ``ruff check --fix``,
``pre-commit run -a``, ``shutil.rmtree("build")``) live in the project: the matcher judges those commands by its
own rules, as it does the recipes ``make`` runs and the scripts of ``package.json``. Imported only when a command
runs nox or tox (the hook's harmless path never pays for ``ast``).

Read from nox 2024-2025's documented forms: sessions are functions decorated with ``@nox.session`` (or
``@session``), named by ``name=`` or the function; ``-s/--session/--sessions/-e`` select them (``NAME(params)``
selects the parametrized ``NAME``), ``-k``/``-t`` select by expression/tag (all are read), none selected runs
``nox.options.sessions`` or else every session not marked ``default=False``; a session's commands are its
``session.run(...)`` / ``run_always`` / ``run_install`` calls (values that are not literals stand for operands) and
the sessions it ``session.notify``s; module-level functions a session calls are read too. tox 4: ``tox.ini`` (or
``-c FILE``; ``setup.cfg``'s ``[tox:tox]``), ``commands`` / ``commands_pre`` / ``commands_post`` of
``[testenv:NAME]`` or ``[testenv]``, every factor-conditional line read, ``{...}`` substitutions standing for
operands; envs from ``-e a,b`` (``ALL``, or ``-m``/``-f``: every section), else ``env_list``/``envlist``, else
``[testenv]``. just (1.x): the ``justfile`` (any case, ``.justfile``, or ``-f FILE``), the recipes named (every
operand that names a recipe or an alias; none: the first recipe, or ``default``) with their dependencies; body
lines with ``@``/``-`` dropped and ``{{...}}`` standing for operands; a shebang recipe in another language is
returned as source. pyproject.toml scripts: ``[tool.pdm.scripts]`` / ``[tool.rye.scripts]`` (a string, ``cmd``,
``shell``, ``composite``, ``pre_``/``post_`` scripts) and hatch's ``[tool.hatch.envs.ENV.scripts]`` (a string or a
list; a command whose first word is another script of the env runs that script).
"""

from __future__ import annotations

import os
import re
import shlex

__all__ = ["just_commands", "nox_commands", "pyproject_commands", "tox_commands"]

#: an operand the configuration computes (``*FILES``, ``{posargs}``): a rule counts it as an existing path
OPERAND = "*"
_LISTING = {"-l", "--list", "--list-sessions", "--json", "--usage", "-h", "--help", "--version"}


def nox_commands(cwd: str, args: list[str], read) -> tuple[list[str], str | None]:
    """(command lines the run would run, Python source of the sessions read) for ``nox ARGS`` in ``cwd``.

    ``read(path)`` returns a file's text (None when there is none); the source is returned so that the caller can
    look for deletes written in Python (``shutil.rmtree``) with the rules it uses for scripts. A noxfile that does
    not parse raises ValueError (what it runs cannot be told).
    """
    import ast

    if _LISTING & set(args):
        return [], None
    path = _value(args, ("-f", "--noxfile")) or "noxfile.py"
    text = read(os.path.join(cwd, path))
    if text is None:
        return [], None
    try:
        tree = ast.parse(text)
    except SyntaxError as e:
        raise ValueError(f"{path} (a noxfile that does not parse: what its sessions run cannot be told)") from e
    functions = {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    sessions: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = {}
    defaults: list[str] = []
    for fn in functions.values():
        for deco in fn.decorator_list:
            call = deco if isinstance(deco, ast.Call) else None
            target = call.func if call else deco
            if _dotted(target).split(".")[-1] != "session":
                continue
            name = fn.name
            default = True
            for kw in call.keywords if call else []:
                if kw.arg == "name" and isinstance(kw.value, ast.Constant) and isinstance(kw.value.value, str):
                    name = kw.value.value
                elif kw.arg == "default" and isinstance(kw.value, ast.Constant) and kw.value.value is False:
                    default = False
            sessions[name] = fn
            if default:
                defaults.append(name)
    for node in tree.body:  # nox.options.sessions = [...]
        if isinstance(node, ast.Assign) and any(_dotted(t) == "nox.options.sessions" for t in node.targets):
            if isinstance(node.value, (ast.List, ast.Tuple)):
                defaults = [e.value for e in node.value.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    chosen = _values(args, ("-s", "-e", "--session", "--sessions"))
    if chosen is None and _value(args, ("-k", "-t", "--keywords", "--tags")) is not None:
        chosen = list(sessions)  # selected by an expression or a tag: read them all
    from agentsnap_claude_code.matcher import each_once

    commands: list[str] = []
    sources: list[str] = []

    def visit(name: str) -> list[str]:
        notified: list[str] = []
        if name not in sessions:
            return notified
        read_fns: set[str] = set()
        stack = [sessions[name]]
        while stack:
            fn = stack.pop()
            sources.append(ast.get_source_segment(text, fn) or "")
            for call in (n for n in ast.walk(fn) if isinstance(n, ast.Call)):
                callee = _dotted(call.func)
                last = callee.split(".")[-1]
                if last in ("run", "run_always", "run_install") and "." in callee:
                    words = [_word(a) for a in call.args]
                    if words and words[0] != OPERAND:
                        commands.append(" ".join(shlex.quote(w) if w != OPERAND else w for w in words))
                elif last == "notify" and call.args and isinstance(call.args[0], ast.Constant):
                    notified.append(str(call.args[0].value).split("(", 1)[0])
                elif callee in functions and callee not in read_fns and functions[callee] is not fn:
                    read_fns.add(callee)
                    stack.append(functions[callee])
        return notified

    each_once((c.split("(", 1)[0].strip() for c in (chosen if chosen is not None else defaults)), visit)
    return commands, "\n".join(sources)


def tox_commands(cwd: str, args: list[str], read) -> list[str]:
    """Command lines ``tox ARGS`` would run in ``cwd`` (from tox.ini, or setup.cfg's ``[tox:tox]``)."""
    if _LISTING & set(args) or args[:1] in (["list"], ["l"], ["config"], ["c"], ["devenv"], ["legacy"]) and "-e" not in args:
        return []
    config = _value(args, ("-c", "--conf"))
    sections = None
    for candidate in ([config] if config else ["tox.ini", "setup.cfg"]):
        text = read(os.path.join(cwd, candidate))
        if text is not None:
            sections = _ini(text, prefix="tox:" if candidate.endswith("setup.cfg") else "")
            if sections is not None and (not candidate.endswith("setup.cfg") or "tox" in sections):
                break
            sections = None
    if not sections:
        return []
    envs = _values(args, ("-e", "--env"))
    if envs is not None:
        envs = [e for item in envs for e in item.split(",") if e]
    every = [name.split(":", 1)[1] for name in sections if name.startswith("testenv:")]
    if envs is None and (_value(args, ("-m", "-f", "--labels", "--factors")) is not None):
        envs = every or ["testenv"]
    if envs is None:
        listed = sections.get("tox", {}).get("env_list") or sections.get("tox", {}).get("envlist") or ""
        envs = [e for e in re.split(r"[\s,]+", listed) if e] or every or ["testenv"]
    if "ALL" in envs:
        envs = every or ["testenv"]
    out: list[str] = []
    for env in dict.fromkeys(envs):
        if "{" in env:  # py3{10,11}-lint: every section is read
            chosen = [s for s in sections if s.startswith("testenv")]
        else:
            chosen = [f"testenv:{env}"] if f"testenv:{env}" in sections else ["testenv"]
        for name in chosen:
            body = sections.get(name, {})
            for key in ("commands_pre", "commands", "commands_post"):
                text = body.get(key) or ""
                for _ in range(4):  # {[testenv:lint]commands}: another section's value, as tox substitutes it
                    text = re.sub(r"\{\[([^\]]+)\]([\w-]+)\}", lambda m: sections.get(m.group(1), {}).get(m.group(2), ""), text)
                for line in text.splitlines():
                    line = re.sub(r"^[\w!.,{}-]+:\s+", "", line.strip())  # lint: ruff check --fix (a factor condition)
                    line = re.sub(r"\{[^{}]*\}", OPERAND, line).lstrip("-!").strip()
                    if line and not line.startswith("#"):
                        out.append(line.rstrip("\\").strip())
    return out


def _ini(text: str, prefix: str) -> dict[str, dict[str, str]] | None:
    """Sections of an INI text as ``{section: {key: value}}``, continuation lines joined with newlines."""
    sections: dict[str, dict[str, str]] = {}
    section: dict[str, str] | None = None
    key = None
    for raw in text.splitlines():
        if not raw.strip() or raw.lstrip().startswith((";", "#")) and not raw[:1].isspace():
            continue
        if raw[:1].isspace() and section is not None and key is not None:
            section[key] += "\n" + raw.strip()
            continue
        m = re.fullmatch(r"\s*\[([^\]]+)\]\s*", raw)
        if m:
            name = m.group(1).strip()
            if prefix and name.startswith(prefix):
                name = name[len(prefix):] or "tox"
            section, key = sections.setdefault(name, {}), None
            continue
        if section is not None and "=" in raw:
            key, _, value = raw.partition("=")
            key = key.strip()
            section[key] = value.strip()
    return sections


def _dotted(node) -> str:
    import ast

    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return ".".join(reversed(parts))


def _word(node) -> str:
    import ast

    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else OPERAND


def _value(args: list[str], names: tuple[str, ...]) -> str | None:
    """The value of the first of the options ``names`` given (``-e X``, ``--env=X``, and ``-eX`` as getopt reads it)."""
    from agentsnap_claude_code.matcher import _option_value

    value = _option_value(args, names)
    if value is None:
        short = [n for n in names if not n.startswith("--")]
        value = next((a[len(n):] for a in args for n in short if a.startswith(n) and len(a) > len(n)), None)
    return value


def _values(args: list[str], names: tuple[str, ...]) -> list[str] | None:
    """Every value given to the options ``names`` (``-s a b -s c``: a, b, c); None when none is given."""
    out: list[str] | None = None
    i = 0
    while i < len(args):
        a = args[i]
        hit = next((n for n in names if a == n or n.startswith("--") and a.startswith(n + "=")), None)
        if hit is None:
            i += 1
            continue
        out = out if out is not None else []
        if "=" in a and a.startswith("--"):
            out.append(a.split("=", 1)[1])
            i += 1
            continue
        i += 1
        while i < len(args) and not args[i].startswith("-"):
            out.append(args[i])
            i += 1
    return out


def just_commands(cwd: str, args: list[str], read) -> tuple[list[str], str]:
    """(shell lines, source of recipes in other languages) that ``just ARGS`` would run in ``cwd``."""
    if {"-l", "--list", "--summary", "--dump", "--evaluate", "--variables", "-n", "--dry-run", "--show", "-s",
        "--help", "-h", "--version", "-V", "--init", "--fmt", "--groups", "--completions"} & set(args):
        return [], ""
    named = _value(args, ("-f", "--justfile"))
    text = None
    for candidate in [named] if named else ["justfile", "Justfile", "JUSTFILE", ".justfile"]:
        text = read(os.path.join(cwd, candidate))
        if text is not None:
            break
    if text is None:
        return [], ""
    recipes: dict[str, tuple[list[str], list[str]]] = {}
    aliases: dict[str, str] = {}
    first = None
    current: list[str] | None = None
    for line in text.splitlines():
        if line[:1] in (" ", "\t"):
            if current is not None:
                current.append(line.strip())
            continue
        current = None
        stripped = line.strip()
        if not stripped or stripped.startswith(("#", "[", "set ", "export ", "import ", "mod ")):
            continue
        m = re.match(r"alias\s+([\w-]+)\s*:=\s*([\w-]+)", stripped)
        if m:
            aliases[m.group(1)] = m.group(2)
            continue
        m = re.match(r"@?([A-Za-z_][\w-]*)((?:\s+[^:]*?)?):(?!=)(.*)$", stripped)
        if m and ":=" not in stripped.split(":", 1)[0]:
            deps = [d.strip("()") for d in re.findall(r"\(?[\w-]+", m.group(3).split("#", 1)[0])]
            current = []
            recipes[m.group(1)] = (deps, current)
            first = first or m.group(1)
    from agentsnap_claude_code.matcher import _skip_valued, each_once

    operands = [a for a in _skip_valued(args, {"-f", "--justfile", "-d", "--working-directory", "--set", "--shell",
                                               "--shell-arg", "--dotenv-filename", "--dotenv-path", "--command-color"})
                if not a.startswith("-") and "=" not in a]
    start = [aliases.get(a, a) for a in operands if aliases.get(a, a) in recipes]
    if not start:
        start = ["default"] if "default" in recipes else [first] if first else []
    lines: list[str] = []
    source: list[str] = []

    def visit(name: str) -> list[str]:
        if name not in recipes:
            return []
        deps, body = recipes[name]
        if body and body[0].startswith("#!") and not re.search(r"\b(ba|z|da|k)?sh\b", body[0]):
            source.append("\n".join(body))
        else:
            for line in body[1:] if body and body[0].startswith("#!") else body:
                line = re.sub(r"\{\{[^}]*\}\}", OPERAND, line).lstrip("@-").strip()
                if line and not line.startswith("#"):
                    lines.append(line)
        return [aliases.get(d, d) for d in deps]

    each_once(start, visit)
    return lines, "\n".join(source)


def pyproject_commands(cwd: str, tool: str, args: list[str], read) -> list[str]:
    """Shell lines ``hatch|pdm|rye run SCRIPT`` would run, from pyproject.toml (nothing for a plain command)."""
    import tomllib

    from agentsnap_claude_code.matcher import _skip_valued

    rest = [a for a in _skip_valued(args, {"-e", "--env", "-p", "--project", "--venv", "-n", "--name"}) if not a.startswith("-")]
    if not rest:
        return []
    text = read(os.path.join(cwd, "pyproject.toml"))
    if text is None:
        return []
    try:
        tools = tomllib.loads(text).get("tool", {})
    except (tomllib.TOMLDecodeError, AttributeError):
        return []
    script = rest[0]
    if tool == "hatch":
        env, _, script = script.rpartition(":")
        envs = tools.get("hatch", {}).get("envs", {}) if isinstance(tools.get("hatch"), dict) else {}
        table = (envs.get(env or "default") or {}).get("scripts") or {}
        if env and env != "default":  # an env's scripts extend the default env's
            table = {**((envs.get("default") or {}).get("scripts") or {}), **table}
        return _hatch_lines(table, script, set())
    table = (tools.get(tool) or {}).get("scripts") or {}
    return _pdm_lines(table, script, set())


def _hatch_lines(table, name: str, seen: set[str]) -> list[str]:
    body = table.get(name) if isinstance(table, dict) else None
    if body is None or name in seen:
        return []
    seen.add(name)
    out: list[str] = []
    for line in [body] if isinstance(body, str) else [b for b in body if isinstance(b, str)] if isinstance(body, list) else []:
        line = re.sub(r"\{[^{}]*\}", OPERAND, line).lstrip("-").strip()
        first = line.split(" ", 1)[0]
        out.extend(_hatch_lines(table, first, seen) if first in table else [line])
    return out


def _pdm_lines(table, name: str, seen: set[str]) -> list[str]:
    if not isinstance(table, dict) or name in seen or name not in table:
        return []
    seen.add(name)
    out: list[str] = []
    for key in (f"pre_{name}", name, f"post_{name}"):
        body = table.get(key)
        if isinstance(body, dict):
            if "composite" in body:
                for part in body["composite"] if isinstance(body["composite"], list) else []:
                    words = str(part).split(" ", 1)
                    out.extend(_pdm_lines(table, words[0], seen) if words[0] in table else [str(part)])
                continue
            body = body.get("cmd", body.get("shell"))
        if isinstance(body, list):
            body = " ".join(shlex.quote(str(w)) for w in body)
        if isinstance(body, str):
            out.append(re.sub(r"\{[^{}]*\}", OPERAND, body))
    return out
