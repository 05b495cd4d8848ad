#include "server/reply_budget.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* One connection's account. The map holds a reference, and each queued frame one: the
 * last frame may be let go by ZeroMQ's I/O thread after the map forgot the connection. */
typedef struct {
    atomic_size_t queued; /* bytes */
    atomic_int refs;
    atomic_size_t *total; /* the reply_budgets' own, which outlives every frame */
    size_t limit;         /* ddpd's thread only */
} reply_budget;

/* Where a charged frame's bytes live: after this header, which says whom to credit. */
typedef struct {
    reply_budget *budget;
    size_t size;
} charged_frame;

static void budget_unref(reply_budget *r) {
    if (atomic_fetch_sub_explicit(&r->refs, 1, memory_order_acq_rel) == 1)
        free(r);
}

/* ZeroMQ's free function: called once ZeroMQ is done with the frame, from any thread. */
static void charged_frame_free(void *data, void *hint) {
    (void)data;
    charged_frame *f = hint;
    atomic_fetch_sub_explicit(&f->budget->queued, f->size, memory_order_release);
    atomic_fetch_sub_explicit(f->budget->total, f->size, memory_order_release);
    budget_unref(f->budget);
    free(f);
}

static int charged_frame_init(void *ctx, zmq_msg_t *msg, size_t size) {
    reply_budget *r = ctx;
    charged_frame *f = malloc(sizeof(*f) + size);
    if (!f)
        return -ENOMEM;
    f->budget = r;
    f->size = size;
    atomic_fetch_add_explicit(&r->refs, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&r->queued, size, memory_order_relaxed);
    atomic_fetch_add_explicit(r->total, size, memory_order_relaxed);
    if (zmq_msg_init_data(msg, f + 1, size, charged_frame_free, f) < 0) {
        charged_frame_free(f + 1, f);
        return -ENOMEM;
    }
    return 0;
}

static void identity_key(const uint8_t *identity, size_t identity_size, char key[2 * WIRE_MAX_IDENTITY + 1]) {
    static const char hex[] = "0123456789abcdef";
    for (size_t i = 0; i < identity_size; i++) {
        key[2 * i] = hex[identity[i] >> 4];
        key[2 * i + 1] = hex[identity[i] & 15];
    }
    key[2 * identity_size] = '\0';
}

void reply_budgets_init(reply_budgets *b, size_t connection_bytes, size_t total_bytes) {
    memset(&b->by_identity, 0, sizeof(b->by_identity));
    atomic_init(&b->total, 0);
    b->connection_bytes = connection_bytes;
    b->total_bytes = total_bytes;
}

int reply_budgets_send(reply_budgets *b, void *router, const uint8_t *identity, size_t identity_size,
                       const Ddp__Envelope *env, const wire_frame *payload, size_t n_payload, size_t extra,
                       size_t *ret_queued) {
    char key[2 * WIRE_MAX_IDENTITY + 1];
    identity_key(identity, identity_size, key);
    reply_budget *r = strmap_get(&b->by_identity, key);
    if (!r) {
        if (!(r = calloc(1, sizeof(*r))))
            return -ENOMEM;
        atomic_init(&r->queued, 0);
        atomic_init(&r->refs, 1);
        r->total = &b->total;
        if (strmap_put(&b->by_identity, key, r) < 0) {
            free(r);
            return -ENOMEM;
        }
    }
    if (r->limit < b->connection_bytes + extra)
        r->limit = b->connection_bytes + extra;
    size_t queued = atomic_load_explicit(&r->queued, memory_order_acquire);
    if (ret_queued)
        *ret_queued = queued;
    size_t bytes = wire_message_bytes(env, payload, n_payload);
    if (queued + bytes > r->limit ||
        (queued && atomic_load_explicit(&b->total, memory_order_acquire) + bytes > b->total_bytes))
        return -ENOBUFS;
    wire_frame_maker maker = {charged_frame_init, r};
    return wire_send_made(router, identity, identity_size, env, payload, n_payload, &maker);
}

size_t reply_budgets_queued(const reply_budgets *b, const uint8_t *identity, size_t identity_size) {
    char key[2 * WIRE_MAX_IDENTITY + 1];
    identity_key(identity, identity_size, key);
    reply_budget *r = strmap_get(&b->by_identity, key);
    return r ? atomic_load_explicit(&r->queued, memory_order_acquire) : 0;
}

typedef struct {
    char **keys;
    size_t n, cap;
    int all; /* every entry, not only the idle */
} sweep_list;

static void collect_idle(const char *key, void *value, void *ctx) {
    sweep_list *l = ctx;
    reply_budget *r = value;
    if (!l->all && atomic_load_explicit(&r->queued, memory_order_acquire) != 0)
        return;
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 16;
        char **keys = realloc(l->keys, cap * sizeof(*keys));
        if (!keys)
            return; /* the next sweep */
        l->keys = keys;
        l->cap = cap;
    }
    if ((l->keys[l->n] = strdup(key)))
        l->n++;
}

static void sweep(reply_budgets *b, int all) {
    sweep_list l = {.all = all};
    strmap_each(&b->by_identity, collect_idle, &l);
    for (size_t i = 0; i < l.n; i++) {
        reply_budget *r = strmap_remove(&b->by_identity, l.keys[i]);
        if (r)
            budget_unref(r);
        free(l.keys[i]);
    }
    free(l.keys);
}

void reply_budgets_sweep(reply_budgets *b) {
    sweep(b, 0);
}

void reply_budgets_free(reply_budgets *b) {
    sweep(b, 1);
    strmap_clear(&b->by_identity);
}
