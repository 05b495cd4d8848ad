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
#include "common/error.h"
#include "common/fd_socket.h"
#include "common/shm_segment.h"

#define TAG_SHM_NAME (-4) /* the data plane's own tag: where to fetch a rank's segment */

/* What the host's first rank tells each peer: how large a slot it made (every rank asks
 * for the same), and where to fetch the segment. */
typedef struct {
    uint64_t bytes;
    char name[FD_SOCKET_NAME_BYTES];
} handover_offer;

/* The ranks of this host in rank order, k-th at local[k]: the offer goes down a binary tree
 * of them (k's children are 2k+1 and 2k+2), so that no rank opens more than three data
 * connections for it, and it reaches every rank in log2(ranks) hops. */
static int pass_offer_on(comm *c, const int *local, int n_local, int k, const handover_offer *offer,
                         uint64_t deadline_ms) {
    comm_call call = {.kind = COLL_SEND, .t = DTYPE_U8, .count = sizeof(*offer), .deadline_ms = deadline_ms};
    for (int child = 2 * k + 1; child <= 2 * k + 2 && child < n_local; child++) {
        call.root = local[child];
        TRY(comm_send(c, local[child], &call, TAG_SHM_NAME, 0, offer, sizeof(*offer), false));
    }
    return 0;
}

/* The leader's side: makes the host's segment, tells each peer where it is, and hands it
 * to each peer that comes, once the kernel says that it is a rank of the job on this host
 * (the same user, the pid ddpd's Welcome gave), and each only once. Anyone else (the
 * socket's name is no secret: /proc/net/unix lists it) is turned away and the wait goes
 * on: a stranger must not be able to end the job. */
static int lead(comm *c, const int *local, int n_local, size_t bytes, int fd, uint64_t deadline_ms) {
    int n = c->peers.world, me = c->peers.rank, listener = -1, r, peers = n_local - 1;
    handover_offer offer = {.bytes = bytes};
    if ((r = fd_socket_listen("ddp-shm-", offer.name, peers + 1, &listener)) < 0)
        return comm_fail(c, r, "cannot listen for the peers' shared memory: %s", strerror(-r));
    r = pass_offer_on(c, local, n_local, 0, &offer, deadline_ms);
    bool *served = calloc((size_t)n, sizeof(bool));
    if (!served && r == 0)
        r = comm_fail(c, -ENOMEM, "out of memory");
    uid_t uid = getuid();
    char refused[160] = ""; /* the last stranger, named if the ranks do not all come */
    for (int k = 0; k < peers && r == 0; k++) {
        struct pollfd pfd[2] = {{.fd = listener, .events = POLLIN}, {.fd = c->end->fd, .events = POLLIN}};
        int ready = poll(pfd, 2, clock_ms_until(deadline_ms));
        if ((r = comm_check_end(c)) < 0) /* a rank that failed will never come */
            break;
        if (ready < 0 && errno == EINTR) { /* a signal: if it ends the job, the end says so next time round */
            k--;
            continue;
        }
        int sock = ready > 0 ? accept4(listener, NULL, NULL, SOCK_CLOEXEC) : -1;
        fd_peer cred;
        if (sock < 0 || (r = fd_socket_peer(sock, &cred)) < 0) {
            r = ready == 0 ? -ETIMEDOUT : r < 0 ? r : -errno;
            comm_fail(c, r, "waiting for the ranks of this host to fetch the shared memory (%d of %d came): %s%s", k,
                      peers, strerror(-r), refused);
            if (sock >= 0)
                close(sock);
            break;
        }
        int from = -1;
        for (int p = 0; p < n; p++)
            if (p != me && c->peers.here[p] && c->peers.pids[p] == (uint32_t)cred.pid)
                from = p;
        if (cred.uid != uid || from < 0 || served[from]) {
            snprintf(refused, sizeof(refused),
                     "; refused pid %d of uid %u, which is not a rank of the job that has yet to fetch it",
                     (int)cred.pid, (unsigned)cred.uid);
            k--;
        } else if ((r = fd_socket_send(sock, fd, me)) < 0)
            comm_fail(c, r, "cannot hand rank %d the shared memory: %s", from, strerror(-r));
        else
            served[from] = true;
        close(sock);
    }
    free(served);
    close(listener);
    return r;
}

/* The side of the host's k-th rank: takes the offer from its parent in the tree and passes
 * it on, fetches the segment from the leader, whose pid the kernel confirms, and maps it
 * once it is what the leader made for slots of bytes. */
static int follow(comm *c, const int *local, int n_local, int k, size_t bytes, size_t total, char **ret_map,
                  uint64_t deadline_ms) {
    int leader = local[0], parent = local[(k - 1) / 2];
    comm_call call = {
        .kind = COLL_SEND, .t = DTYPE_U8, .count = sizeof(handover_offer), .root = parent, .deadline_ms = deadline_ms};
    comm_frame *f = NULL;
    TRY(comm_recv(c, parent, &call, TAG_SHM_NAME, &f));
    handover_offer offer;
    int r = comm_expect_range(c, f, &call, 0, sizeof(offer)); /* the whole offer, or none of it is read */
    if (r == 0)
        memcpy(&offer, f->data, sizeof(offer));
    comm_frame_free(c, f);
    TRY(r);
    offer.name[FD_SOCKET_NAME_BYTES - 1] = '\0';
    TRY(pass_offer_on(c, local, n_local, k, &offer, deadline_ms));
    int sock = -1, got = -1;
    int32_t said = -1;
    fd_peer cred;
    if ((r = fd_socket_connect(offer.name, &sock)) < 0 || (r = fd_socket_peer(sock, &cred)) < 0)
        comm_fail(c, r, "cannot reach rank %d's shared memory: %s", leader, strerror(-r));
    else if (cred.uid != getuid() || (uint32_t)cred.pid != c->peers.pids[leader])
        r = comm_fail(c, -EPERM,
                      "the socket rank %d named is held by pid %d of uid %u, not rank %d's pid %u of uid %u: refused",
                      leader, (int)cred.pid, (unsigned)cred.uid, leader, c->peers.pids[leader], (unsigned)getuid());
    else if ((r = fd_socket_recv(sock, deadline_ms, &got, &said)) < 0)
        comm_fail(c, r, "rank %d did not hand over the shared memory: %s", leader, strerror(-r));
    else if (said != leader)
        r = comm_fail(c, -EPROTO, "rank %d handed over the shared memory as rank %d", leader, (int)said);
    else if (offer.bytes != bytes) /* fetched all the same, so that the leader is not left waiting */
        r = comm_fail(c, -EINVAL, "rank %d asked for %llu bytes of shared memory where this rank asked for %zu", leader,
                      (unsigned long long)offer.bytes, bytes);
    else {
        char why[128];
        if ((r = shm_segment_map(got, total, ret_map, why, sizeof(why))) < 0)
            comm_fail(c, r, "rank %d handed over a segment that is refused: %s", leader, why);
    }
    if (got >= 0)
        fd_socket_close_passed(got);
    if (sock >= 0)
        close(sock);
    return r;
}

int shm_handover(comm *c, const char *name, size_t bytes, char **maps) {
    int n = c->peers.world, me = c->peers.rank, n_local = 0, k = 0;
    int *local = malloc((size_t)n * sizeof(int));
    if (!local)
        return comm_fail(c, -ENOMEM, "out of memory");
    for (int p = 0; p < n; p++)
        if (c->peers.here[p]) {
            k = p == me ? n_local : k;
            local[n_local++] = p;
        }
    size_t page = (size_t)sysconf(_SC_PAGESIZE), stride = (bytes + page - 1) / page * page;
    if (stride > SIZE_MAX / (size_t)n_local) {
        free(local);
        return comm_fail(c, -ENOMEM, "%d slots of %zu bytes of shared memory are too many", n_local, bytes);
    }
    size_t total = stride * (size_t)n_local;
    uint64_t deadline_ms = clock_now_ms() + (uint64_t)c->timeout_ms;
    char *base = NULL;
    int r;
    if (k == 0) {
        int fd = -1;
        if ((r = shm_segment_make(name, total, &fd)) < 0) {
            free(local);
            return comm_fail(c, r, "cannot make this host's shared memory (%zu bytes): %s", total, strerror(-r));
        }
        char why[128];
        if ((r = shm_segment_map(fd, total, &base, why, sizeof(why))) < 0)
            comm_fail(c, r, "cannot map this host's shared memory: %s", why);
        else if ((r = lead(c, local, n_local, bytes, fd, deadline_ms)) < 0) {
            munmap(base, total);
            base = NULL;
        }
        close(fd); /* the mappings keep the segment; it goes with the last process that maps it */
    } else
        r = follow(c, local, n_local, k, bytes, total, &base, deadline_ms);
    free(local);
    if (r < 0)
        return r;
    /* slot k is the host's k-th rank's, page-aligned: shm_unmap_all unmaps them one by one */
    for (int p = 0, slot = 0; p < n; p++)
        if (c->peers.here[p])
            maps[p] = base + stride * (size_t)slot++;
    return 0;
}

void shm_unmap_all(char **maps, int world, size_t bytes) {
    for (int p = 0; p < world; p++)
        if (maps[p]) {
            munmap(maps[p], bytes);
            maps[p] = NULL;
        }
}
