"""The native client: ``agentsnap resident install-client`` / ``remove-client``.

With the resident process (``AGENTSNAP_RESIDENT=1``) a command's own work is a few milliseconds; what is left is the
``agentsnap`` script's Python start (~12-20 ms) just to pass the command line over a socket. The native client
(``native_client.c``, shipped with the package) does that part in C, as git's and watchman's clients do for their
daemons: it is compiled with this machine's C compiler (``$CC``, else ``cc``) and put in place of this installation's
``agentsnap`` script, and it runs that script's own code in this installation's Python whenever it does not hand
the command over (no resident process, ``AGENTSNAP_RESIDENT`` unset, ``resident`` commands, ``--version``), so
what a command prints and returns never depends on which of the two ran it. Reinstalling or upgrading agentsnap
writes the Python script back; ``remove-client`` does the same by hand.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from agentsnap_core import __version__
from agentsnap_core.cli.resident import PROTOCOL
from agentsnap_core.errors import AgentSnapError

#: what the compiled client carries (``agentsnap_native_client_marker`` in native_client.c)
MARKER = b"agentsnap-native-client "
SOURCE = Path(__file__).with_name("native_client.c")


@dataclass(frozen=True)
class Client:
    """A native client that takes the place of a console script: the script's name, its entry point
    (``module:function``), the C source, the marker the compiled file carries, ``config.h``'s definitions, and how a
    build is checked (run with ``check`` and ``check_env``: exit 0, ``check_out`` in its output)."""

    name: str
    source: Path
    entry: str
    marker: bytes
    defines: dict[str, str | int]
    check: tuple[str, ...]
    check_out: str = ""
    check_env: dict[str, str] = field(default_factory=dict)


def agentsnap_client() -> Client:
    """The ``agentsnap`` client: this installation's Python, agentsnap's version and the resident protocol."""
    return Client("agentsnap", SOURCE, "agentsnap_core.cli:run", MARKER,
                  {"AGENTSNAP_PYTHON": sys.executable, "AGENTSNAP_VERSION": __version__, "AGENTSNAP_PROTOCOL": PROTOCOL},
                  ("--version",), f"version {__version__}")


def _c_string(text: str) -> str:
    """``text`` as a C string literal (octal escapes for everything but letters, digits and a few safe signs)."""
    safe = set(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/._-+@,=: ")
    return '"' + "".join(chr(b) if b in safe else f"\\{b:03o}" for b in os.fsencode(text)) + '"'


def kind(path: Path, client: Client | None = None) -> str | None:
    """``native`` (the compiled client), ``python`` (the console script of this installation's Python that it
    replaces), or None (anything else, or nothing there)."""
    client = client or agentsnap_client()
    try:
        with open(path, "rb") as fh:
            head = fh.read(1 << 20)
    except OSError:
        return None
    if head.startswith(b"\x7fELF") or head[:4] in (b"\xcf\xfa\xed\xfe", b"\xce\xfa\xed\xfe"):
        return "native" if client.marker in head or client.marker in path.read_bytes() else None
    text = head.decode("utf-8", "replace")
    module, _, func = client.entry.partition(":")
    if text.startswith("#!") and sys.executable in text and f"from {module} import {func}" in text:
        return "python"
    return None


def script(client: Client | None = None) -> Path | None:
    """This installation's script of ``client``, as the shell finds it: the file that ran this command when it is
    one of this Python (links followed: pipx links it), else the one beside this Python."""
    client = client or agentsnap_client()
    name = client.name
    argv0 = sys.argv[0] if sys.argv else ""
    found = argv0 if os.sep in argv0 and os.path.basename(argv0) == name else shutil.which(name)
    for candidate in (found, os.path.join(os.path.dirname(sys.executable), name)):
        if candidate:
            real = Path(os.path.realpath(candidate))
            if kind(real, client) is not None:
                return real
    return None


def _python_script(entry: str) -> bytes:
    """The console script an installer writes for ``entry`` (``module:function``)."""
    module, _, func = entry.partition(":")
    py = sys.executable
    if len(py) < 120 and " " not in py:
        head = f"#!{py}\n"
    else:  # as pip writes it: a shell line that execs the interpreter, a Python string to Python
        head = "#!/bin/sh\n'''exec' " + shlex.quote(py) + ' "$0" "$@"\n' + "' '''\n"
    return (head + f"# -*- coding: utf-8 -*-\nimport re\nimport sys\nfrom {module} import {func}\n"
            "if __name__ == \"__main__\":\n    sys.argv[0] = re.sub(r\"(-script\\.pyw|\\.exe)?$\", \"\", sys.argv[0])\n"
            f"    sys.exit({func}())\n").encode()


def _replace(target: Path, data: bytes | None = None, built: Path | None = None) -> None:
    """Put ``data`` (or the file ``built``) at ``target`` in one rename, with the target's permissions."""
    mode = target.stat().st_mode & 0o7777 if target.exists() else 0o755
    try:
        fd, tmp = tempfile.mkstemp(prefix=".agentsnap-", dir=target.parent)
    except OSError as exc:  # e.g. a system-wide install this user may not change
        raise AgentSnapError(f"cannot write beside {target} ({exc.strerror}); nothing changed") from None
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data if data is not None else built.read_bytes())  # type: ignore[union-attr]
        os.chmod(tmp, mode | 0o111)
        os.replace(tmp, target)
    except BaseException as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(exc, OSError):
            raise AgentSnapError(f"cannot replace {target} ({exc.strerror}); nothing changed") from None
        raise


def build(out: Path, client: Client | None = None) -> None:
    """Compile ``client`` (default: agentsnap's) for this installation into ``out``, and check that it runs."""
    client = client or agentsnap_client()
    if os.name != "posix":
        raise AgentSnapError("the native client needs a POSIX system (unix sockets passing file descriptors)")
    cc = shlex.split(os.environ.get("CC") or "cc")
    if not shutil.which(cc[0]):
        raise AgentSnapError(f"no C compiler: {cc[0]!r} not found (install one, e.g. 'apt-get install gcc', or name "
                             "it in CC); nothing changed: the Python script still runs every command")
    with tempfile.TemporaryDirectory(prefix="agentsnap-client-") as tmp:
        (Path(tmp) / "config.h").write_text("".join(
            f"#define {k} {v if isinstance(v, int) else _c_string(v)}\n" for k, v in client.defines.items()))
        proc = subprocess.run([*cc, "-O2", "-I", tmp, "-I", str(SOURCE.parent), "-o", str(out), str(client.source)],
                              capture_output=True, text=True)  # (SOURCE's folder: native_common.h)
        if proc.returncode != 0:
            raise AgentSnapError(f"compiling the native client failed ({' '.join(cc)}); nothing changed:\n"
                                 f"{proc.stderr.strip()[-2000:]}")
    env = {k: v for k, v in os.environ.items() if k != "AGENTSNAP_RESIDENT"}  # (the check runs in the script's Python)
    check = subprocess.run([str(out), *client.check], capture_output=True, text=True, env={**env, **client.check_env},
                           input="")
    if check.returncode != 0 or client.check_out not in check.stdout:
        raise AgentSnapError(f"the native client built but does not run here (exit {check.returncode}: "
                             f"{(check.stderr or check.stdout).strip()[-500:]}); nothing changed")


def install(target: Path, client: Client | None = None) -> None:
    """Compile the client and put it in place of its console script ``target`` (a previous client is rebuilt)."""
    client = client or agentsnap_client()
    if kind(target, client) is None:
        raise AgentSnapError(f"{target} is not the {client.name} script of this installation ({sys.executable}); "
                             "nothing changed")
    with tempfile.TemporaryDirectory(prefix="agentsnap-client-") as tmp:
        built = Path(tmp) / "client"
        build(built, client)
        _replace(target, built=built)


def remove(target: Path, client: Client | None = None) -> bool:
    """Put the Python script back in place of the native client at ``target``; False when there was none."""
    client = client or agentsnap_client()
    if kind(target, client) != "native":
        return False
    _replace(target, _python_script(client.entry))
    return True
