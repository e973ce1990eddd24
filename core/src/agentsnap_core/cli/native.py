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
from pathlib import Path

from agentsnap_core import __version__
from agentsnap_core.cli.resident import PROTOCOL
from agentsnap_core.errors import AgentSnapError

#: what the compiled client carries (``agentsnap_native_client_marker`` in native_client.c)
MARKER = b"agentsnap-native-client "
SOURCE = Path(__file__).with_name("native_client.c")


def _c_string(text: str) -> str:
    """``text`` as a C string literal (octal escapes for everything but letters, digits and a few safe signs)."""
    safe = set(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/._-+@,=: ")
    return '"' + "".join(chr(b) if b in safe else f"\\{b:03o}" for b in os.fsencode(text)) + '"'


def kind(path: Path) -> str | None:
    """``native`` (this package's compiled client), ``python`` (an agentsnap console script of this
    installation's Python), or None (anything else, or nothing there)."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(1 << 20)
    except OSError:
        return None
    if head.startswith(b"\x7fELF") or head[:4] in (b"\xcf\xfa\xed\xfe", b"\xce\xfa\xed\xfe"):
        return "native" if MARKER in head or MARKER in path.read_bytes() else None
    text = head.decode("utf-8", "replace")
    if text.startswith("#!") and sys.executable in text and "agentsnap_core.cli" in text:
        return "python"
    return None


def script() -> Path | None:
    """This installation's ``agentsnap`` script, as the shell finds it: the file that ran this command when it is
    an agentsnap script of this Python (links followed: pipx links it), else the one beside this Python."""
    argv0 = sys.argv[0] if sys.argv else ""
    found = argv0 if os.sep in argv0 else shutil.which(argv0) if argv0 else None
    for candidate in (found, os.path.join(os.path.dirname(sys.executable), "agentsnap")):
        if candidate:
            real = Path(os.path.realpath(candidate))
            if kind(real) is not None:
                return real
    return None


def _python_script() -> bytes:
    """The console script an installer writes for ``agentsnap = agentsnap_core.cli:run``."""
    py = sys.executable
    head = f"#!{py}\n" if len(py) < 120 and " " not in py else f"#!/bin/sh\n'''exec' {shlex.quote(py)} \"$0\" \"$@\"\n' '''\n"
    return (head + "# -*- coding: utf-8 -*-\nimport re\nimport sys\nfrom agentsnap_core.cli import run\n"
            "if __name__ == \"__main__\":\n    sys.argv[0] = re.sub(r\"(-script\\.pyw|\\.exe)?$\", \"\", sys.argv[0])\n"
            "    sys.exit(run())\n").encode()


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


def build(out: Path) -> None:
    """Compile the native client for this installation into ``out``, and check that it runs."""
    if os.name != "posix":
        raise AgentSnapError("the native client needs a POSIX system (unix sockets passing file descriptors)")
    cc = shlex.split(os.environ.get("CC") or "cc")
    if not shutil.which(cc[0]):
        raise AgentSnapError(f"no C compiler: {cc[0]!r} not found (install one, e.g. 'apt-get install gcc', or name "
                             "it in CC); nothing changed: the Python script still runs every command")
    with tempfile.TemporaryDirectory(prefix="agentsnap-client-") as tmp:
        (Path(tmp) / "config.h").write_text(
            f"#define AGENTSNAP_PYTHON {_c_string(sys.executable)}\n#define AGENTSNAP_VERSION {_c_string(__version__)}\n"
            f"#define AGENTSNAP_PROTOCOL {PROTOCOL}\n")
        proc = subprocess.run([*cc, "-O2", "-I", tmp, "-o", str(out), str(SOURCE)], capture_output=True, text=True)
        if proc.returncode != 0:
            raise AgentSnapError(f"compiling the native client failed ({' '.join(cc)}); nothing changed:\n"
                                 f"{proc.stderr.strip()[-2000:]}")
    env = {k: v for k, v in os.environ.items() if k != "AGENTSNAP_RESIDENT"}
    check = subprocess.run([str(out), "--version"], capture_output=True, text=True, env=env)
    if check.returncode != 0 or __version__ not in check.stdout:
        raise AgentSnapError(f"the native client built but does not run here (exit {check.returncode}: "
                             f"{(check.stderr or check.stdout).strip()[-500:]}); nothing changed")


def install(target: Path) -> None:
    """Compile the client and put it in place of the agentsnap script ``target`` (a previous client is rebuilt)."""
    if kind(target) is None:
        raise AgentSnapError(f"{target} is not an agentsnap script of this installation ({sys.executable}); "
                             "nothing changed")
    with tempfile.TemporaryDirectory(prefix="agentsnap-client-") as tmp:
        built = Path(tmp) / "agentsnap"
        build(built)
        _replace(target, built=built)


def remove(target: Path) -> bool:
    """Put the Python script back in place of the native client at ``target``; False when there was none."""
    if kind(target) != "native":
        return False
    _replace(target, _python_script())
    return True
