/* The native `agentsnap` client: hands a command to the resident process without starting Python.
 *
 * Built and put in place of an installation's `agentsnap` script by `agentsnap resident install-client`
 * (agentsnap_core/cli/native.py writes config.h: this installation's Python, agentsnap's version, the protocol).
 * It speaks the protocol of the Python client in agentsnap_core/cli/resident.py (`_encode`, `call`, `_wait`):
 * the command line, working directory, umask, stream encodings and environment, NUL-separated, with the caller's
 * standard input, output and error passed as file descriptors (SCM_RIGHTS); then `PID n`, and `EXIT n` or `SIG n`.
 *
 * Whenever it cannot hand the command over before anything ran (AGENTSNAP_RESIDENT is not 1, the verb is
 * `resident`, the private folder is missing or not private, nobody listens, the resident process is stale or
 * refuses), it becomes the Python script it replaced: it execs this installation's Python with the same code the
 * script runs, so every message, the start of a resident process and the command itself are exactly the
 * script's. It never decides anything the script would decide differently.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <langinfo.h>
#include <locale.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "config.h"        /* AGENTSNAP_PYTHON, AGENTSNAP_VERSION, AGENTSNAP_PROTOCOL */
#include "native_common.h" /* buf_add, fnv1a, private_run_dir */

#ifndef SOCK_CLOEXEC
#define SOCK_CLOEXEC 0
#endif

/* found by `agentsnap resident install-client` / `remove-client` to tell this binary from anything else */
const char agentsnap_native_client_marker[] = "agentsnap-native-client " AGENTSNAP_VERSION;

extern char **environ;

/* What the script runs (sys.path[0] is the working directory under -c: never import from it). */
#define SCRIPT_CODE \
    "import sys\n" \
    "if sys.path[:1] == ['']:\n    del sys.path[0]\n" \
    "del sys.argv[0]\n" \
    "from agentsnap_core.cli import run\n" \
    "sys.exit(run())\n"

static void become_script(char **argv) {
    int argc = 0;
    while (argv[argc]) argc++;
    char **a = calloc((size_t)argc + 4, sizeof *a);
    if (!a) exit(70);
    a[0] = AGENTSNAP_PYTHON;
    a[1] = "-c";
    a[2] = SCRIPT_CODE;
    for (int i = 0; i < argc; i++) a[i + 3] = argv[i];
    execv(AGENTSNAP_PYTHON, a);
    fprintf(stderr, "agentsnap: cannot run %s (%s): reinstall agentsnap, or run 'python -m agentsnap_core'\n",
            AGENTSNAP_PYTHON, strerror(errno));
    exit(127);
}

/* become_script with the signals blocked while the command was handed over let through first: one that came
 * meanwhile ends this process as it would have then (nothing ran) */
static void unblocked_script(char **argv, const sigset_t *old_mask) {
    sigprocmask(SIG_SETMASK, old_mask, NULL);
    become_script(argv);
}

static struct buf req;

static void field(const char *s) { buf_add(&req, s, strlen(s) + 1); }

/* The encodings a fresh interpreter would give its standard streams in this environment (Python 3.7+:
 * PYTHONIOENCODING, the UTF-8 mode of the C/POSIX locale or PYTHONUTF8, else the locale's codeset). */
static void stream_encodings(char *out, size_t n) {
    const char *loc = setlocale(LC_CTYPE, "");
    if (!loc) loc = "C";
    int c_locale = !strcmp(loc, "C") || !strcmp(loc, "POSIX");
    const char *u = getenv("PYTHONUTF8");
    int utf8 = (u && *u) ? !strcmp(u, "1") : c_locale;
    char enc[64] = "", err[64] = "";
    if (utf8) snprintf(enc, sizeof enc, "utf-8");
    else snprintf(enc, sizeof enc, "%s", nl_langinfo(CODESET));
    int escape = utf8 || c_locale || !strcmp(loc, "C.UTF-8") || !strcmp(loc, "C.utf8") || !strcmp(loc, "UTF-8");
    snprintf(err, sizeof err, "%s", escape ? "surrogateescape" : "strict");
    const char *io = getenv("PYTHONIOENCODING");
    if (io && *io) {
        const char *colon = strchr(io, ':');
        size_t k = colon ? (size_t)(colon - io) : strlen(io);
        if (k && k < sizeof enc) {
            memcpy(enc, io, k);
            enc[k] = 0;
        }
        if (colon && colon[1] && strlen(colon + 1) < sizeof err) snprintf(err, sizeof err, "%s", colon + 1);
    }
    snprintf(out, n, "%s:%s,%s:%s,%s:backslashreplace", enc, err, enc, err, enc);
}

static volatile sig_atomic_t child;

static void forward(int sig) {
    if (child > 0) kill((pid_t)child, sig);
}

int main(int argc, char **argv) {
    const char *on = getenv("AGENTSNAP_RESIDENT");
    if (argc < 2 || !on || strcmp(on, "1") || !strcmp(argv[1], "resident") || !strcmp(argv[1], "--version"))
        become_script(argv);

    char dir[4096];
    if (!private_run_dir("AGENTSNAP_RESIDENT_DIR", dir, sizeof dir))
        become_script(argv); /* (the script says why, or starts a resident process) */

    /* cli-<FNV-1a of the Python's path, NUL, agentsnap's version>-p<PROTOCOL>.sock (resident.socket_name) */
    uint64_t h = fnv1a(0xCBF29CE484222325ULL, AGENTSNAP_PYTHON, sizeof AGENTSNAP_PYTHON);
    h = fnv1a(h, AGENTSNAP_VERSION, strlen(AGENTSNAP_VERSION));
    struct sockaddr_un addr;
    memset(&addr, 0, sizeof addr);
    addr.sun_family = AF_UNIX;
    if ((size_t)snprintf(addr.sun_path, sizeof addr.sun_path, "%s/cli-%016llx-p%d.sock", dir,
                         (unsigned long long)h, AGENTSNAP_PROTOCOL) >= sizeof addr.sun_path)
        become_script(argv);

    char *cwd = getcwd(NULL, 0);
    if (!cwd) become_script(argv); /* e.g. the working directory is gone: the script says so */
    mode_t um = umask(0);
    umask(um);
    char tmp[512];
    snprintf(tmp, sizeof tmp, "AGSNAPCLI%d", AGENTSNAP_PROTOCOL);
    field(tmp);
    field(cwd);
    snprintf(tmp, sizeof tmp, "%u", (unsigned)um);
    field(tmp);
    stream_encodings(tmp, sizeof tmp);
    field(tmp);
    field(argv[0]);
    snprintf(tmp, sizeof tmp, "%d", argc - 1);
    field(tmp);
    for (int i = 1; i < argc; i++) field(argv[i]);
    for (char **e = environ; *e; e++)
        if (strchr(*e, '=')) field(*e);
    req.len--; /* NUL-separated, not NUL-terminated */

    signal(SIGPIPE, SIG_IGN); /* (a closed connection is an error return, not the end of this process) */
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s >= 0 && s <= 2) { /* a standard stream is closed and the socket took its number: it would be the */
        close(s);           /* command's stream (its output sent into this very connection); the script runs it */
        become_script(argv);
    }
    if (s < 0 || connect(s, (struct sockaddr *)&addr, sizeof addr)) become_script(argv);
    /* Ctrl-C, SIGTERM and SIGHUP wait (blocked) until the command runs in a child (its PID line), then reach it:
     * once the request is sent a child may run it, so dying here would leave it running unseen (and a signal
     * before the request was taken ends this process as before, nothing having run) */
    sigset_t stops, old_mask;
    sigemptyset(&stops);
    sigaddset(&stops, SIGINT);
    sigaddset(&stops, SIGTERM);
    sigaddset(&stops, SIGHUP);
    sigprocmask(SIG_BLOCK, &stops, &old_mask);
    int fds[3] = {0, 1, 2};
    union {
        char raw[CMSG_SPACE(sizeof fds)];
        struct cmsghdr align;
    } control;
    memset(&control, 0, sizeof control);
    struct iovec iov = {req.data, req.len};
    struct msghdr msg;
    memset(&msg, 0, sizeof msg);
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.raw;
    msg.msg_controllen = sizeof control.raw;
    struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof fds);
    memcpy(CMSG_DATA(c), fds, sizeof fds);
    ssize_t sent;
    do sent = sendmsg(s, &msg, MSG_NOSIGNAL);
    while (sent < 0 && errno == EINTR);
    if (sent < 0) unblocked_script(argv, &old_mask); /* nothing ran */
    while ((size_t)sent < req.len) {
        ssize_t k = send(s, req.data + sent, req.len - (size_t)sent, MSG_NOSIGNAL);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) unblocked_script(argv, &old_mask);
        sent += k;
    }
    shutdown(s, SHUT_WR);

    /* the replies: `PID n\n` once the child runs, then `EXIT n\n` or `SIG n\n` */
    char r[4096];
    size_t rl = 0;
    for (;;) {
        ssize_t k = recv(s, r + rl, sizeof r - 1 - rl, 0);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) break;
        rl += (size_t)k;
        r[rl] = 0;
        if (!child && !strncmp(r, "PID ", 4) && strchr(r, '\n')) {
            child = atoi(r + 4);
            struct sigaction sa;
            memset(&sa, 0, sizeof sa);
            sa.sa_handler = forward; /* (no SA_RESTART: recv returns EINTR and goes on) */
            sigaction(SIGINT, &sa, NULL);
            sigaction(SIGTERM, &sa, NULL);
            sigaction(SIGHUP, &sa, NULL);
            sigprocmask(SIG_SETMASK, &old_mask, NULL); /* (a signal that came meanwhile is forwarded now) */
        }
        char *ex = strstr(r, "\nEXIT ");
        if (child && ex && r[rl - 1] == '\n') return atoi(ex + 6);
        if (rl == sizeof r - 1) break;
    }
    if (!child) unblocked_script(argv, &old_mask); /* nothing ran (STALE, refused, or it went away) */
    char *sg = strstr(r, "\nSIG ");
    if (sg) {
        int sig = atoi(sg + 5);
        fprintf(stderr, "agentsnap: the command was killed by signal %d\n", sig);
        return 128 + sig;
    }
    fprintf(stderr, "agentsnap: the resident process ended the command without an exit status\n");
    return 1;
}
