#include "server/endpoint.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

/* Whether the Unix socket at path is stale: nobody listens there (ECONNREFUSED). Any
 * other answer (a listener, one we may not reach, a socket of another type) is not. */
static bool socket_is_stale(const char *path) {
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return false;
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", path);
    bool stale = connect(fd, (struct sockaddr *)&addr, sizeof(addr)) < 0 && errno == ECONNREFUSED;
    close(fd);
    return stale;
}

int endpoint_claim_prepare(endpoint_claim *c, const char *ep, char *err, size_t err_size) {
    *c = (endpoint_claim){0};
    if (strncmp(ep, "ipc://", 6) != 0 || ep[6] == '@') /* TCP, or Linux's abstract namespace: no file */
        return 0;
    c->ipc = true;
    snprintf(c->path, sizeof(c->path), "%s", ep + 6);
    struct stat st;
    if (lstat(c->path, &st) < 0)
        return 0; /* nothing there */
    if (!S_ISSOCK(st.st_mode)) {
        snprintf(err, err_size, "Failed to bind '%s': %s exists and is not a socket", ep, c->path);
        return -EEXIST;
    }
    if (!socket_is_stale(c->path)) {
        snprintf(err, err_size, "Failed to bind '%s': another process listens there (a ddpd already running?)", ep);
        return -EADDRINUSE;
    }
    unlink(c->path); /* left by a ddpd that did not exit cleanly */
    return 0;
}

void endpoint_claim_bound(endpoint_claim *c) {
    struct stat st;
    if (c->ipc && stat(c->path, &st) == 0) {
        c->dev = st.st_dev;
        c->ino = st.st_ino;
    }
}

void endpoint_claim_release(endpoint_claim *c) {
    struct stat st;
    if (c->ipc && c->ino && stat(c->path, &st) == 0 && st.st_dev == c->dev && st.st_ino == c->ino)
        unlink(c->path);
    c->ipc = false;
}
