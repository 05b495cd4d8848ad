#include "worker/libddp/p2p_shm.h"

#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "worker/libddp/shm_layout.h"

#define P2P_MAX_EARLY_BYTES (1ull << 30) /* messages read out before their recv, at once: a cap, as the mailboxes' */

/* A message read out of its mailbox before its recv came. */
typedef struct early {
    shm_record rec;
    char *data; /* NULL when remote: the data waits in ZeroMQ's queue */
    struct early *next;
} early;

struct p2p_shm {
    shm_plane *plane;
    int world;
    early **head, **tail; /* (world) per sender, in send order */
    uint64_t early_bytes; /* the data they hold */
};

static void ring_put(shm_ring b, uint64_t at, const void *src, size_t n) {
    size_t off = (size_t)(at % b.size), first = n < b.size - off ? n : b.size - off;
    memcpy(b.ring + off, src, first);
    memcpy(b.ring, (const char *)src + first, n - first);
}

static void ring_get(shm_ring b, uint64_t at, void *dst, size_t n) {
    size_t off = (size_t)(at % b.size), first = n < b.size - off ? n : b.size - off;
    memcpy(dst, b.ring + off, first);
    memcpy((char *)dst + first, b.ring, n - first);
}

static uint64_t padded(uint64_t bytes) {
    return (bytes + 7) & ~(uint64_t)7;
}

/* Messages up to a quarter of the ring travel in it; larger ones over ZeroMQ. */
static bool fits(shm_ring b, uint64_t bytes) {
    return bytes <= b.size / 4;
}

int p2p_shm_open(comm *c, shm_plane *s, p2p_shm **ret) {
    p2p_shm *p = calloc(1, sizeof(*p));
    if (p) {
        *p = (p2p_shm){.plane = s, .world = c->peers.world};
        p->head = calloc((size_t)p->world, sizeof(early *));
        p->tail = calloc((size_t)p->world, sizeof(early *));
    }
    if (!p || !p->head || !p->tail) {
        p2p_shm_close(p);
        return comm_fail(c, -ENOMEM, "out of memory");
    }
    *ret = p;
    return 0;
}

void p2p_shm_close(p2p_shm *p) {
    if (!p)
        return;
    for (int r = 0; p->head && r < p->world; r++)
        while (p->head[r]) {
            early *e = p->head[r];
            p->head[r] = e->next;
            free(e->data);
            free(e);
        }
    free(p->head);
    free(p->tail);
    free(p);
}

/* The record at src's mailbox cursor, once written there: checked, and how many bytes it
 * takes in the ring. */
static int read_record(comm *c, int src, shm_ring b, uint64_t at, shm_record *rec, uint64_t *ret_need) {
    ring_get(b, at, rec, sizeof(*rec));
    uint64_t bytes = rec->count * dtype_size(rec->dtype < DTYPE_COUNT ? (dtype)rec->dtype : DTYPE_U8);
    if (!dtype_valid(rec->dtype) || rec->remote > 1 || rec->count > UINT64_MAX / 8 || (!rec->remote && !fits(b, bytes)))
        return comm_fail(c, -EPROTO, "recv: rank %d's mailbox holds a record that is not one (tag %d, %llu elements)",
                         src, (int)rec->tag, (unsigned long long)rec->count);
    *ret_need = sizeof(*rec) + (rec->remote ? 0 : padded(bytes));
    if (atomic_load(&b.h->written) < at + *ret_need)
        return comm_fail(c, -EPROTO, "recv: rank %d's mailbox ends inside a message", src);
    return 0;
}

/* The record at at, out of the ring and into src's list of those read before their recv
 * (its data too, unless that comes over ZeroMQ), so that src can go on sending. */
static int keep_early(comm *c, p2p_shm *p, int src, shm_ring b, uint64_t at, const shm_record *rec, uint64_t need) {
    uint64_t bytes = rec->remote ? 0 : rec->count * dtype_size((dtype)rec->dtype);
    if (p->early_bytes + bytes > P2P_MAX_EARLY_BYTES)
        return comm_fail(c, -ENOBUFS, "more than %llu MiB came from rank %d before anyone asked for it",
                         P2P_MAX_EARLY_BYTES >> 20, src);
    early *e = calloc(1, sizeof(*e));
    if (!e || (!rec->remote && !(e->data = malloc(bytes ? bytes : 1)))) {
        free(e);
        return comm_fail(c, -ENOMEM, "out of memory for a message of %llu bytes from rank %d",
                         (unsigned long long)bytes, src);
    }
    e->rec = *rec;
    if (!rec->remote) {
        ring_get(b, at + sizeof(*rec), e->data, bytes);
        p->early_bytes += bytes;
    }
    shm_flag_set(shm_ring_consumed(b), at + need);
    if (p->tail[src])
        p->tail[src]->next = e;
    else
        p->head[src] = e;
    p->tail[src] = e;
    return 0;
}

/* Reads out every message this rank's mailboxes hold, for the recvs to come. */
static int drain(comm *c, p2p_shm *p) {
    for (int src = 0; src < p->world; src++) {
        if (src == c->peers.rank || !c->peers.here[src])
            continue;
        shm_ring b = shm_mailbox_ring(p->plane, src, c->peers.rank);
        for (;;) {
            uint64_t at = atomic_load(&b.h->consumed), need;
            if (atomic_load_explicit(&b.h->written, memory_order_acquire) < at + sizeof(shm_record))
                break;
            shm_record rec;
            TRY(read_record(c, src, b, at, &rec, &need));
            TRY(keep_early(c, p, src, b, at, &rec, need));
        }
    }
    return 0;
}

/* drain, for shm_wait_room. */
static int drain_mailboxes(comm *c, void *p) {
    return drain(c, p);
}

int p2p_shm_probe(comm *c, p2p_shm *p, int src, int32_t tag) {
    TRY(drain(c, p)); /* what has come, out of the rings */
    for (const early *e = p->head[src]; e; e = e->next)
        if (e->rec.tag == tag)
            return 1;
    return 0;
}

int p2p_shm_send(comm *c, p2p_shm *p, const coll_args *a) {
    const comm_call *call = &a->call;
    int dst = call->root;
    uint64_t bytes = call->count * dtype_size(call->t);
    shm_ring b = shm_mailbox_ring(p->plane, c->peers.rank, dst);
    bool remote = !fits(b, bytes);
    uint64_t need = sizeof(shm_record) + (remote ? 0 : padded(bytes));
    uint64_t at = atomic_load(&b.h->written); /* this rank's own counter */
    if (at + need > b.size)                   /* room: the receiver has taken enough */
        TRY(shm_wait_room(c, p->plane, dst, shm_ring_consumed(b), at + need - b.size, call, a->tag, drain_mailboxes,
                          p));
    shm_record rec = {.tag = a->tag, .dtype = (uint8_t)call->t, .remote = remote, .count = call->count};
    ring_put(b, at, &rec, sizeof(rec));
    if (!remote)
        ring_put(b, at + sizeof(rec), a->send, bytes);
    shm_flag_set(shm_ring_written(b), at + need);
    if (remote) /* its place in the order is taken: the data follows over ZeroMQ */
        return coll_send(c, a);
    comm_count_sent(c, dst, bytes);
    return 0;
}

/* The message rec (its data in the ring at data_at, or in data, or remote) into the
 * caller's buffer, once it is what the call expects. */
static int deliver(comm *c, const coll_args *a, const shm_record *rec, shm_ring b, uint64_t data_at, const char *data) {
    const comm_call *call = &a->call;
    int src = call->root;
    if (rec->dtype != (uint8_t)call->t || rec->count != call->count) {
        comm_frame f = {
            .h = {.src = src, .kind = COLL_SEND, .dtype = rec->dtype, .count = rec->count, .tag = rec->tag}};
        return comm_mismatch(c, &f, call);
    }
    if (rec->remote)
        return coll_recv(c, a);
    uint64_t bytes = call->count * dtype_size(call->t);
    if (data)
        memcpy(a->recv, data, bytes);
    else
        ring_get(b, data_at, a->recv, bytes);
    comm_count_received(c, src, bytes);
    return 0;
}

int p2p_shm_recv(comm *c, p2p_shm *p, const coll_args *a) {
    const comm_call *call = &a->call;
    int src = call->root;
    /* one read out before, for this tag */
    for (early **e = &p->head[src], *prev = NULL; *e; prev = *e, e = &(*e)->next) {
        if ((*e)->rec.tag != a->tag)
            continue;
        early *found = *e;
        *e = found->next;
        if (p->tail[src] == found)
            p->tail[src] = prev;
        shm_ring none = {0};
        int r = deliver(c, a, &found->rec, none, 0, found->data);
        if (found->data)
            p->early_bytes -= found->rec.count * dtype_size((dtype)found->rec.dtype);
        free(found->data);
        free(found);
        return r;
    }
    shm_ring b = shm_mailbox_ring(p->plane, src, c->peers.rank);
    for (;;) {
        uint64_t at = atomic_load(&b.h->consumed), need; /* this rank's own counter */
        TRY(shm_flag_wait(c, p->plane, src, shm_ring_written(b), at + sizeof(shm_record), call, a->tag));
        shm_record rec;
        TRY(read_record(c, src, b, at, &rec, &need));
        if (rec.tag == a->tag) {
            int r = deliver(c, a, &rec, b, at + sizeof(rec), NULL);
            shm_flag_set(shm_ring_consumed(b), at + need);
            return r;
        }
        TRY(keep_early(c, p, src, b, at, &rec, need)); /* another tag's, until its recv */
    }
}
