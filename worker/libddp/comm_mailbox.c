/* Frames between the ranks of one host, in a job that spans hosts. The algorithms of
 * coll_*.c run as they do over ZeroMQ, and each frame to a peer on this host goes through
 * the mailbox of that pair in the sender's shared segment (shm_layout.h) instead of a
 * socket; frames to other hosts still take ZeroMQ. The results are the bits an all-ZeroMQ
 * job computes: the same algorithms, the same reduction order.
 *
 * A mailbox is a ring of records in send order, each a frame's header and its elements.
 * A record never wraps: one that would reach past the ring's end starts at its beginning,
 * after a skip mark. The receiver reads the frame it asked for in place and consumes it
 * when it frees the frame; frames read before their recv are copied out and wait, as in
 * ZeroMQ's matching queue. A sender whose mailbox is full copies out what its own
 * mailboxes hold while it waits, so two ranks that both send before they receive never
 * wait on each other. Every wait honours the call's deadline, the job's end and the
 * peer's leaving, and names the peer. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "worker/libddp/shm.h"
#include "worker/libddp/shm_layout.h"

#define MAILBOX_ALIGN 64u                    /* records start on cache lines */
#define MAILBOX_SKIP 0u                      /* a record's first word: the rest of the ring is empty */
#define MAILBOX_MAX_EARLY_BYTES (1ull << 30) /* frames copied out before their recv, at once */

typedef struct {
    comm_header h;
    uint64_t bytes; /* the record's, this header included, padded to MAILBOX_ALIGN */
} mailbox_record;

typedef struct mailbox_frame {
    comm_frame f; /* first: the data plane's view */
    struct mailbox_state *st;
    char *copy; /* its elements, copied out; NULL: read in place */
    struct mailbox_frame *next;
} mailbox_frame;

typedef struct mailbox_state {
    shm_plane *plane; /* NULL where no peer shares this host */
    int rank;
    uint64_t *cursor;      /* per sender: where its next unread record starts */
    bool *held;            /* per sender: a frame read in place is out; nothing past it is consumed */
    mailbox_frame **early; /* per sender: frames read before their recv, in send order */
    uint64_t early_bytes;
} mailbox_state;

static const comm_transport mailbox_transport;

static mailbox_state *state(const comm *c) {
    return c->local_impl;
}

static uint64_t record_bytes(uint64_t data_bytes) {
    return (sizeof(mailbox_record) + data_bytes + MAILBOX_ALIGN - 1) & ~(uint64_t)(MAILBOX_ALIGN - 1);
}

/* The largest frame: a multiple of 4 KiB whose record fits half a ring, so that a skip
 * and a record always fit together. The same on every rank: it depends on the world. */
static uint64_t mailbox_chunk_bytes(const comm *c) {
    uint64_t ring = shm_mailbox_bytes(c->peers.world) - sizeof(shm_mailbox_head);
    return (ring / 2 - 2 * MAILBOX_ALIGN - sizeof(mailbox_record)) & ~(uint64_t)4095;
}

/* Moves src's cursor to at; what lies before it is consumed unless a frame is held there. */
static void advance(mailbox_state *st, int src, shm_ring b, uint64_t at) {
    st->cursor[src] = at;
    if (!st->held[src])
        shm_flag_set(shm_ring_consumed(b), at);
}

/* The next record from src, if one is there (*ret_present): its header, checked, and its
 * elements in the ring. Skip marks are passed over. */
static int peek(comm *c, mailbox_state *st, int src, shm_ring b, mailbox_record *ret, const char **ret_data,
                bool *ret_present) {
    for (;;) {
        uint64_t at = st->cursor[src], written = atomic_load_explicit(&b.h->written, memory_order_acquire);
        uint64_t room = b.size - at % b.size;
        *ret_present = written > at;
        if (!*ret_present)
            return 0;
        const char *p = b.ring + at % b.size;
        uint32_t first;
        memcpy(&first, p, sizeof(first));
        if (first == MAILBOX_SKIP) {
            advance(st, src, b, at + room);
            continue;
        }
        if (room < sizeof(*ret) || written - at < sizeof(*ret))
            return comm_fail(c, -EPROTO, "rank %d's mailbox holds a frame cut short: refused", src);
        memcpy(ret, p, sizeof(*ret)); /* read once: the sender could change it under us */
        const char *why = comm_header_invalid(c, &ret->h);
        if (!why && ret->h.src != src)
            why = "another rank's source";
        else if (!why && (ret->bytes != record_bytes(ret->h.n * dtype_size(ret->h.dtype)) || ret->bytes > room ||
                          ret->bytes > written - at || ret->h.n * dtype_size(ret->h.dtype) > mailbox_chunk_bytes(c)))
            why = "a size that does not match its header";
        if (why)
            return comm_fail(c, -EPROTO, "rank %d's mailbox holds a frame with %s: refused", src, why);
        *ret_data = p + sizeof(*ret);
        return 0;
    }
}

/* The record peek() found, copied out of the ring (which it leaves). */
static int copy_out(comm *c, mailbox_state *st, int src, shm_ring b, const mailbox_record *rec, const char *data,
                    mailbox_frame **ret) {
    uint64_t bytes = rec->h.n * dtype_size(rec->h.dtype);
    if (st->early_bytes + bytes > MAILBOX_MAX_EARLY_BYTES)
        return comm_fail(c, -ENOBUFS, "more than %llu MiB came from rank %d before anyone asked for it",
                         MAILBOX_MAX_EARLY_BYTES >> 20, src);
    mailbox_frame *m = calloc(1, sizeof(*m));
    if (!m || !(m->copy = malloc(bytes ? bytes : 1))) {
        free(m);
        return comm_fail(c, -ENOMEM, "out of memory for a frame of %llu bytes from rank %d", (unsigned long long)bytes,
                         src);
    }
    memcpy(m->copy, data, bytes);
    m->f = (comm_frame){.h = rec->h, .data = m->copy, .transport = &mailbox_transport};
    m->st = st;
    advance(st, src, b, st->cursor[src] + rec->bytes);
    comm_count_received(c, src, bytes);
    *ret = m;
    return 0;
}

/* Copies out every frame this rank's mailboxes hold, so that their senders can go on. */
static int drain(comm *c, mailbox_state *st) {
    for (int src = 0; src < c->peers.world; src++) {
        if (src == st->rank || !c->peers.here[src])
            continue;
        shm_ring b = shm_mailbox_ring(st->plane, src, st->rank);
        for (;;) {
            mailbox_record rec;
            const char *data;
            bool present;
            TRY(peek(c, st, src, b, &rec, &data, &present));
            if (!present)
                break;
            mailbox_frame *m;
            TRY(copy_out(c, st, src, b, &rec, data, &m));
            mailbox_frame **tail = &st->early[src];
            while (*tail)
                tail = &(*tail)->next;
            *tail = m;
            st->early_bytes += m->f.h.n * dtype_size(m->f.h.dtype);
        }
    }
    return 0;
}

/* drain, for shm_wait_room. */
static int drain_mailboxes(comm *c, void *st) {
    return drain(c, st);
}

static int mailbox_send(comm *c, int dst, const comm_call *call, int32_t tag, uint64_t offset, const void *data,
                        uint64_t n, bool zero_copy) {
    (void)zero_copy; /* copied into the ring: the buffer is free at once */
    mailbox_state *st = state(c);
    shm_ring b = shm_mailbox_ring(st->plane, st->rank, dst);
    uint64_t bytes = n * dtype_size(call->t), need = record_bytes(bytes);
    uint64_t at = atomic_load_explicit(&b.h->written, memory_order_relaxed); /* this rank's own counter */
    uint64_t room = b.size - at % b.size, skip = room < need ? room : 0;
    if (at + skip + need > b.size)
        TRY(shm_wait_room(c, st->plane, dst, shm_ring_consumed(b), at + skip + need - b.size, call, tag,
                          drain_mailboxes, st));
    if (skip) {
        uint32_t mark = MAILBOX_SKIP;
        memcpy(b.ring + at % b.size, &mark, sizeof(mark));
    }
    char *p = b.ring + (at + skip) % b.size;
    mailbox_record rec = {.h = comm_header_of(c, call, tag, offset, n), .bytes = need};
    memcpy(p, &rec, sizeof(rec));
    if (bytes)
        memcpy(p + sizeof(rec), data, bytes);
    shm_flag_set(shm_ring_written(b), at + skip + need);
    comm_count_sent(c, dst, bytes);
    return 0;
}

static mailbox_frame *take_early(mailbox_state *st, int src, uint64_t seq, int32_t tag) {
    for (mailbox_frame **q = &st->early[src]; *q; q = &(*q)->next)
        if ((*q)->f.h.seq == seq && (*q)->f.h.tag == tag) {
            mailbox_frame *m = *q;
            *q = m->next;
            m->next = NULL;
            st->early_bytes -= m->f.h.n * dtype_size(m->f.h.dtype);
            return m;
        }
    return NULL;
}

static void mailbox_frame_free(comm_frame *f) {
    mailbox_frame *m = (mailbox_frame *)f;
    if (!m->copy) { /* read in place: now it, and what was copied out after it, are consumed */
        mailbox_state *st = m->st;
        int src = m->f.h.src;
        st->held[src] = false;
        shm_flag_set(shm_ring_consumed(shm_mailbox_ring(st->plane, src, st->rank)), st->cursor[src]);
    }
    free(m->copy);
    free(m);
}

static int mailbox_recv(comm *c, int src, const comm_call *call, int32_t tag, comm_frame **ret_frame) {
    mailbox_state *st = state(c);
    shm_ring b = shm_mailbox_ring(st->plane, src, st->rank);
    for (const mailbox_frame *q = st->early[src]; q; q = q->next)
        TRY(comm_check_stale(c, &q->f.h, call));
    mailbox_frame *m = take_early(st, src, call->seq, tag);
    while (!m) {
        mailbox_record rec;
        const char *data;
        bool present;
        TRY(peek(c, st, src, b, &rec, &data, &present));
        if (!present) {
            TRY(shm_flag_wait(c, st->plane, src, shm_ring_written(b), st->cursor[src] + 1, call, tag));
            continue;
        }
        TRY(comm_check_stale(c, &rec.h, call));
        bool wanted = rec.h.seq == call->seq && rec.h.tag == tag;
        if (wanted && !st->held[src]) { /* in place, until it is freed */
            if (!(m = calloc(1, sizeof(*m))))
                return comm_fail(c, -ENOMEM, "out of memory");
            m->f = (comm_frame){.h = rec.h, .data = data, .transport = &mailbox_transport};
            m->st = st;
            st->held[src] = true;
            st->cursor[src] += rec.bytes;
            comm_count_received(c, src, rec.h.n * dtype_size(rec.h.dtype));
            break;
        }
        mailbox_frame *copy;
        TRY(copy_out(c, st, src, b, &rec, data, &copy));
        if (wanted) {
            m = copy;
            break;
        }
        mailbox_frame **tail = &st->early[src];
        while (*tail)
            tail = &(*tail)->next;
        *tail = copy;
        st->early_bytes += copy->f.h.n * dtype_size(copy->f.h.dtype);
    }
    int r = comm_check_frame(c, &m->f, call);
    if (r < 0) {
        mailbox_frame_free(&m->f);
        return r;
    }
    *ret_frame = &m->f;
    return 0;
}

static int mailbox_probe(comm *c, int src, int32_t tag) {
    mailbox_state *st = state(c);
    TRY(drain(c, st)); /* what has come, out of the rings */
    for (const mailbox_frame *q = st->early[src]; q; q = q->next)
        if (q->f.h.seq == 0 && q->f.h.tag == tag)
            return 1;
    return 0;
}

static int mailbox_finish(comm *c, int result, uint64_t deadline_ms) {
    (void)c;
    (void)deadline_ms;
    return result; /* nothing of the caller's is held: frames are copies */
}

static bool mailbox_buffers_exposed(const comm *c) {
    (void)c;
    return false;
}

static void mailbox_close(comm *c, bool job_failed) {
    (void)job_failed;
    mailbox_state *st = state(c);
    if (!st)
        return;
    for (int r = 0; st->early && r < c->peers.world; r++)
        while (st->early[r]) {
            mailbox_frame *m = st->early[r];
            st->early[r] = m->next;
            free(m->copy);
            free(m);
        }
    shm_close_plane(st->plane);
    free(st->cursor);
    free(st->held);
    free(st->early);
    free(st);
    c->local_impl = NULL;
}

static const comm_transport mailbox_transport = {
    .name = "shm",
    .close = mailbox_close,
    .send = mailbox_send,
    .recv = mailbox_recv,
    .frame_copy_to = comm_data_copy_to,
    .frame_data = comm_data_of,
    .frame_reduce_pair = comm_data_reduce_pair,
    .frame_free = mailbox_frame_free,
    .finish = mailbox_finish,
    .buffers_exposed = mailbox_buffers_exposed,
    .chunk_bytes = mailbox_chunk_bytes,
    .probe = mailbox_probe,
};

int comm_mailbox_open(comm *c) {
    mailbox_state *st = calloc(1, sizeof(*st));
    size_t world = (size_t)c->peers.world;
    if (st) {
        st->rank = c->peers.rank;
        st->cursor = calloc(world, sizeof(uint64_t));
        st->held = calloc(world, sizeof(bool));
        st->early = calloc(world, sizeof(mailbox_frame *));
    }
    c->local_impl = st;
    if (!st || !st->cursor || !st->held || !st->early) {
        mailbox_close(c, true);
        return comm_fail(c, -ENOMEM, "out of memory");
    }
    bool alone = true;
    for (int r = 0; r < c->peers.world; r++)
        alone = alone && (r == st->rank || !c->peers.here[r]);
    int r = alone ? 0 : shm_open_plane(c, &st->plane); /* over ZeroMQ: c->local is not set yet */
    if (r < 0) {
        mailbox_close(c, true);
        return r;
    }
    c->local = &mailbox_transport;
    return 0;
}
