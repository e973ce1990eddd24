/* The native hook client: Claude Code's hook JSON to the warm helper, without starting Python.
 *
 * Built and put in place of the `agentsnap-claude-code-hook` script by `agentsnap-claude-code install-client`
 * (core's agentsnap_core/cli/native.py writes config.h: this installation's Python and the helper's protocol).
 * It speaks the protocol of the quick script (plugin/hooks/agentsnap_quick.py, `ask_helper`) and the helper
 * (agentsnap_claude_code/daemon.py): `MAGIC\0event\0cwd\0K=V...\0\0` then the hook's standard input; the reply
 * `MAGIC\0code\0len(out)\0len(err)\0` out err `END`. The helper judges every call (harmless ones included).
 *
 * It never decides anything itself. Whenever the helper does not answer in full, the call goes to Python with the
 * same standard input: to the quick script (AGENTSNAP_HOOK_QUICK, set by the plugin's hook script) when no helper
 * could be reached (it answers harmless calls at once and starts a helper for the next ones), else (the helper
 * was stale, cut its reply short, or did not answer within AGENTSNAP_HOOK_DAEMON_TIMEOUT) to the in-process
 * path, as the quick script itself does then. The plugin's hook script still fails closed around all of this.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "config.h"        /* AGENTSNAP_PYTHON, AGENTSNAP_HOOK_PROTOCOL */
#include "native_common.h" /* core's: buf_add, fnv1a, private_run_dir, write_all */

/* found by `agentsnap-claude-code install-client` / `remove-client` to tell this binary from anything else */
const char agentsnap_hook_client_marker[] = "agentsnap-hook-native-client";

extern char **environ;

#define GATE_CODE \
    "import sys\n" \
    "if sys.path[:1] == ['']:\n    del sys.path[0]\n" \
    "from agentsnap_claude_code.gate import main\n" \
    "sys.exit(main(sys.argv[1:], start_helper=True))\n"

static char *in;
static size_t in_len;

/* Run the call in Python, its standard input the bytes already read. */
static void to_python(char **argv, int reached) {
    FILE *f = tmpfile();
    if (!f || (in_len && fwrite(in, 1, in_len, f) != in_len) || fflush(f) || fseek(f, 0, SEEK_SET) ||
        dup2(fileno(f), 0) < 0) {
        fprintf(stderr, "agentsnap: cannot pass the hook's input on (%s)\n", strerror(errno));
        exit(1); /* (the hook script asks about a Bash call whose helper failed) */
    }
    int argc = 0;
    while (argv[argc]) argc++;
    char **a = calloc((size_t)argc + 4, sizeof *a);
    if (!a) exit(70);
    const char *quick = getenv("AGENTSNAP_HOOK_QUICK");
    int n = 0;
    a[n++] = AGENTSNAP_PYTHON;
    if (!reached && quick && *quick && access(quick, R_OK) == 0) {
        a[n++] = "-S";
        a[n++] = (char *)quick;
    } else {
        a[n++] = "-c";
        a[n++] = GATE_CODE;
    }
    for (int i = 1; i < argc; i++) a[n++] = argv[i];
    execv(AGENTSNAP_PYTHON, a);
    fprintf(stderr, "agentsnap: cannot run %s (%s): reinstall agentsnap-claude-code\n", AGENTSNAP_PYTHON,
            strerror(errno));
    exit(1);
}

static struct buf req;

static void add(const char *s, size_t n) { buf_add(&req, s, n); }

int main(int argc, char **argv) {
    const char *event = argc > 1 ? argv[1] : "";
    size_t cap = 1 << 16;
    in = malloc(cap);
    if (!in) exit(70);
    for (;;) {
        if (in_len == cap && !(in = realloc(in, cap *= 2))) exit(70);
        ssize_t k = read(0, in + in_len, cap - in_len);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) break;
        in_len += (size_t)k;
    }
    const char *off = getenv("AGENTSNAP_HOOK_DAEMON");
    if (off && !strcmp(off, "0")) to_python(argv, 0);

    char dir[4096];
    if (!private_run_dir("AGENTSNAP_HOOK_RUN_DIR", dir, sizeof dir)) to_python(argv, 0);

    /* hook-<FNV-1a of the Python's path>-p<PROTOCOL>.sock (daemon.socket_name) */
    uint64_t h = fnv1a(0xCBF29CE484222325ULL, AGENTSNAP_PYTHON, strlen(AGENTSNAP_PYTHON));
    char name[64];
    snprintf(name, sizeof name, "hook-%016llx-p%d.sock", (unsigned long long)h, AGENTSNAP_HOOK_PROTOCOL);
    struct sockaddr_un addr;
    memset(&addr, 0, sizeof addr);
    addr.sun_family = AF_UNIX;
    int s = socket(AF_UNIX, SOCK_STREAM, 0);
    if (s < 0) to_python(argv, 0);
    const char *t = getenv("AGENTSNAP_HOOK_DAEMON_TIMEOUT");
    double limit = t && *t ? atof(t) : 48.0;
    if (limit <= 0) limit = 48.0;
    struct timeval tv = {(time_t)limit, (suseconds_t)((limit - (double)(time_t)limit) * 1e6)};
    setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    int connected;
    if (strlen(dir) + 1 + strlen(name) < sizeof addr.sun_path) {
        snprintf(addr.sun_path, sizeof addr.sun_path, "%s/%s", dir, name);
        connected = connect(s, (struct sockaddr *)&addr, sizeof addr) == 0;
    } else { /* a socket path has a length limit: connect by the name relative to its folder */
        int here = open(".", O_RDONLY | O_DIRECTORY);
        snprintf(addr.sun_path, sizeof addr.sun_path, "%s", name);
        connected = here >= 0 && chdir(dir) == 0 && connect(s, (struct sockaddr *)&addr, sizeof addr) == 0;
        if (here >= 0) {
            if (fchdir(here)) connected = 0;
            close(here);
        }
    }
    if (!connected) to_python(argv, 0);

    char *cwd = getcwd(NULL, 0);
    char magic[32];
    int ml = snprintf(magic, sizeof magic, "AGSNAP%d", AGENTSNAP_HOOK_PROTOCOL);
    add(magic, (size_t)ml);
    add("", 1);
    add(event, strlen(event));
    add("", 1);
    add(cwd ? cwd : "/", strlen(cwd ? cwd : "/"));
    for (char **e = environ; *e; e++) {
        if (!strchr(*e, '=')) continue;
        add("", 1);
        add(*e, strlen(*e));
    }
    add("\0\0", 2);
    add(in, in_len);
    for (size_t sent = 0; sent < req.len;) {
        ssize_t k = send(s, req.data + sent, req.len - sent, MSG_NOSIGNAL);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) to_python(argv, 1);
        sent += (size_t)k;
    }
    shutdown(s, SHUT_WR);
    size_t rcap = 1 << 16, rl = 0;
    char *r = malloc(rcap);
    if (!r) exit(70);
    for (;;) {
        if (rl == rcap && !(r = realloc(r, rcap *= 2))) exit(70);
        ssize_t k = recv(s, r + rl, rcap - rl, 0);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) to_python(argv, 1); /* (timed out: the in-process path, as the quick script does) */
        if (k == 0) break;
        rl += (size_t)k;
    }
    /* MAGIC \0 code \0 n_out \0 n_err \0 body, body = out err END */
    size_t pos = 0;
    const char *f[4];
    for (int i = 0; i < 4; i++) {
        f[i] = r + pos;
        char *z = memchr(r + pos, 0, rl - pos);
        if (!z) to_python(argv, 1);
        pos = (size_t)(z - r) + 1;
    }
    if (strcmp(f[0], magic)) to_python(argv, 1); /* stale, or of another version */
    char *end;
    long code = strtol(f[1], &end, 10);
    if (*end || end == f[1]) to_python(argv, 1);
    unsigned long long n_out = strtoull(f[2], &end, 10);
    if (*end || end == f[2]) to_python(argv, 1);
    unsigned long long n_err = strtoull(f[3], &end, 10);
    if (*end || end == f[3]) to_python(argv, 1);
    const char *body = r + pos;
    size_t body_len = rl - pos;
    if (n_out > body_len || n_err > body_len || body_len != n_out + n_err + 3 ||
        memcmp(body + n_out + n_err, "END", 3))
        to_python(argv, 1); /* cut short or garbled */
    if (n_out && (write_all(1, body, (size_t)n_out) || write_all(1, "\n", 1))) return 1;
    if (n_err && (write_all(2, body + n_out, (size_t)n_err) || write_all(2, "\n", 1))) return 1;
    return (int)code;
}
