#define _GNU_SOURCE /* SO_PEERCRED, struct ucred */
#include "worker/libddp/shm.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <poll.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/error.h"
#include "worker/libddp/shm_segment.h"

#define SHM_HEADER_BYTES 4096
#define SHM_SEGMENT_BYTES (SHM_HEADER_BYTES + SHM_BUFFER_BYTES)
#define SHM_SPIN_US 30    /* spin this long before sleeping: a peer on another core is that close */
#define SHM_SLEEP_MS 20   /* each sleep, at most: the job's end is noticed this soon */
#define SHM_NAME_BYTES 40 /* "ddp-shm-" and 32 hex digits, in the abstract namespace */
#define TAG_SHM_NAME (-4) /* the data plane's own tag: where to fetch a rank's segment */

/* The collective a segment's owner is in, as it called it: its peers check theirs against
 * it (a rank that called something else is caught, not fed garbage). */
typedef struct {
    uint64_t seq, count;
    uint32_t kind, dtype, op;
    int32_t root;
} shm_call;

/* What a segment's owner posts; alone on its cache line, as every rank polls it. */
typedef struct {
    _Atomic uint64_t posted;   /* the last phase the owner finished */
    _Atomic uint32_t word;     /* (uint32_t)posted, for FUTEX_WAIT */
    _Atomic uint32_t sleepers; /* ranks asleep on word */
    shm_call call;             /* written before the collective's first post: the post publishes it */
} __attribute__((aligned(64))) shm_head;

_Static_assert(sizeof(shm_head) <= SHM_HEADER_BYTES, "the header fits its page");

struct shm_plane {
    int rank, world;
    char **segments;  /* every rank's, mapped; this rank's own among them */
    uint64_t phase;   /* the last phase this rank posted */
    uint64_t release; /* the phase after which no peer reads this rank's buffer */
    bool crowded;     /* more ranks than CPUs to run them: a waiter yields its CPU as it spins */
};

static shm_head *head(const shm_plane *s, int r) {
    return (shm_head *)s->segments[r];
}

char *shm_buffer(const shm_plane *s, int r) {
    return s->segments[r] + SHM_HEADER_BYTES;
}

static long futex(_Atomic uint32_t *word, int op, uint32_t value, const struct timespec *timeout) {
    return syscall(SYS_futex, (uint32_t *)word, op, value, timeout, NULL, 0);
}

uint64_t shm_post(shm_plane *s) {
    shm_head *h = head(s, s->rank);
    uint64_t phase = ++s->phase;
    atomic_store(&h->posted, phase); /* release: what the buffer holds is visible first */
    atomic_store(&h->word, (uint32_t)phase);
    if (atomic_load(&h->sleepers))
        futex(&h->word, FUTEX_WAKE, INT_MAX, NULL);
    return phase;
}

void shm_release(shm_plane *s) {
    s->release = s->phase;
}

/* Once r has posted a phase of the current collective: whether it called the same. */
static int check_call(comm *c, shm_plane *s, int r, const comm_call *call) {
    const shm_call *theirs = &head(s, r)->call;
    if (theirs->seq == call->seq && theirs->kind == (uint32_t)call->kind && theirs->dtype == (uint32_t)call->t &&
        theirs->count == call->count && theirs->op == (uint32_t)call->op && theirs->root == call->root)
        return 0;
    comm_frame f = {.h = {.src = r,
                          .kind = (uint8_t)theirs->kind,
                          .dtype = (uint8_t)theirs->dtype,
                          .op = (uint8_t)theirs->op,
                          .root = theirs->root,
                          .count = theirs->count}};
    if (!dtype_valid(f.h.dtype) || !reduce_op_valid(f.h.op))
        return comm_fail(c, -EPROTO, "collective #%llu: rank %d posted a call that is not one",
                         (unsigned long long)call->seq, r);
    if (theirs->seq != call->seq)
        return comm_fail(c, -EINVAL, "collective #%llu: rank %d is in collective #%llu", (unsigned long long)call->seq,
                         r, (unsigned long long)theirs->seq);
    return comm_mismatch(c, &f, call);
}

static int wait_phase(comm *c, shm_plane *s, int r, uint64_t target, const comm_call *call);

int shm_wait(comm *c, shm_plane *s, int r, uint64_t target, const comm_call *call) {
    TRY(wait_phase(c, s, r, target, call));
    return check_call(c, s, r, call);
}

int shm_begin(comm *c, shm_plane *s, const comm_call *call) {
    TRY(shm_wait_free(c, s, call)); /* every peer is done with the last collective, its check included */
    shm_call *mine = &head(s, s->rank)->call;
    *mine = (shm_call){.seq = call->seq,
                       .count = call->count,
                       .kind = (uint32_t)call->kind,
                       .dtype = (uint32_t)call->t,
                       .op = (uint32_t)call->op,
                       .root = call->root};
    return 0;
}

static int wait_phase(comm *c, shm_plane *s, int r, uint64_t target, const comm_call *call) {
    shm_head *h = head(s, r);
    if (atomic_load_explicit(&h->posted, memory_order_acquire) >= target)
        return 0;
    uint64_t spin_until = clock_now_us() + SHM_SPIN_US;
    while (clock_now_us() < spin_until) {
        for (int i = 0; i < 64; i++)
            if (atomic_load_explicit(&h->posted, memory_order_acquire) >= target)
                return 0;
        if (s->crowded) /* r may be waiting for this very CPU */
            sched_yield();
    }
    comm_report_waiting(c, r, call, 0); /* ddpd's stall report names r while this lasts */
    int err = 0;
    while (atomic_load(&h->posted) < target && err == 0) {
        if ((err = comm_check_end(c)) < 0)
            break;
        uint64_t now = clock_now_ms();
        if (now >= call->deadline_ms) {
            err = comm_timed_out(c, r, call, 0, "");
            break;
        }
        uint64_t ms = call->deadline_ms - now < SHM_SLEEP_MS ? call->deadline_ms - now : SHM_SLEEP_MS;
        struct timespec ts = {.tv_sec = 0, .tv_nsec = (long)ms * 1000000L};
        atomic_fetch_add(&h->sleepers, 1);
        uint32_t seen = atomic_load(&h->word);
        if (atomic_load(&h->posted) < target) /* no wake can be lost: the poster checks sleepers after */
            futex(&h->word, FUTEX_WAIT, seen, &ts);
        atomic_fetch_sub(&h->sleepers, 1);
    }
    comm_report_waiting(c, -1, call, 0);
    return err;
}

int shm_wait_all(comm *c, shm_plane *s, uint64_t target, const comm_call *call) {
    for (int r = 0; r < s->world; r++)
        if (r != s->rank)
            TRY(shm_wait(c, s, r, target, call));
    return 0;
}

int shm_wait_free(comm *c, shm_plane *s, const comm_call *call) {
    for (int r = 0; r < s->world && s->release; r++)
        if (r != s->rank) /* the wait only: a peer's call may already be the next one's */
            TRY(wait_phase(c, s, r, s->release, call));
    return 0;
}

void shm_close_plane(shm_plane *s) {
    if (!s)
        return;
    for (int r = 0; s->segments && r < s->world; r++)
        if (s->segments[r])
            munmap(s->segments[r], SHM_SEGMENT_BYTES);
    free(s->segments);
    free(s);
}

/* ---- the exchange of segments ------------------------------------------------------ */

/* The kernel's word on who is at the other end of a Unix socket. */
static int peer_credentials(int fd, struct ucred *ret) {
    socklen_t len = sizeof(*ret);
    return getsockopt(fd, SOL_SOCKET, SO_PEERCRED, ret, &len) < 0 ? -errno : 0;
}

/* A segment a peer handed over, mapped once it is what every rank makes. */
static int map_segment(comm *c, int fd, int r, char **ret) {
    char why[128];
    int err = shm_segment_map(fd, SHM_SEGMENT_BYTES, ret, why, sizeof(why));
    return err < 0 ? comm_fail(c, err, "rank %d handed over a segment that is refused: %s", r, why) : 0;
}

static int send_fd(int sock, int fd, int32_t rank) {
    char control[CMSG_SPACE(sizeof(int))] = {0};
    struct iovec iov = {&rank, sizeof(rank)};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control, .msg_controllen = sizeof(control)};
    struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(cm), &fd, sizeof(int));
    return sendmsg(sock, &msg, MSG_NOSIGNAL) == (ssize_t)sizeof(rank) ? 0 : -errno;
}

/* One message with one descriptor, within the deadline; the sender's rank in *ret_rank. */
static int recv_fd(int sock, uint64_t deadline_ms, int *ret_fd, int32_t *ret_rank) {
    struct pollfd pfd = {.fd = sock, .events = POLLIN};
    int n = poll(&pfd, 1, clock_ms_until(deadline_ms));
    if (n <= 0)
        return n == 0 ? -ETIMEDOUT : -errno;
    char control[CMSG_SPACE(sizeof(int))];
    struct iovec iov = {ret_rank, sizeof(*ret_rank)};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control, .msg_controllen = sizeof(control)};
    ssize_t got = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
    struct cmsghdr *cm = got == (ssize_t)sizeof(*ret_rank) ? CMSG_FIRSTHDR(&msg) : NULL;
    if (!cm || cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS || cm->cmsg_len != CMSG_LEN(sizeof(int)))
        return got < 0 ? -errno : -EPROTO;
    memcpy(ret_fd, CMSG_DATA(cm), sizeof(int));
    return 0;
}

/* An abstract Unix socket under a random name, listening for the peers. */
static int listen_random(char name[SHM_NAME_BYTES], int backlog, int *ret_sock) {
    unsigned char bytes[16];
    if (getrandom(bytes, sizeof(bytes), 0) != (ssize_t)sizeof(bytes))
        return -errno;
    int k = snprintf(name, SHM_NAME_BYTES, "ddp-shm-");
    for (size_t i = 0; i < sizeof(bytes); i++)
        k += snprintf(name + k, SHM_NAME_BYTES - (size_t)k, "%02x", bytes[i]);
    int sock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    memcpy(addr.sun_path + 1, name, strlen(name)); /* sun_path[0] = 0: abstract, no file */
    socklen_t len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + strlen(name));
    if (sock < 0 || bind(sock, (struct sockaddr *)&addr, len) < 0 || listen(sock, backlog) < 0) {
        int r = -errno;
        if (sock >= 0)
            close(sock);
        return r;
    }
    *ret_sock = sock;
    return 0;
}

static int connect_name(const char *name, int *ret_sock) {
    int sock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    size_t n = strnlen(name, SHM_NAME_BYTES - 1);
    memcpy(addr.sun_path + 1, name, n);
    socklen_t len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n);
    if (sock < 0 || connect(sock, (struct sockaddr *)&addr, len) < 0) {
        int r = -errno;
        if (sock >= 0)
            close(sock);
        return r;
    }
    *ret_sock = sock;
    return 0;
}

/* The exchange: every rank listens under a random name and tells every peer that name
 * over the transport; it connects to every peer's (a connection to a listening Unix socket
 * is made at once, accepted or not), accepts every peer's connection and hands its memfd
 * to each, then receives each peer's. Both ends check the kernel's credentials against the
 * Welcome: the same user, the pid of the rank it should be. */
static int exchange(comm *c, shm_plane *s, int fd, uint64_t deadline_ms) {
    int n = s->world, me = s->rank, listener = -1, r;
    char name[SHM_NAME_BYTES] = {0};
    int *to = malloc((size_t)n * sizeof(int)); /* connected to rank p, to fetch its segment */
    if (!to)
        return comm_fail(c, -ENOMEM, "out of memory");
    for (int p = 0; p < n; p++)
        to[p] = -1;
    if ((r = listen_random(name, n, &listener)) < 0) {
        comm_fail(c, r, "cannot listen for the peers' shared memory: %s", strerror(-r));
        goto out;
    }
    comm_call call = {.kind = COLL_SEND, .t = DTYPE_U8, .count = SHM_NAME_BYTES, .deadline_ms = deadline_ms};
    for (int p = 0; p < n && r == 0; p++)
        if (p != me) {
            call.root = p;
            r = comm_send(c, p, &call, TAG_SHM_NAME, 0, name, SHM_NAME_BYTES, false);
        }
    uid_t uid = getuid();
    for (int p = 0; p < n && r == 0; p++) {
        if (p == me)
            continue;
        comm_frame *f = NULL;
        call.root = p;
        char theirs[SHM_NAME_BYTES];
        if ((r = comm_recv(c, p, &call, TAG_SHM_NAME, &f)) < 0)
            break;
        memcpy(theirs, f->data, SHM_NAME_BYTES);
        comm_frame_free(c, f);
        theirs[SHM_NAME_BYTES - 1] = '\0';
        struct ucred cred;
        if ((r = connect_name(theirs, &to[p])) < 0 || (r = peer_credentials(to[p], &cred)) < 0) {
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
    for (int k = 0; k < n - 1 && r == 0; k++) {
        struct pollfd pfd = {.fd = listener, .events = POLLIN};
        int ready = poll(&pfd, 1, clock_ms_until(deadline_ms));
        int sock = ready > 0 ? accept4(listener, NULL, NULL, SOCK_CLOEXEC) : -1;
        struct ucred cred;
        if (sock < 0 || (r = peer_credentials(sock, &cred)) < 0) {
            r = ready == 0 ? -ETIMEDOUT : r < 0 ? r : -errno;
            comm_fail(c, r, "waiting for the peers to fetch this rank's shared memory: %s", strerror(-r));
            if (sock >= 0)
                close(sock);
            break;
        }
        int from = -1;
        for (int p = 0; p < n; p++)
            if (p != me && c->peers.pids[p] == (uint32_t)cred.pid)
                from = p;
        if (cred.uid != uid || from < 0)
            r = comm_fail(c, -EPERM,
                          "pid %d of uid %u asked for this rank's shared memory; it is not in the job: refused",
                          (int)cred.pid, (unsigned)cred.uid);
        else if ((r = send_fd(sock, fd, me)) < 0)
            comm_fail(c, r, "cannot hand rank %d this rank's shared memory: %s", from, strerror(-r));
        close(sock);
    }
    for (int p = 0; p < n && r == 0; p++) {
        if (p == me)
            continue;
        int got = -1;
        int32_t said = -1;
        if ((r = recv_fd(to[p], deadline_ms, &got, &said)) < 0) {
            comm_fail(c, r, "rank %d did not hand over its shared memory: %s", p, strerror(-r));
            break;
        }
        r = said == p ? map_segment(c, got, p, &s->segments[p])
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

int shm_open_plane(comm *c, shm_plane **ret) {
    shm_plane *s = calloc(1, sizeof(*s));
    if (!s)
        return comm_fail(c, -ENOMEM, "out of memory");
    s->rank = c->peers.rank;
    s->world = c->peers.world;
    cpu_set_t cpus;
    s->crowded = sched_getaffinity(0, sizeof(cpus), &cpus) == 0 && CPU_COUNT(&cpus) < s->world;
    s->segments = calloc((size_t)s->world, sizeof(char *));
    int fd = -1, r = s->segments ? shm_segment_make(SHM_SEGMENT_BYTES, &fd) : -ENOMEM;
    if (r < 0) {
        comm_fail(c, r, "cannot make this rank's shared memory segment: %s", strerror(-r));
        shm_close_plane(s);
        return r;
    }
    char why[128];
    if ((r = shm_segment_map(fd, SHM_SEGMENT_BYTES, &s->segments[s->rank], why, sizeof(why))) < 0) {
        comm_fail(c, r, "cannot map this rank's shared memory: %s", why);
        close(fd);
        shm_close_plane(s);
        return r;
    }
    r = exchange(c, s, fd, clock_now_ms() + (uint64_t)c->timeout_ms);
    close(fd); /* the mappings keep the segments; they go with the last process that maps them */
    if (r < 0) {
        shm_close_plane(s);
        return r;
    }
    *ret = s;
    return 0;
}
