/* What agentsnap's native clients share (native_client.c here, the Claude Code adapter's hook_client.c):
 * a growing byte buffer, FNV-1a (the socket names), the private socket folder and its checks. Compiled into each
 * client by agentsnap_core/cli/native.py (`-I` this folder). */
#ifndef AGENTSNAP_NATIVE_COMMON_H
#define AGENTSNAP_NATIVE_COMMON_H

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef MSG_NOSIGNAL /* (macOS: SIGPIPE is ignored instead) */
#define MSG_NOSIGNAL 0
#endif

struct buf {
    char *data;
    size_t len, cap;
};

static inline void buf_add(struct buf *b, const void *p, size_t n) {
    if (b->len + n > b->cap) {
        b->cap = (b->len + n) * 2 + 4096;
        b->data = realloc(b->data, b->cap);
        if (!b->data) exit(70);
    }
    memcpy(b->data + b->len, p, n);
    b->len += n;
}

/* FNV-1a over n bytes, from h (0xCBF29CE484222325 to start), as the Python side computes socket names */
static inline uint64_t fnv1a(uint64_t h, const void *p, size_t n) {
    const unsigned char *c = p;
    for (size_t i = 0; i < n; i++) h = (h ^ c[i]) * 0x100000001B3ULL;
    return h;
}

/* The socket folder: $<env_name>, else $XDG_RUNTIME_DIR/agentsnap, else /tmp/agentsnap-<uid>; 1 when it is a real
 * folder of this user that nobody else may enter (else nobody's socket there is used) */
static inline int private_run_dir(const char *env_name, char *out, size_t n) {
    const char *d = getenv(env_name), *rt = getenv("XDG_RUNTIME_DIR");
    int w;
    if (d && *d) w = snprintf(out, n, "%s", d);
    else if (rt && *rt) w = snprintf(out, n, "%s/agentsnap", rt);
    else w = snprintf(out, n, "/tmp/agentsnap-%u", (unsigned)getuid());
    struct stat st;
    return w > 0 && (size_t)w < n && !lstat(out, &st) && S_ISDIR(st.st_mode) && st.st_uid == getuid() &&
           !(st.st_mode & 077);
}

static inline int write_all(int fd, const char *p, size_t n) {
    while (n) {
        ssize_t k = write(fd, p, n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return -1;
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

#endif
