#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#include "worker/libddp/shm.h"

#include <limits.h>
#include <linux/futex.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>

#include "common/clock.h"
#include "common/error.h"
#include "worker/libddp/shm_handover.h"

#define SHM_HEADER_BYTES 4096
#define SHM_SEGMENT_BYTES (SHM_HEADER_BYTES + SHM_BUFFER_BYTES)
#define SHM_SPIN_US 30  /* spin this long before sleeping: a peer on another core is that close */
#define SHM_SLEEP_MS 20 /* each sleep, at most: the job's end is noticed this soon */

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
    if (s->segments)
        shm_unmap_all(s->segments, s->world, SHM_SEGMENT_BYTES);
    free(s->segments);
    free(s);
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
    int r = s->segments ? shm_handover(c, "ddp-shm", SHM_SEGMENT_BYTES, s->segments) : -ENOMEM;
    if (r < 0) {
        if (r == -ENOMEM)
            comm_fail(c, r, "out of memory");
        shm_close_plane(s);
        return r;
    }
    *ret = s;
    return 0;
}
