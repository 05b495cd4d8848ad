#define _GNU_SOURCE /* accept4 */
#include "worker/libddp/shm_handover.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/fd_socket.h"
#include "common/shm_segment.h"

#define TAG_SHM_NAME (-4) /* the data plane's own tag: where to fetch a rank's segment */

/* A segment a peer handed over, mapped once it is what every rank makes. */
static int map_segment(comm *c, int fd, size_t bytes, int r, char **ret) {
    char why[128];
    int err = shm_segment_map(fd, bytes, ret, why, sizeof(why));
    return err < 0 ? comm_fail(c, err, "rank %d handed over a segment that is refused: %s", r, why) : 0;
}

/* The exchange, among the ranks of this host: every rank listens under a random name and
 * tells every peer that name over the transport; it connects to every peer's (a connection to a listening Unix socket
 * is made at once, accepted or not), accepts every peer's connection and hands its memfd
 * to each, then receives each peer's. Both ends check the kernel's credentials against the
 * Welcome: the same user, the pid of the rank it should be. */
static int exchange(comm *c, int fd, size_t bytes, char **maps, uint64_t deadline_ms) {
    int n = c->peers.world, me = c->peers.rank, listener = -1, r, peers = 0;
    for (int p = 0; p < n; p++)
        peers += p != me && c->peers.here[p];
    char name[FD_SOCKET_NAME_BYTES] = {0};
    int *to = malloc((size_t)n * sizeof(int)); /* connected to rank p, to fetch its segment */
    if (!to)
        return comm_fail(c, -ENOMEM, "out of memory");
    for (int p = 0; p < n; p++)
        to[p] = -1;
    if ((r = fd_socket_listen("ddp-shm-", name, peers + 1, &listener)) < 0) {
        comm_fail(c, r, "cannot listen for the peers' shared memory: %s", strerror(-r));
        goto out;
    }
    comm_call call = {.kind = COLL_SEND, .t = DTYPE_U8, .count = FD_SOCKET_NAME_BYTES, .deadline_ms = deadline_ms};
    for (int p = 0; p < n && r == 0; p++)
        if (p != me && c->peers.here[p]) {
            call.root = p;
            r = comm_send(c, p, &call, TAG_SHM_NAME, 0, name, FD_SOCKET_NAME_BYTES, false);
        }
    uid_t uid = getuid();
    for (int p = 0; p < n && r == 0; p++) {
        if (p == me || !c->peers.here[p])
            continue;
        comm_frame *f = NULL;
        call.root = p;
        char theirs[FD_SOCKET_NAME_BYTES];
        if ((r = comm_recv(c, p, &call, TAG_SHM_NAME, &f)) < 0)
            break;
        memcpy(theirs, f->data, FD_SOCKET_NAME_BYTES);
        comm_frame_free(c, f);
        theirs[FD_SOCKET_NAME_BYTES - 1] = '\0';
        fd_peer cred;
        if ((r = fd_socket_connect(theirs, &to[p])) < 0 || (r = fd_socket_peer(to[p], &cred)) < 0) {
            comm_fail(c, r, "cannot reach rank %d's shared memory: %s", p, strerror(-r));
            break;
        }
        if (cred.uid != uid || (uint32_t)cred.pid != c->peers.pids[p]) {
            r = comm_fail(c, -EPERM,
                          "the socket rank %d named is held by pid %d of uid %u, not rank %d's pid %u of "
                          "uid %u: refused",
                          p, (int)cred.pid, (unsigned)cred.uid, p, c->peers.pids[p], (unsigned)uid);
            break;
        }
    }
    /* every peer connects to us: hand each our segment, once the kernel says who it is */
    for (int k = 0; k < peers && r == 0; k++) {
        struct pollfd pfd = {.fd = listener, .events = POLLIN};
        int ready = poll(&pfd, 1, clock_ms_until(deadline_ms));
        int sock = ready > 0 ? accept4(listener, NULL, NULL, SOCK_CLOEXEC) : -1;
        fd_peer cred;
        if (sock < 0 || (r = fd_socket_peer(sock, &cred)) < 0) {
            r = ready == 0 ? -ETIMEDOUT : r < 0 ? r : -errno;
            comm_fail(c, r, "waiting for the peers to fetch this rank's shared memory: %s", strerror(-r));
            if (sock >= 0)
                close(sock);
            break;
        }
        int from = -1;
        for (int p = 0; p < n; p++)
            if (p != me && c->peers.here[p] && c->peers.pids[p] == (uint32_t)cred.pid)
                from = p;
        if (cred.uid != uid || from < 0)
            r = comm_fail(c, -EPERM,
                          "pid %d of uid %u asked for this rank's shared memory; it is not in the job: refused",
                          (int)cred.pid, (unsigned)cred.uid);
        else if ((r = fd_socket_send(sock, fd, me)) < 0)
            comm_fail(c, r, "cannot hand rank %d this rank's shared memory: %s", from, strerror(-r));
        close(sock);
    }
    for (int p = 0; p < n && r == 0; p++) {
        if (p == me || !c->peers.here[p])
            continue;
        int got = -1;
        int32_t said = -1;
        if ((r = fd_socket_recv(to[p], deadline_ms, &got, &said)) < 0) {
            comm_fail(c, r, "rank %d did not hand over its shared memory: %s", p, strerror(-r));
            break;
        }
        r = said == p ? map_segment(c, got, bytes, p, &maps[p])
                      : comm_fail(c, -EPROTO, "rank %d handed over a segment as rank %d", p, (int)said);
        close(got);
    }
out:
    for (int p = 0; p < n; p++)
        if (to[p] >= 0)
            close(to[p]);
    free(to);
    if (listener >= 0)
        close(listener);
    return r;
}

int shm_handover(comm *c, const char *name, size_t bytes, char **maps) {
    int fd = -1, r = shm_segment_make(name, bytes, &fd);
    if (r < 0)
        return comm_fail(c, r, "cannot make this rank's shared memory: %s", strerror(-r));
    char why[128];
    int me = c->peers.rank;
    if ((r = shm_segment_map(fd, bytes, &maps[me], why, sizeof(why))) < 0) {
        close(fd);
        return comm_fail(c, r, "cannot map this rank's shared memory: %s", why);
    }
    r = exchange(c, fd, bytes, maps, clock_now_ms() + (uint64_t)c->timeout_ms);
    close(fd); /* the mappings keep the segments; they go with the last process that maps them */
    if (r < 0)
        shm_unmap_all(maps, c->peers.world, bytes);
    return r;
}

void shm_unmap_all(char **maps, int world, size_t bytes) {
    for (int p = 0; p < world; p++)
        if (maps[p]) {
            munmap(maps[p], bytes);
            maps[p] = NULL;
        }
}
