"""The resident process: ``agentsnap`` commands forked from a warm process instead of a fresh interpreter.

A command run the ordinary way starts Python, imports the repository stack and the plugins, and only then works;
for ``status`` on a small tree that start is five times the work. With ``AGENTSNAP_RESIDENT=1`` in the environment
the ``agentsnap`` script instead hands its command line, working directory, environment, umask and its own standard
input, output and error (the file descriptors themselves, ``SCM_RIGHTS``) to a resident process over a unix socket;
that process, which has everything imported, forks a child that becomes the command: it runs exactly what the
script would run (:func:`agentsnap_core.cli.run`), reads and writes the caller's own terminal, pipes or files, and its
exit status is the script's. The client imports nothing but ``_socket`` (no ``socket``, no ``enum``).

It is an optimisation only. The script runs the command itself whenever the resident process is absent (and starts
one, detached, for the next command), of another version or protocol, stale (an agentsnap module changed on disk
since it started: it says so and exits), or refuses the call. A child killed by a signal is reported by the
resident process, and the script exits as a shell reports such a command (128 + the signal). ``Ctrl-C`` and
``SIGTERM`` given to the script are passed on to the child.

Security: the socket lives in a directory only the user can enter (``$AGENTSNAP_RESIDENT_DIR``, else
``$XDG_RUNTIME_DIR/agentsnap``, else ``/tmp/agentsnap-<uid>``; mode 0700, owned by the user, not a link: anything
else and neither side uses it) and a call from another user id is refused (``SO_PEERCRED``). The process exits after
``AGENTSNAP_RESIDENT_IDLE`` seconds (default 900) without a call. ``agentsnap resident stop`` ends it.

What the child does not share with a fresh process: modules are imported once, when the resident process starts
(an agentsnap module edited since, or a ``sys.path`` folder changed by an install, makes it stale, see above), and
the interpreter's own settings are the resident process's: a command whose environment sets those otherwise
(``PYTHONPATH`` naming a checkout or plugins, ``PYTHONHOME``, ``PYTHONWARNINGS``...: :data:`INTERPRETER_ENV`) is
not served, the script runs it; everything else a command depends on (arguments, directory, environment, umask,
standard streams and their encodings) is the caller's. A standard stream the caller has closed is never handed over
(the script runs that command), and a signal that comes while a command is handed over waits for its child.

The change journal: the resident process watches the working trees its commands captured (inotify,
:mod:`agentsnap_core.layers.journal`), reading events while it waits and before each fork, so a child's capture
reads only the directories changed since its stat cache's listing. A child asks for watches by writing
``journal-<pid>.req`` in the private folder; the resident process takes it when the next command comes.
"""

from __future__ import annotations

import os
import sys

PROTOCOL = 1
MAGIC = b"AGSNAPCLI%d" % PROTOCOL
IDLE_SECONDS = 900
_MAX_REQUEST = 1 << 22


def enabled() -> bool:
    """True when the environment asks for the resident process (``AGENTSNAP_RESIDENT=1``)."""
    return os.environ.get("AGENTSNAP_RESIDENT") == "1"


def run_dir() -> str:
    d = os.environ.get("AGENTSNAP_RESIDENT_DIR")
    if not d:
        rt = os.environ.get("XDG_RUNTIME_DIR")
        d = os.path.join(rt, "agentsnap") if rt else f"/tmp/agentsnap-{os.getuid()}"
    return d


def socket_name() -> str:
    """``cli-<FNV-1a of the Python's path and agentsnap's version>-p<PROTOCOL>.sock``: one per installation."""
    from agentsnap_core import __version__

    h = 0xCBF29CE484222325
    for b in os.fsencode(sys.executable) + b"\0" + __version__.encode():
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"cli-{h:016x}-p{PROTOCOL}.sock"


def private_dir(d: str, create: bool = False) -> bool:
    """True when ``d`` is a real directory owned by this user that nobody else may enter (made so if ``create``)."""
    if create:
        try:
            os.makedirs(d, 0o700)
        except FileExistsError:
            pass
        except OSError:
            return False
    try:
        st = os.lstat(d)
    except OSError:
        return False
    return st.st_mode & 0o170000 == 0o040000 and st.st_uid == os.getuid() and st.st_mode & 0o077 == 0


# --- the client: the `agentsnap` script -------------------------------------------------------------------------


def _encode(args: list[str]) -> bytes:
    """``MAGIC\\0cwd\\0umask\\0encodings\\0program\\0argc\\0args...\\0K=V...``, NUL-separated (no field holds a
    NUL). ``program`` is ``argv[0]`` and ``__main__.__package__`` (click names the program in its messages from them)."""
    umask = os.umask(0)
    os.umask(umask)
    streams = ",".join(f"{getattr(s, 'encoding', None) or ''}:{getattr(s, 'errors', None) or ''}"
                       for s in (sys.stdin, sys.stdout, sys.stderr))
    env = [k + b"=" + v for k, v in os.environb.items()]
    package = getattr(sys.modules.get("__main__"), "__package__", None)
    program = os.fsencode(sys.argv[0] if sys.argv else "") + (b"" if package is None else b"\x01" + package.encode())
    fields = [MAGIC, os.fsencode(os.getcwd()), b"%d" % umask, streams.encode(), program, b"%d" % len(args),
              *(os.fsencode(a) for a in args), *env]
    return b"\0".join(fields)


def call(args: list[str]) -> int | None:
    """Run ``args`` in a child of the resident process; its exit status, or None to run the command here."""
    import _socket

    d = run_dir()
    if not private_dir(d):
        if os.path.lexists(d):  # someone else's, or open to others: never used, and the user asked for it
            sys.stderr.write(f"agentsnap: AGENTSNAP_RESIDENT=1 ignored: {d} is not a folder only you can enter "
                             "(yours, mode 0700, not a link)\n")
        else:
            spawn()
        return None
    try:
        payload = _encode(args)
    except (OSError, ValueError):
        return None  # e.g. the working directory is gone: the ordinary path says so
    import _signal  # not `signal`: it imports enum, a tenth of this script's start

    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        if sock.fileno() <= 2:  # a standard stream is closed and the socket took its number: it would be the
            return None  # command's stream (its output sent into this very connection); run it here
        try:
            sock.connect(os.path.join(d, socket_name()))
        except OSError:
            spawn()
            return None
        # Ctrl-C, SIGTERM and SIGHUP wait (blocked) until the command runs in a child (its PID line), then reach it
        # (_wait): once the request is sent a child may run it, so ending here would leave it running unseen
        blocked = _signal.pthread_sigmask(_signal.SIG_BLOCK, (_signal.SIGINT, _signal.SIGTERM, _signal.SIGHUP))
        try:
            try:
                fds = b"".join(i.to_bytes(4, sys.byteorder, signed=True) for i in (0, 1, 2))
                sock.sendmsg([payload], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, fds)])
                sock.shutdown(_socket.SHUT_WR)
            except OSError:
                return None  # nothing ran: e.g. a standard stream is closed
            return _wait(sock, blocked)
        finally:  # (a signal that came while nothing ran yet is taken now, as it would have been then)
            _signal.pthread_sigmask(_signal.SIG_SETMASK, blocked)
    finally:
        sock.close()


def _wait(sock, blocked: object = None) -> int | None:  # type: ignore[no-untyped-def]
    """Read the replies: ``PID n`` once the child runs, then ``EXIT n`` (the child) or ``SIG n`` (the resident
    process, when the child was killed); ``STALE`` or nothing before ``PID``: None (nothing ran).

    The command is over at its ``EXIT`` line (the child sends it once the command returned, its tree lock released
    and its output flushed): that is answered at once, without waiting for the child's exit and the resident
    process's close of the connection (about 2 ms of a 10-file ``status``'s ~10 ms there). What the child still
    holds then (open files, its store connection) is let go at its exit, a moment later: the next command's
    locks wait for such holders (``Repo.tree_lock``, SQLite's busy timeout), they never fail on them.

    ``blocked``: the signal mask to set back once the child's ``PID`` came and the signals are forwarded to it
    (:func:`call` blocks them until then)."""
    import _signal

    data, child = b"", 0
    previous = {}

    def forward(signum: int, _frame: object) -> None:
        if child:
            os.kill(child, signum)

    try:
        while True:
            try:
                chunk = sock.recv(4096)
            except InterruptedError:
                continue
            if not chunk:
                break
            data += chunk
            if not child and b"\n" in data and data.startswith(b"PID "):
                child = int(data[4 : data.index(b"\n")])
                for sig in (_signal.SIGINT, _signal.SIGTERM, _signal.SIGHUP):
                    previous[sig] = _signal.signal(sig, forward)
                if blocked is not None:
                    _signal.pthread_sigmask(_signal.SIG_SETMASK, blocked)  # (one that came meanwhile: forwarded)
            if child and b"\nEXIT " in data and data.endswith(b"\n"):
                break
    finally:
        for sig, handler in previous.items():
            _signal.signal(sig, handler)
    lines = data.split(b"\n")
    if not child:
        return None
    for line in lines[1:]:
        if line.startswith(b"EXIT "):
            return int(line[5:])
        if line.startswith(b"SIG "):
            sig = int(line[4:])
            sys.stderr.write(f"agentsnap: the command was killed by signal {sig}\n")
            return 128 + sig
    sys.stderr.write("agentsnap: the resident process ended the command without an exit status\n")
    return 1


def log_path() -> str:
    """Where the resident process writes what goes wrong (its standard error): ``<socket>.log`` beside the socket."""
    return os.path.join(run_dir(), socket_name() + ".log")


def spawn() -> None:
    """Start the resident process in the background, detached, its standard error in :func:`log_path` (which
    ``agentsnap resident status`` names when it is not empty); errors starting it are ignored: the script runs
    every command itself meanwhile."""
    import subprocess

    d = run_dir()
    if not private_dir(d, create=True):
        return
    try:
        with open(log_path(), "ab") as log:
            subprocess.Popen([sys.executable, "-m", "agentsnap_core.cli.resident"], stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL, stderr=log, close_fds=True, start_new_session=True, cwd="/")
    except OSError:
        pass


# --- the resident process -----------------------------------------------------------------------------------------


def module_files(packages: tuple[str, ...] = ("agentsnap",)) -> list[str]:
    """The source files of the loaded modules whose top-level package name starts with one of ``packages``."""
    return sorted(str(m.__file__) for name, m in list(sys.modules.items())
                  if name.split(".")[0].startswith(packages) and getattr(m, "__file__", None))


def fingerprint(paths: list[str]) -> list[tuple[int, int]]:
    """Identity of ``paths`` (modification time, inode): a reinstall or an edit of the code changes it."""
    out = []
    for path in paths:
        try:
            st = os.stat(path)
            out.append((st.st_mtime_ns, st.st_ino))
        except OSError:
            out.append((-1, -1))
    return out


_preloaded: dict[str, str | None] = {}


def _preload() -> None:
    """Import what commands use, and build the plugin manager (a command whose environment names other plugins
    builds its own; nothing else read from the environment or a store is kept)."""
    import importlib

    import agentsnap_core.cli.fast  # noqa: F401
    import agentsnap_core.repository.repo  # noqa: F401
    from agentsnap_core import plugins
    from agentsnap_core.cli.app import LAZY_VERBS

    for module in LAZY_VERBS.values():
        importlib.import_module(f"agentsnap_core.{module}")
    plugins.get_plugin_manager()  # kept for the commands whose environment allows the same plugins (_child)
    _preloaded["allow"] = os.environ.get(plugins.ENV_ALLOW)
    from agentsnap_core.errors import AgentSnapError
    from agentsnap_core.format import crypto

    try:  # the secrets vault's cipher: a snapshot of a tree whose .env changed seals it (~10 ms of imports)
        crypto._aesgcm()
    except AgentSnapError:
        pass  # no 'cryptography': the vault is off, and says so
    import pwd  # noqa: F401  (the snapshot's author)

    from agentsnap_core.format import objects

    objects._cdc()  # the chunker of large files, and of every tree past 64 KiB: ~6 ms of imports in each child


#: what a fresh interpreter reads at its start, which a child of the resident process cannot take from the caller:
#: where code and plugins come from (a checkout on PYTHONPATH, a user site), warnings, optimisation, hashing, UTF-8
INTERPRETER_ENV = ("PYTHONPATH", "PYTHONHOME", "PYTHONSAFEPATH", "PYTHONNOUSERSITE", "PYTHONUSERBASE", "PYTHONPLATLIBDIR",
                   "PYTHONOPTIMIZE", "PYTHONWARNINGS", "PYTHONDEVMODE", "PYTHONHASHSEED", "PYTHONUTF8")


def interpreter_env(env: dict[str, str] | os._Environ[str]) -> list[str | None]:
    """The values of :data:`INTERPRETER_ENV` in ``env``: a command whose values are not the resident process's is
    not served (the script runs it, as a fresh interpreter set up the way the caller asked)."""
    return [env.get(k) or None for k in INTERPRETER_ENV]


def peer_uid(conn) -> int | None:  # type: ignore[no-untyped-def]
    """The caller's user id (Linux ``SO_PEERCRED``, macOS ``LOCAL_PEERCRED``); None where neither exists (the 0700
    folder guards)."""
    import socket
    import struct

    if hasattr(socket, "SO_PEERCRED"):
        creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        return int(struct.unpack("3i", creds)[1])
    if sys.platform == "darwin":  # struct xucred {u_int cr_version; uid_t cr_uid; short cr_ngroups; gid_t cr_groups[16];}
        return int(struct.unpack_from("I", conn.getsockopt(0, 0x001, 76), 4)[0])
    return None


def claim(d: str, name: str) -> int | None:
    """The lock file of socket ``name`` in the private folder ``d`` (made if missing), held, with the caller's pid
    written in it; None when ``d`` is not private (:func:`private_dir`) or another process holds the lock."""
    import fcntl

    if not private_dir(d, create=True):
        return None
    lock = os.open(os.path.join(d, name + ".lock"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(lock)
        return None
    os.ftruncate(lock, 0)
    os.pwrite(lock, b"%d\n" % os.getpid(), 0)
    return lock


def lock_pid(path: str) -> int | None:
    """The pid written in a held lock file (:func:`claim`); None when nobody holds it."""
    import fcntl

    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            fcntl.flock(fd, fcntl.LOCK_UN)
            return None
        except BlockingIOError:
            text = os.pread(fd, 32, 0).strip()
            return int(text) if text.isdigit() else None
    finally:
        os.close(fd)


def bind(d: str, name: str):  # type: ignore[no-untyped-def]
    """A listening unix socket ``d/name`` for the user only (a socket left by a dead holder of the lock replaced);
    ``(socket, inode)`` for :func:`unbind`."""
    import socket

    os.chdir(d)  # bind by a relative name: a socket path has a length limit
    try:
        try:
            os.unlink(name)
        except FileNotFoundError:
            pass
        srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        umask = os.umask(0o077)
        try:
            srv.bind(name)
        finally:
            os.umask(umask)
        ident = os.stat(name).st_ino
    finally:
        os.chdir("/")
    srv.listen(64)
    return srv, ident


#: seconds without a call before the resident process does its chores (writing the stat caches it keeps): commands
#: in quick succession are never slowed by them, nor is a command it forked (its memory is shared until written)
CHORE_DELAY = 0.5


def connections(srv, busy=lambda: False, watches=None, chores=None):  # type: ignore[no-untyped-def]
    """The connections accepted on ``srv`` until it has waited its timeout with none and ``busy()`` is false.

    ``watches``: the change journal's module (:mod:`agentsnap_core.layers.journal`): while waiting, its events are
    read as they come (a full kernel queue would lose them all). ``chores``: ``(pending, run)``, two callables: when
    ``pending()``, ``run()`` is called once no call came for :data:`CHORE_DELAY` seconds."""
    pending, run = chores or (lambda: False, lambda: None)
    idle = srv.gettimeout()
    if watches is None or not watches.WATCHES:
        while True:
            if watches is not None and watches.WATCHES:
                break  # a watch was made meanwhile: wait on its events too
            chore = pending()
            srv.settimeout(CHORE_DELAY if chore and (idle is None or idle > CHORE_DELAY) else idle)
            try:
                conn, _ = srv.accept()
            except TimeoutError:
                if chore:
                    run()
                    continue
                if busy():
                    continue
                return
            finally:
                srv.settimeout(idle)
            yield conn
    import select
    import time

    deadline = time.monotonic() + idle if idle is not None else None
    while True:
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        chore = pending() and (left is None or left > CHORE_DELAY)
        wait = CHORE_DELAY if chore else left
        poll = select.poll()  # (not select(): any descriptor number)
        for fd in (srv.fileno(), *watches.descriptors()):
            poll.register(fd, select.POLLIN)
        ready = {fd for fd, _ev in poll.poll(None if wait is None else int(wait * 1000) + 1)}
        if srv.fileno() in ready:
            try:
                conn, _ = srv.accept()
            except (TimeoutError, BlockingIOError):
                continue
            yield conn
            deadline = time.monotonic() + idle if idle is not None else None
        elif ready:
            watches.drain_all()
        elif chore:
            run()
        elif busy():
            deadline = time.monotonic() + idle if idle is not None else None
        else:
            return


def unbind(srv, d: str, name: str, ident: int) -> None:  # type: ignore[no-untyped-def]
    """Close the socket and remove its file, unless another process has bound the name since."""
    srv.close()
    try:
        if os.stat(os.path.join(d, name)).st_ino == ident:
            os.unlink(os.path.join(d, name))
    except OSError:
        pass


def _parse(data: bytes) -> tuple[str, int, list[tuple[str, str]], tuple[str, str | None], list[str], dict[str, str]]:
    fields = data.split(b"\0")
    if len(fields) < 6 or fields[0] != MAGIC:
        raise ValueError("not an agentsnap command")
    argv0, sep, package = fields[4].partition(b"\x01")
    program = (os.fsdecode(argv0), package.decode() if sep else None)
    argc = int(fields[5])
    args = [os.fsdecode(a) for a in fields[6 : 6 + argc]]
    env = {}
    for item in fields[6 + argc :]:
        k, eq, v = item.partition(b"=")
        if eq:
            env[os.fsdecode(k)] = os.fsdecode(v)
    streams = [tuple(s.split(":", 1)) for s in fields[3].decode().split(",")]
    return os.fsdecode(fields[1]), int(fields[2]), streams, program, args, env  # type: ignore[return-value]


def _child(conn, fds: list[int], request: bytes, others: list) -> int:  # type: ignore[no-untyped-def]
    """In the forked child: become the command (the caller's streams, directory, environment, umask) and run it."""
    import io
    import signal

    for other in others:  # the connections of the other running commands: theirs to close, not this one's
        other.close()
    for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    cwd, umask, streams, (argv0, package), args, env = _parse(request)
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.environ.clear()
    os.environ.update(env)
    from agentsnap_core import plugins

    if os.environ.get(plugins.ENV_ALLOW) != _preloaded.get("allow"):
        plugins._pm = None  # this command names other plugins: built from its environment
    os.umask(umask)
    os.chdir(cwd)
    made = []
    for fd, (encoding, errors), mode in zip((0, 1, 2), streams, ("r", "w", "w"), strict=True):
        raw = io.FileIO(fd, mode + "b", closefd=False)
        buffered = io.BufferedReader(raw) if mode == "r" else io.BufferedWriter(raw)
        made.append(io.TextIOWrapper(buffered, encoding=encoding or None, errors=errors or None,
                                     line_buffering=mode == "w" and os.isatty(fd), write_through=fd == 2))
    sys.stdin, sys.stdout, sys.stderr = made
    sys.argv = [argv0, *args]
    main = type(sys)("__main__")  # the caller's program, as click names it in usage lines
    main.__package__ = package
    sys.modules["__main__"] = main
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})  # (the client passes Ctrl-C on once it has the PID
    conn.sendall(b"PID %d\n" % os.getpid())  # line, maybe at once: it ends the command with 130 in the try below)
    code: int = 0
    try:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
        from agentsnap_core.cli import _FAST_VERBS, run

        if _FAST_VERBS.intersection(args[:3]):  # status, snapshot, restore, fork: over in a moment, then this
            import gc  # process ends (os._exit): the cyclic collector would only walk the tree's entries (none of

            gc.disable()  # them garbage; ~80 ms of a 100k-file snapshot's ~330 ms); long-running verbs (ui...) keep it
        run(args, resident=False)
    except SystemExit as exc:
        if exc.code is None:
            code = 0
        elif isinstance(exc.code, int):
            code = exc.code
        else:
            sys.stderr.write(f"{exc.code}\n")
            code = 1
    except KeyboardInterrupt:  # (before the command's own handling began: nothing ran)
        sys.stderr.write("agentsnap: interrupted; the store is unchanged past the last completed step\n")
        code = 130
    except BaseException:  # noqa: BLE001 - as the interpreter would: the traceback, status 1
        import traceback

        traceback.print_exc()
        code = 1
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the command is over: a late Ctrl-C must not lose its EXIT line
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    conn.sendall(b"EXIT %d\n" % (code & 0xFF))
    return code & 0xFF


def serve(idle: float | None = None) -> int:
    """Bind the socket and fork a child per command until idle (or stale); 0 when another one already serves."""
    import signal
    import socket

    d, name = run_dir(), socket_name()
    lock = claim(d, name)
    if lock is None:
        return 0  # another one serves this socket (or the folder is not the user's alone)
    _preload()
    from agentsnap_core.layers import journal, world

    journal.serving()  # the trees our commands capture are watched (inotify): see layers/journal.py
    sources = module_files() + [p for p in sys.path if p and os.path.isdir(p)]  # code edited, packages installed
    interpreter = interpreter_env(os.environ)
    started = fingerprint(sources)
    children: dict[int, socket.socket] = {}
    ended: list[int] = []  # children whose requests for watches are still to be taken

    def requests(child: int) -> str:
        return os.path.join(d, f"journal-{child}.req")

    def handoff(child: int) -> str:
        return os.path.join(d, f"statcache-{child}.req")

    def take_ended() -> None:  # watch what the commands that ended asked for; take the stat caches they changed
        while ended:  # (layers/world.py: kept in memory here)
            done = ended.pop()
            journal.take_requests(requests(done))
            world.take_handoff(handoff(done))

    def chores() -> None:  # (once no call came for a moment: nothing forked from here shares memory it writes)
        take_ended()
        world.flush_kept()

    def reap(_signum: int = 0, _frame: object = None) -> None:
        while children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            conn = children.pop(pid, None)
            ended.append(pid)
            if conn is not None:
                if os.WIFSIGNALED(status):
                    try:
                        conn.sendall(b"SIG %d\n" % os.WTERMSIG(status))
                    except OSError:
                        pass
                conn.close()

    def stop(_signum: int, _frame: object) -> None:
        raise SystemExit(0)  # through the finally below: the socket is removed

    signal.signal(signal.SIGCHLD, reap)
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    srv, ident = bind(d, name)
    srv.settimeout(float(os.environ.get("AGENTSNAP_RESIDENT_IDLE") or IDLE_SECONDS) if idle is None else idle)
    try:
        for conn in connections(srv, lambda: bool(children), journal, (lambda: bool(ended) or world.unwritten(), chores)):
            fds: list[int] = []
            try:
                if peer_uid(conn) not in (None, os.getuid()):
                    conn.close()
                    continue
                conn.settimeout(10)
                request, fds, _flags, _addr = socket.recv_fds(conn, _MAX_REQUEST, 3)
                while True:  # the rest of a long request (no more descriptors come)
                    more = conn.recv(1 << 16)
                    if not more:
                        break
                    request += more
                if len(fds) != 3:
                    raise ValueError("a command comes with its three standard streams")
                if fingerprint(sources) != started:
                    conn.sendall(b"STALE\n")
                    sys.stderr.write(f"agentsnap resident {os.getpid()}: exiting, agentsnap changed on disk\n")
                    return 0
                if interpreter_env(_parse(request)[5]) != interpreter:
                    conn.close()  # another interpreter setup (PYTHONPATH...: other code, other plugins): the
                    continue  # client runs the command itself (nothing ran here)
                take_ended()  # then read what changed, and keep the stat caches a child wrote whole
                world.load_kept()
                journal.drain_all()
                child = os.fork()
                if child == 0:  # the child: never returns into this loop
                    code = 1
                    try:
                        srv.close()
                        os.close(lock)
                        journal.in_child(requests(os.getpid()))
                        world.HANDOFF = handoff(os.getpid())
                        code = _child(conn, fds, request, list(children.values()))
                    finally:
                        os._exit(code)
                children[child] = conn
                reap()
            except (OSError, ValueError) as exc:
                conn.close()  # the client sees no PID line and runs the command itself
                sys.stderr.write(f"agentsnap resident {os.getpid()}: a call not served: {type(exc).__name__}: {exc}\n")
            finally:
                for fd in fds:
                    os.close(fd)
        return 0  # idle
    finally:
        unbind(srv, d, name, ident)
        os.close(lock)
        take_ended()
        world.flush_kept()  # (what the last commands changed: on disk before this process ends)
        for child in [*ended, *children]:  # requests nobody will take
            for path in (requests(child), handoff(child)):
                try:
                    os.unlink(path)
                except OSError:
                    pass


def pid() -> int | None:
    """The pid of the resident process serving this installation, if one runs (from its lock file)."""
    return lock_pid(os.path.join(run_dir(), socket_name() + ".lock"))


if __name__ == "__main__":
    sys.exit(serve())
