"""The warm helper: one long-lived process per user and Python that answers the plugin's hooks over a unix socket.

A hook call that the plugin's quick script (``plugin/hooks/agentsnap_quick.py``) cannot answer alone
would otherwise start the helper's Python, import agentsnap and open the store on every call (~300 ms
CPU). Instead the quick script sends the call to this process, which has everything imported and
answers it exactly as the in-process entry point does (:func:`.gate.respond`, with the caller's
environment and working directory), then goes idle and exits after ``AGENTSNAP_HOOK_IDLE`` seconds
(default 900) without a call.

It is an optimisation only, never the protection itself: the quick script falls back to the
in-process path whenever this process is missing, dead, of another protocol version, stale (its code
changed on disk since it started: it says so and exits), killed mid-call or slower than its time limit,
and that path snapshots or asks as before. A snapshot cut short by a kill leaves the store as the core
leaves any interrupted snapshot (objects first, the ref last), and the fallback takes the snapshot anew.

It keeps core's change journal (``agentsnap_core.layers.journal``, inotify on Linux) on each project it snapshotted:
from its third snapshot of a project on, a snapshot reads only the directories that changed since the last one.

Security: the socket lives in a directory only the user can enter (``$AGENTSNAP_HOOK_RUN_DIR``, else
``$XDG_RUNTIME_DIR/agentsnap``, else ``/tmp/agentsnap-<uid>``; mode 0700, owned by the user, not a link:
anything else and neither side uses it), a call from another user id is refused (``SO_PEERCRED``), and
nothing listens on the network. Started by the in-process entry point when it had to run
(``python -m agentsnap_claude_code.daemon``, detached); one per socket (a lock file holds its pid).
"""

from __future__ import annotations

import gc
import os
import signal
import socket
import subprocess
import sys

# The socket, lock and peer checks are core's (agentsnap_core.cli.resident), imported when used: the hook imports this
# module for spawn() on a path that must not load agentsnap_core (tests/test_quick.py).


def private_dir(d: str, create: bool = False) -> bool:
    """True when ``d`` is a real directory owned by this user that nobody else may enter (made so if ``create``)."""
    from agentsnap_core.cli.resident import private_dir as check

    return check(d, create)


def _fingerprint(paths: list[str]) -> list[tuple[int, int]]:
    from agentsnap_core.cli.resident import fingerprint

    return fingerprint(paths)


def _peer_uid(conn: socket.socket) -> int | None:
    from agentsnap_core.cli.resident import peer_uid

    return peer_uid(conn)

#: the request/reply format; part of the socket's name, so a client and a helper of different versions never meet
PROTOCOL = 1
MAGIC = b"AGSNAP%d" % PROTOCOL
IDLE_SECONDS = 900


def run_dir() -> str:
    """The folder of the socket (the quick script computes the same; a test holds them together)."""
    d = os.environ.get("AGENTSNAP_HOOK_RUN_DIR")
    if not d:
        rt = os.environ.get("XDG_RUNTIME_DIR")
        d = os.path.join(rt, "agentsnap") if rt else f"/tmp/agentsnap-{os.getuid()}"
    return d


def socket_name(executable: str | None = None) -> str:
    """``hook-<FNV-1a of the Python's path>-p<PROTOCOL>.sock``: one helper per Python (that is, per installation)."""
    h = 0xCBF29CE484222325
    for b in os.fsencode(executable or sys.executable):
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"hook-{h:016x}-p{PROTOCOL}.sock"


def _sources() -> list[str]:
    """The source files of every agentsnap module loaded now."""
    from agentsnap_core.cli.resident import module_files

    return module_files(("agentsnap_claude_code", "agentsnap_core"))


def _parse(data: bytes) -> tuple[str, str, dict[str, str], str]:
    """``MAGIC\\0event\\0cwd\\0K=V\\0...\\0\\0stdin text`` -> (event, cwd, environment, text)."""
    head, sep, text = data.partition(b"\0\0")
    fields = head.split(b"\0")
    if not sep or len(fields) < 3 or fields[0] != MAGIC:
        raise ValueError("not a hook request")
    env = {}
    for item in fields[3:]:
        k, eq, v = item.partition(b"=")
        if eq:
            env[os.fsdecode(k)] = os.fsdecode(v)
    return os.fsdecode(fields[1]), os.fsdecode(fields[2]), env, text.decode("utf-8", "surrogateescape")


def _reply(code: int, out: str, err: str) -> bytes:
    """``MAGIC\\0code\\0len(out)\\0len(err)\\0`` out err ``END`` (a reply cut short is told from a whole one)."""
    o, e = out.encode("utf-8", "surrogateescape"), err.encode("utf-8", "surrogateescape")
    return b"\0".join([MAGIC, b"%d" % code, b"%d" % len(o), b"%d" % len(e), o + e + b"END"])


def _recv_all(conn: socket.socket) -> bytes:
    chunks: list[bytes] = []
    while True:
        b = conn.recv(1 << 16)
        if not b:
            return b"".join(chunks)
        chunks.append(b)


def _handle(conn: socket.socket, sources: list[str], started: list[tuple[int, int]]) -> bool:
    """Answer one call; False when this helper is stale and must exit."""
    from .gate import respond

    if _peer_uid(conn) not in (None, os.getuid()):
        return True  # not ours: say nothing
    conn.settimeout(10)
    event, cwd, env, text = _parse(_recv_all(conn))
    if _fingerprint(sources) != started:
        conn.sendall(MAGIC + b"\0stale")  # the client falls back to the in-process path
        return False
    from agentsnap_core.layers import journal

    if journal.REQUESTS is not None:  # the trees the last call captured are watched; what changed since is read
        journal.take_requests(journal.REQUESTS)
        journal.drain_all()
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    gc.disable()  # (a call's objects die with it: the collector runs after the answer, not during it)
    try:
        try:
            try:
                os.chdir(cwd)
            except OSError:
                os.chdir("/")
            code, out, err = respond(text, event or None)
        finally:
            os.environ.clear()
            os.environ.update(saved)
            os.chdir("/")
        conn.settimeout(10)
        conn.sendall(_reply(code, out, err))
    finally:
        gc.enable()
    from agentsnap_core.layers import world

    if world.HANDOFF is not None:  # after the answer: the stat caches kept here take what the call changed and are
        world.settle_kept(world.HANDOFF)  # written (core layers/world.py: a call reads no stat cache file, writes none)
    return True


def serve(idle: float | None = None) -> int:
    """Bind the socket and answer calls until idle (or stale); 0 when another helper already serves it."""
    from agentsnap_core.cli.resident import bind, claim, connections, unbind

    d, name = run_dir(), socket_name()
    lock = claim(d, name)
    if lock is None:
        return 0  # another helper holds this socket (or the folder is not the user's alone)
    import agentsnap_core.plugins as plugins  # everything a call may need, loaded once, before the first call
    from agentsnap_core import Repo  # noqa: F401

    from . import hooks, projectstore  # noqa: F401

    plugins.get_plugin_manager()
    projectstore.KEEP_OPEN = True  # the stores a call opens stay open for the next calls (closed below)
    from agentsnap_core.layers import journal, world

    journal.serving()  # a snapshot reads only the directories changed since the last one (core layers/journal.py)
    journal.REQUESTS = os.path.join(d, f"journal-{os.getpid()}.req")
    world.HANDOFF = os.path.join(d, f"statcache-{os.getpid()}.req")
    sources = _sources()
    started = _fingerprint(sources)
    srv, ident = bind(d, name)
    srv.settimeout(float(os.environ.get("AGENTSNAP_HOOK_IDLE") or IDLE_SECONDS) if idle is None else idle)
    try:
        for conn in connections(srv, watches=journal):
            with conn:
                try:
                    if not _handle(conn, sources, started):
                        return 0
                except (OSError, ValueError):
                    pass  # a client gone or garbled: it falls back on its own
        return 0  # idle
    finally:
        unbind(srv, d, name, ident)
        os.close(lock)
        projectstore.close_kept()
        if world.HANDOFF is not None:  # (a call cut short: what it changed, on disk before this process ends)
            world.settle_kept(world.HANDOFF)
        for path in (journal.REQUESTS, world.HANDOFF):
            try:
                os.unlink(path or "")
            except OSError:
                pass


def spawn() -> None:
    """Start a helper in the background, detached from the hook (its stdio closed); errors are ignored."""
    if os.environ.get("AGENTSNAP_HOOK_DAEMON", "1") == "0":
        return
    try:
        subprocess.Popen(
            [sys.executable, "-m", "agentsnap_claude_code.daemon"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            close_fds=True, start_new_session=True, cwd="/",
        )
    except OSError:
        pass


def helper_pid() -> int | None:
    """The pid of the helper serving this Python's socket, if one runs (read from its lock file)."""
    from agentsnap_core.cli.resident import lock_pid

    return lock_pid(os.path.join(run_dir(), socket_name() + ".lock"))


def main() -> int:
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    return serve()


if __name__ == "__main__":
    sys.exit(main())
