#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#include "worker/libddp/shm.h"

#include <poll.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/error.h"
#include "worker/libddp/shm_handover.h"
#include "worker/libddp/shm_layout.h"

#define SHM_SPIN_US 30            /* spin this long before sleeping: a peer on another core is that close */
#define SHM_SLEEP_MS 20           /* each sleep, at most: the job's end is noticed this soon */
#define SHM_GAVE_UP_GRACE_MS 1000 /* for the job's end to follow a peer's failure */
#define SHM_ROOM_SLEEP_MS 1       /* a full mailbox's sender: what comes to it is read out this often */

/* Memory a caller allocated in shared memory (ddp_alloc): every rank's, of one size. */
typedef struct {
    size_t bytes;
    char **maps; /* world: rank r's region, mapped here */
} shm_region;

struct shm_plane {
    int rank, world;
    char **segments;     /* every rank's, mapped; this rank's own among them */
    uint64_t phase;      /* the last phase this rank posted */
    uint64_t release;    /* the phase after which no peer reads this rank's buffer */
    uint64_t begun;      /* collectives begun: the current one is every rank's record begun - 1 */
    bool *checked;       /* world: the current call's record of that peer was found the same */
    int n_checked;       /* how many peers' */
    bool crowded;        /* more ranks than CPUs to run them: a waiter yields its CPU as it spins */
    shm_region *regions; /* by id, in the order the ranks allocated them (bytes 0: freed) */
    int n_regions;
    const char **inputs; /* world: the current call's inputs that peers posted in their regions */
    bool all_in_place;   /* the current call's: every rank's input is in a region, and its output */
};

static shm_head *head(const shm_plane *s, int r) {
    return (shm_head *)s->segments[r];
}

/* Rank r's record of its n-th collective (from 0). */
static shm_call *record(const shm_plane *s, int r, uint64_t n) {
    return &head(s, r)->calls[n & 1];
}

static shm_call *current(const shm_plane *s, int r) {
    return record(s, r, s->begun - 1);
}

char *shm_buffer(const shm_plane *s, int r) {
    return s->segments[r] + SHM_HEADER_BYTES;
}

shm_ring shm_mailbox_ring(const shm_plane *s, int from, int to) {
    char *m = s->segments[from] + SHM_HEADER_BYTES + SHM_BUFFER_BYTES + (size_t)to * shm_mailbox_bytes(s->world);
    return (shm_ring){(shm_mailbox_head *)m, m + sizeof(shm_mailbox_head),
                      shm_mailbox_bytes(s->world) - sizeof(shm_mailbox_head)};
}

shm_flag shm_ring_written(shm_ring b) {
    return (shm_flag){&b.h->written, &b.h->word, &b.h->sleepers};
}

shm_flag shm_ring_consumed(shm_ring b) {
    return (shm_flag){&b.h->consumed, &b.h->consumed_word, &b.h->consumed_sleepers};
}

static shm_flag posted(const shm_plane *s, int r) {
    shm_head *h = head(s, r);
    return (shm_flag){&h->posted, &h->word, &h->sleepers};
}

uint64_t shm_post(shm_plane *s) {
    uint64_t phase = ++s->phase;
    shm_flag_set(posted(s, s->rank), phase);
    return phase;
}

uint64_t shm_phase(const shm_plane *s) {
    return s->phase;
}

void shm_release(shm_plane *s) {
    s->release = s->phase;
}

void shm_give_up(shm_plane *s, uint64_t seq) {
    atomic_store_explicit(&head(s, s->rank)->gave_up, seq, memory_order_release);
    shm_flag_wake(posted(s, s->rank)); /* those asleep on this rank learn it now */
}

/* Whether r has given up on the collective call (numbered: p2p's seq 0 is none). Only a
 * rank on this host has a header here: one elsewhere (a job over hosts, whose collectives
 * take point-to-point messages through the mailboxes) tells nothing so. */
static bool gave_up(const shm_plane *s, int r, const comm_call *call) {
    return call->seq && s->segments[r] && atomic_load_explicit(&head(s, r)->gave_up, memory_order_acquire) == call->seq;
}

/* A peer gave up on the call: the job's end, which most often follows (this rank was
 * stopped, or slow), says why, so it is given a moment to come, within the call's time. */
static int peer_gave_up(comm *c, int r, const comm_call *call) {
    uint64_t now = clock_now_ms();
    uint64_t wait = call->deadline_ms > now ? call->deadline_ms - now : 0;
    struct pollfd pfd = {.fd = c->end->fd, .events = POLLIN};
    if (!job_end_code(c->end))
        poll(&pfd, 1, (int)(wait < SHM_GAVE_UP_GRACE_MS ? wait : SHM_GAVE_UP_GRACE_MS));
    TRY(comm_check_end(c));
    return comm_fail(c, -ETIMEDOUT, "%s #%llu: rank %d gave up on it (it failed there: see its error)",
                     coll_kind_name(call->kind), (unsigned long long)call->seq, r);
}

/* Whether r's record (theirs) is the call this rank made. */
static int compare_call(comm *c, const shm_call *theirs, int r, const comm_call *call) {
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

/* Once r has posted a phase of the current collective: whether it called the same, and
 * has not given up on it. */
static int check_call(comm *c, shm_plane *s, int r, const comm_call *call) {
    TRY(compare_call(c, current(s, r), r, call));
    if (!s->checked[r]) {
        s->checked[r] = true;
        s->n_checked++;
    }
    return gave_up(s, r, call) ? peer_gave_up(c, r, call) : 0;
}

/* Whether every peer's last collective was this rank's: a rank that waited for none of
 * them (a broadcast's root, a gather's giver) learns only now that they called another.
 * Every peer is done with it, and writes its next call in the other record. */
static int check_last_call(comm *c, shm_plane *s) {
    const shm_call *mine = record(s, s->rank, s->begun - 1);
    comm_call last = {.kind = (coll_kind)mine->kind,
                      .t = (dtype)mine->dtype,
                      .op = (reduce_op)mine->op,
                      .root = mine->root,
                      .seq = mine->seq,
                      .count = mine->count};
    for (int r = 0; r < s->world; r++)
        if (r != s->rank && s->segments[r])
            TRY(compare_call(c, record(s, r, s->begun - 1), r, &last));
    return 0;
}

static int wait_phase(comm *c, shm_plane *s, int r, uint64_t target, const comm_call *call);

int shm_wait(comm *c, shm_plane *s, int r, uint64_t target, const comm_call *call) {
    TRY(wait_phase(c, s, r, target, call));
    return check_call(c, s, r, call);
}

/* The region of this rank's that holds [p, p + bytes) whole, by id, and p's offset in it;
 * -1 where none does. */
static int region_of(const shm_plane *s, const void *p, size_t bytes, uint64_t *ret_offset) {
    for (int id = 0; p && id < s->n_regions; id++) {
        const shm_region *g = &s->regions[id];
        const char *base = g->maps ? g->maps[s->rank] : NULL;
        if (base && (const char *)p >= base && (size_t)((const char *)p - base) <= g->bytes &&
            bytes <= g->bytes - (size_t)((const char *)p - base)) {
            *ret_offset = (uint64_t)((const char *)p - base);
            return id;
        }
    }
    return -1;
}

int shm_begin(comm *c, shm_plane *s, const comm_call *call, const void *input, bool in_place) {
    TRY(shm_wait_free(c, s, call));              /* every peer is done with the last collective, its check included */
    if (s->begun && s->n_checked < s->world - 1) /* the last call did not wait for every peer */
        TRY(check_last_call(c, s));
    memset(s->checked, 0, (size_t)s->world * sizeof(bool));
    s->n_checked = 0;
    uint64_t offset = 0;
    int region = region_of(s, input, call->count * dtype_size(call->t), &offset);
    s->begun++;
    *current(s, s->rank) = (shm_call){.seq = call->seq,
                                      .count = call->count,
                                      .kind = (uint32_t)call->kind,
                                      .dtype = (uint32_t)call->t,
                                      .op = (uint32_t)call->op,
                                      .root = call->root,
                                      .region = region,
                                      .in_place = region >= 0 && in_place,
                                      .offset = offset};
    return 0;
}

bool shm_all_in_place(const shm_plane *s) {
    return s->all_in_place;
}

bool shm_input_shared(const shm_plane *s) {
    return current(s, s->rank)->region >= 0;
}

int shm_peer_input(comm *c, shm_plane *s, const comm_call *call, int r, const char **ret) {
    uint64_t bytes = call->count * dtype_size(call->t);
    /* read once: the peer could change it under us */
    volatile const shm_call *theirs = current(s, r);
    int32_t region = theirs->region;
    uint64_t offset = theirs->offset;
    *ret = NULL;
    if (region < 0)
        return 0;
    if (region >= s->n_regions || !s->regions[region].maps)
        return comm_fail(c, -EPROTO, "%s #%llu: rank %d posted its input in region %d, which it never shared: refused",
                         coll_kind_name(call->kind), (unsigned long long)call->seq, r, (int)region);
    size_t size = s->regions[region].bytes;
    if (offset > size || bytes > size - offset)
        return comm_fail(c, -EPROTO,
                         "%s #%llu: rank %d posted its input at bytes %llu..%llu of region %d, which is %zu bytes: "
                         "outside what it shared, refused",
                         coll_kind_name(call->kind), (unsigned long long)call->seq, r, (unsigned long long)offset,
                         (unsigned long long)(offset + bytes), (int)region, size);
    *ret = s->regions[region].maps[r] + offset;
    return 0;
}

int shm_peer_inputs(comm *c, shm_plane *s, const comm_call *call, const char ***ret) {
    s->all_in_place = current(s, s->rank)->in_place;
    for (int r = 0; r < s->world; r++) {
        s->inputs[r] = NULL;
        if (r == s->rank)
            continue;
        TRY(shm_peer_input(c, s, call, r, &s->inputs[r]));
        s->all_in_place = s->all_in_place && s->inputs[r] && current(s, r)->in_place;
    }
    *ret = s->inputs;
    return 0;
}

int shm_region_open(comm *c, shm_plane *s, size_t bytes, void **ret) {
    shm_region *grown = realloc(s->regions, (size_t)(s->n_regions + 1) * sizeof(*grown));
    if (!grown)
        return comm_fail(c, -ENOMEM, "out of memory");
    s->regions = grown;
    shm_region *g = &s->regions[s->n_regions];
    *g = (shm_region){.bytes = bytes, .maps = calloc((size_t)s->world, sizeof(char *))};
    if (!g->maps)
        return comm_fail(c, -ENOMEM, "out of memory");
    int r = shm_handover(c, "ddp-buffer", bytes, g->maps);
    /* every rank answers: when a follower asked for another size, the others fail with it */
    if (r == 0 || r == -EINVAL) {
        int32_t ok = r == 0;
        int agreed = comm_agree_min(c, &ok);
        if (r == 0 && (agreed < 0 || !ok)) {
            shm_unmap_all(g->maps, s->world, bytes);
            r = agreed < 0 ? agreed
                           : comm_fail(c, -EINVAL,
                                       "another rank could not take its part of the %zu bytes (it asked "
                                       "for another size): see its error",
                                       bytes);
        }
    }
    if (r < 0) {
        free(g->maps);
        return r;
    }
    s->n_regions++;
    *ret = g->maps[s->rank];
    return 0;
}

int shm_region_close(comm *c, shm_plane *s, void *base) {
    for (int id = 0; base && id < s->n_regions; id++) {
        shm_region *g = &s->regions[id];
        if (g->maps && g->maps[s->rank] == base) {
            shm_unmap_all(g->maps, s->world, g->bytes);
            free(g->maps);
            g->maps = NULL; /* the id stays taken: every rank numbers its regions alike */
            return 0;
        }
    }
    return comm_fail(c, -EINVAL, "ddp_free: %p is not memory ddp_alloc gave", base);
}

int shm_flag_wait(comm *c, const shm_plane *s, int r, shm_flag f, uint64_t target, const comm_call *call, int32_t tag) {
    if (atomic_load_explicit(f.value, memory_order_acquire) >= target)
        return 0;
    uint64_t spin_until = clock_now_us() + SHM_SPIN_US;
    while (clock_now_us() < spin_until) {
        for (int i = 0; i < 64; i++)
            if (atomic_load_explicit(f.value, memory_order_acquire) >= target)
                return 0;
        if (s->crowded) /* r may be waiting for this very CPU */
            sched_yield();
    }
    comm_report_waiting(c, r, call, tag); /* ddpd's stall report names r while this lasts */
    int err = 0;
    while (atomic_load(f.value) < target && err == 0) {
        if ((err = comm_check_peer(c, r, call)) < 0)
            break;
        int quit = -1; /* a rank that gave up (r, or one r may be waiting for): the call cannot end well */
        for (int p = 0; p < s->world && quit < 0; p++)
            if (p != s->rank && gave_up(s, p, call))
                quit = p;
        if (quit >= 0) {
            err = peer_gave_up(c, quit, call);
            break;
        }
        uint64_t now = clock_now_ms();
        if (now >= call->deadline_ms) {
            err = comm_timed_out(c, r, call, tag, "");
            break;
        }
        shm_flag_sleep(f, target, call->deadline_ms - now < SHM_SLEEP_MS ? call->deadline_ms - now : SHM_SLEEP_MS);
    }
    comm_report_waiting(c, -1, call, 0);
    return err;
}

int shm_wait_room(comm *c, const shm_plane *s, int dst, shm_flag room, uint64_t target, const comm_call *call,
                  int32_t tag, int (*drain)(comm *c, void *ctx), void *ctx) {
    uint64_t spin_until = clock_now_us() + SHM_SPIN_US;
    bool reported = false;
    int err = 0;
    while (atomic_load_explicit(room.value, memory_order_acquire) < target) {
        if ((err = drain(c, ctx)) < 0)
            break;
        if (clock_now_us() < spin_until) {
            if (s->crowded)
                sched_yield();
            continue;
        }
        if (!reported) { /* ddpd's stall report names dst while this lasts */
            comm_report_waiting_as(c, dst, call, tag, true);
            reported = true;
        }
        if ((err = comm_check_peer(c, dst, call)) < 0)
            break;
        if (clock_now_ms() >= call->deadline_ms) {
            err = call->kind == COLL_SEND
                      ? comm_fail(c, -ETIMEDOUT, "send timed out after %d ms waiting for rank %d (tag %d): %s",
                                  c->timeout_ms, dst, tag, "its mailbox from this rank stayed full")
                      : comm_timed_out(c, dst, call, 0, " (this rank's mailbox to it stayed full)");
            break;
        }
        shm_flag_sleep(room, target, SHM_ROOM_SLEEP_MS);
    }
    if (reported)
        comm_report_waiting(c, -1, call, 0);
    return err;
}

bool shm_crowded(const shm_plane *s) {
    return s->crowded;
}

static int wait_phase(comm *c, shm_plane *s, int r, uint64_t target, const comm_call *call) {
    return shm_flag_wait(c, s, r, posted(s, r), target, call, 0);
}

int shm_wait_all(comm *c, shm_plane *s, uint64_t target, const comm_call *call) {
    for (int r = 0; r < s->world; r++)
        if (r != s->rank)
            TRY(shm_wait(c, s, r, target, call));
    return 0;
}

int shm_wait_arrivals(comm *c, shm_plane *s, uint64_t target, const comm_call *call) {
    bool here = true; /* the clock only when someone is late */
    for (int r = 0; r < s->world && here; r++)
        here = r == s->rank || atomic_load_explicit(&head(s, r)->posted, memory_order_acquire) >= target;
    if (here)
        return shm_wait_all(c, s, target, call);
    uint64_t t0 = clock_now_us();
    int err = shm_wait_all(c, s, target, call);
    c->stats.arrival_wait_us += clock_now_us() - t0;
    return err;
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
        shm_unmap_all(s->segments, s->world, shm_segment_bytes(s->world));
    free(s->segments);
    for (int id = 0; id < s->n_regions; id++)
        if (s->regions[id].maps) {
            shm_unmap_all(s->regions[id].maps, s->world, s->regions[id].bytes);
            free(s->regions[id].maps);
        }
    free(s->regions);
    free((void *)s->inputs);
    free(s->checked);
    free(s);
}

int shm_open_plane(comm *c, shm_plane **ret) {
    shm_plane *s = calloc(1, sizeof(*s));
    if (!s)
        return comm_fail(c, -ENOMEM, "out of memory");
    s->rank = c->peers.rank;
    s->world = c->peers.world;
    int here = 0; /* the ranks of this host: the others have no segment here */
    for (int r = 0; r < s->world; r++)
        here += c->peers.here[r];
    cpu_set_t cpus;
    s->crowded = sched_getaffinity(0, sizeof(cpus), &cpus) == 0 && CPU_COUNT(&cpus) < here;
    s->segments = calloc((size_t)s->world, sizeof(char *));
    s->inputs = calloc((size_t)s->world, sizeof(char *));
    s->checked = calloc((size_t)s->world, sizeof(bool));
    int r = s->segments && s->inputs && s->checked
                ? shm_handover(c, "ddp-shm", shm_segment_bytes(s->world), s->segments)
                : -ENOMEM;
    if (r < 0) {
        if (r == -ENOMEM)
            comm_fail(c, r, "out of memory");
        shm_close_plane(s);
        return r;
    }
    *ret = s;
    return 0;
}
