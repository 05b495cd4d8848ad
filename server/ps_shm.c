#define _GNU_SOURCE /* accept4 */
#include "server/ps_shm.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/error.h"
#include "common/fd_passed.h"
#include "common/ps_segment.h"
#include "common/shm_segment.h"

int ps_shm_open(ps_shm *p, uint32_t world, size_t float_bytes, size_t n_buckets) {
    *p = PS_SHM_NONE;
    p->bytes = ps_segment_bytes(float_bytes, n_buckets);
    p->float_bytes = float_bytes;
    p->n_buckets = n_buckets;
    p->world = world;
    char why[128];
    int r;
    if (!(p->pushed = calloc(world, sizeof(char *))) || !(p->by_message = calloc(world, sizeof(bool))) ||
        !(p->by_frame = calloc(world, sizeof(bool)))) {
        free(p->pushed);
        free(p->by_message);
        p->pushed = NULL;
        p->by_message = NULL;
        return -ENOMEM;
    }
    if ((p->doorbell = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0) {
        r = -errno;
        ps_shm_close(p);
        return r;
    }
    if ((r = shm_segment_make("ddpd-average", p->bytes, &p->average_fd)) < 0 ||
        (r = shm_segment_map(p->average_fd, p->bytes, &p->average, why, sizeof(why))) < 0 ||
        (r = fd_socket_listen("ddpd-ps-", p->name, (int)world, &p->listener)) < 0) {
        ps_shm_close(p);
        return r;
    }
    return 0;
}

/* A connection may hold messages not read, with descriptors in them, whose release on its
 * last close can wait: a TCP socket's SO_LINGER, a file's filesystem. So it is closed
 * aside (common/fd_passed.h), after a shutdown that tells its peer at once (closes held
 * behind a stalled one may not come for long) and releases nothing. */
static void close_connection(int sock) {
    shutdown(sock, SHUT_RDWR);
    fd_passed_close_aside(sock);
}

void ps_shm_stop_listening(ps_shm *p) {
    if (p->listener >= 0) {
        /* connections from now on are refused; those in the backlog are told at once */
        shutdown(p->listener, SHUT_RDWR);
        fcntl(p->listener, F_SETFL, O_NONBLOCK);
        for (int sock; (sock = accept4(p->listener, NULL, NULL, SOCK_CLOEXEC)) >= 0;)
            close_connection(sock);
        fd_passed_close_aside(p->listener);
    }
    if (p->pending >= 0)
        close_connection(p->pending);
    if (p->average_fd >= 0)
        close(p->average_fd);
    p->listener = p->average_fd = p->pending = -1;
}

void ps_shm_close(ps_shm *p) {
    ps_shm_stop_listening(p);
    if (p->doorbell >= 0)
        close(p->doorbell);
    for (uint32_t r = 0; p->pushed && r < p->world; r++)
        if (p->pushed[r])
            munmap(p->pushed[r], p->bytes);
    free(p->pushed);
    free(p->by_message);
    free(p->by_frame);
    if (p->average)
        munmap(p->average, p->bytes);
    *p = PS_SHM_NONE;
}

int ps_shm_accept(ps_shm *p, const uint32_t *pids, int64_t owner, char *err, size_t err_size) {
    int sock = accept4(p->listener, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (sock < 0) {
        snprintf(err, err_size, "accepting a rank's push segment: %s", strerror(errno));
        return -errno;
    }
    fd_peer who;
    int r = fd_socket_peer(sock, &who);
    bool member = false;
    for (uint32_t k = 0; r == 0 && k < p->world && !member; k++)
        member = pids[k] && pids[k] == (uint32_t)who.pid;
    if (r < 0 || !member || (owner >= 0 && (int64_t)who.uid != owner)) {
        if (r < 0)
            snprintf(err, err_size, "a push segment's connection: %s", error_string(r));
        else
            snprintf(err, err_size, "pid %d of uid %u is no rank of this job%s: refused before it said a word",
                     (int)who.pid, (unsigned)who.uid, member ? " (not the job's user)" : "");
        close_connection(sock);
        return r < 0 ? r : -EPERM;
    }
    p->pending = sock;
    p->pending_pid = (uint32_t)who.pid;
    p->pending_since_ms = clock_now_ms();
    return 0;
}

int ps_shm_listening(const ps_shm *p) {
    return p->listener >= 0 && p->pending < 0 && fd_passed_closing() < PS_SHM_MAX_CLOSING ? p->listener : -1;
}

int ps_shm_take(ps_shm *p, const uint32_t *pids, char *err, size_t err_size) {
    int sock = p->pending, fd = -1, r;
    uint32_t pid = p->pending_pid;
    int32_t rank = -1;
    p->pending = -1;
    size_t closing = fd_passed_closing();
    if (closing >= PS_SHM_MAX_CLOSING) { /* the up to 253 descriptors it may carry, not read */
        snprintf(err, err_size,
                 "pid %u: ddpd still closes %zu descriptors handed to it before (their filesystems hold the close): "
                 "its push segment is refused unread (it pushes by message)",
                 pid, closing);
        close_connection(sock);
        return -EBUSY;
    }
    if ((r = fd_socket_recv(sock, clock_now_ms(), &fd, &rank)) < 0) { /* readable: no wait */
        snprintf(err, err_size, "a push segment from pid %u: %s", pid, error_string(r));
        close_connection(sock);
        return r;
    }
    char *mapped = NULL, why[128];
    if (rank < 0 || (uint32_t)rank >= p->world) {
        snprintf(err, err_size, "pid %u handed over a push segment as rank %d, which the job has not", pid, (int)rank);
        r = -EPROTO;
    } else if (!pids[rank] || pid != pids[rank]) {
        snprintf(err, err_size, "pid %u handed over a push segment as rank %d, whose pid is %u: refused", pid,
                 (int)rank, pids[rank]);
        r = -EPERM;
    } else if (p->pushed[rank]) {
        snprintf(err, err_size, "rank %d handed over a second push segment", (int)rank);
        r = -EPROTO;
    } else if ((r = shm_segment_map(fd, p->bytes, &mapped, why, sizeof(why))) < 0) {
        snprintf(err, err_size, "rank %d's push segment is refused: %s", (int)rank, why);
    } else if ((r = fd_socket_send(sock, p->average_fd, rank)) < 0 ||
               (r = fd_socket_send(sock, p->doorbell, rank)) < 0) {
        snprintf(err, err_size, "handing rank %d the average segment and doorbell: %s", (int)rank, error_string(r));
        munmap(mapped, p->bytes);
    } else {
        p->pushed[rank] = mapped;
        if (++p->n_handed == p->world)
            ps_shm_stop_listening(p);
    }
    fd_socket_close_passed(fd); /* mapped, or refused: perhaps no memfd at all */
    close_connection(sock);     /* a second message may wait in it */
    return r;
}

int ps_shm_expire(ps_shm *p, uint64_t now_ms, char *err, size_t err_size) {
    if (p->pending < 0 || now_ms < p->pending_since_ms + PS_SHM_WAIT_MS)
        return 0;
    snprintf(err, err_size, "pid %u connected for a push segment and said nothing for %d ms: closed", p->pending_pid,
             PS_SHM_WAIT_MS);
    close_connection(p->pending);
    p->pending = -1;
    return -ETIMEDOUT;
}

void ps_shm_doorbell_clear(ps_shm *p) {
    uint64_t rings;
    if (read(p->doorbell, &rings, sizeof(rings)) < 0)
        return; /* EAGAIN: a wake for a push already seen */
}

uint64_t ps_shm_pushed(const ps_shm *p, uint32_t rank, size_t bucket) {
    if (!p->pushed || rank >= p->world || !p->pushed[rank] || bucket >= p->n_buckets)
        return 0;
    return atomic_load_explicit(ps_segment_counter(p->pushed[rank], p->float_bytes, bucket).value,
                                memory_order_acquire); /* the floats it vouches for are written */
}

void ps_shm_averaged(ps_shm *p, size_t bucket, uint64_t step) {
    if (p->average && bucket < p->n_buckets)
        shm_flag_set(ps_segment_counter(p->average, p->float_bytes, bucket), step + 1);
}
