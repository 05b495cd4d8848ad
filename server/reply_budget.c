#include "server/reply_budget.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What one connection, or one user's connections together, hold. The maps hold a
 * reference, and each queued frame one: the last frame may be let go by ZeroMQ's I/O
 * thread after the maps forgot them. */
typedef struct {
    atomic_size_t queued; /* bytes */
    atomic_int refs;
} account;

/* One connection's. */
typedef struct {
    account bytes;
    account *user;        /* its user's (reply_budgets_note_user), or the unknown one's */
    atomic_size_t *total; /* the reply_budgets' own, which outlives every frame */
    size_t limit;         /* ddpd's thread only */
    uint64_t noted_ms;    /* when a message last came from the connection (0: never) */
} reply_budget;

/* Where a charged frame's bytes live: after this header, which says whom to credit (the
 * user as it was when the frame was charged: a routing id may change hands). */
typedef struct {
    reply_budget *budget;
    account *user;
    size_t size;
} charged_frame;

static account *account_new(void) {
    account *a = calloc(1, sizeof(*a));
    if (a) {
        atomic_init(&a->queued, 0);
        atomic_init(&a->refs, 1);
    }
    return a;
}

static void account_unref(account *a) {
    if (a && atomic_fetch_sub_explicit(&a->refs, 1, memory_order_acq_rel) == 1)
        free(a);
}

static void budget_unref(reply_budget *r) {
    if (atomic_fetch_sub_explicit(&r->bytes.refs, 1, memory_order_acq_rel) == 1) {
        account_unref(r->user);
        free(r);
    }
}

/* ZeroMQ's free function: called once ZeroMQ is done with the frame, from any thread. */
static void charged_frame_free(void *data, void *hint) {
    (void)data;
    charged_frame *f = hint;
    atomic_fetch_sub_explicit(&f->budget->bytes.queued, f->size, memory_order_release);
    atomic_fetch_sub_explicit(&f->user->queued, f->size, memory_order_release);
    atomic_fetch_sub_explicit(f->budget->total, f->size, memory_order_release);
    account_unref(f->user);
    budget_unref(f->budget);
    free(f);
}

static int charged_frame_init(void *ctx, zmq_msg_t *msg, size_t size) {
    reply_budget *r = ctx;
    charged_frame *f = malloc(sizeof(*f) + size);
    if (!f)
        return -ENOMEM;
    f->budget = r;
    f->user = r->user;
    f->size = size;
    atomic_fetch_add_explicit(&r->bytes.refs, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&r->user->refs, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&r->bytes.queued, size, memory_order_relaxed);
    atomic_fetch_add_explicit(&r->user->queued, size, memory_order_relaxed);
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
    memset(&b->by_user, 0, sizeof(b->by_user));
    atomic_init(&b->total, 0);
    b->connection_bytes = connection_bytes;
    b->total_bytes = total_bytes;
}

/* user's account, made if new; NULL without memory. */
static account *user_account(reply_budgets *b, const char *user) {
    account *a = strmap_get(&b->by_user, user);
    if (!a && (a = account_new()) && strmap_put(&b->by_user, user, a) < 0) {
        account_unref(a);
        return NULL;
    }
    return a;
}

/* identity's account, made if new (charged to the unknown user until told otherwise). */
static reply_budget *connection_budget(reply_budgets *b, const uint8_t *identity, size_t identity_size) {
    char key[2 * WIRE_MAX_IDENTITY + 1];
    identity_key(identity, identity_size, key);
    reply_budget *r = strmap_get(&b->by_identity, key);
    if (r)
        return r;
    account *user = user_account(b, REPLY_USER_UNKNOWN);
    if (!user || !(r = calloc(1, sizeof(*r))))
        return NULL;
    atomic_init(&r->bytes.queued, 0);
    atomic_init(&r->bytes.refs, 1);
    atomic_fetch_add_explicit(&user->refs, 1, memory_order_relaxed);
    r->user = user;
    r->total = &b->total;
    if (strmap_put(&b->by_identity, key, r) < 0) {
        budget_unref(r);
        return NULL;
    }
    return r;
}

int reply_budgets_note_user(reply_budgets *b, const uint8_t *identity, size_t identity_size, const char *user,
                            uint64_t now_ms) {
    reply_budget *r = connection_budget(b, identity, identity_size);
    account *a = r ? user_account(b, user) : NULL;
    if (!a)
        return -ENOMEM;
    r->noted_ms = now_ms ? now_ms : 1;
    if (r->user != a) { /* frames charged before stay charged to the user they were sent for */
        atomic_fetch_add_explicit(&a->refs, 1, memory_order_relaxed);
        account_unref(r->user);
        r->user = a;
    }
    return 0;
}

typedef struct {
    size_t holding; /* users that hold replies */
} holders;

static void count_holder(const char *key, void *value, void *ctx) {
    (void)key;
    if (atomic_load_explicit(&((account *)value)->queued, memory_order_acquire))
        ((holders *)ctx)->holding++;
}

int reply_budgets_send(reply_budgets *b, void *router, const uint8_t *identity, size_t identity_size,
                       const Ddp__Envelope *env, const wire_frame *payload, size_t n_payload, size_t extra,
                       size_t *ret_queued) {
    reply_budget *r = connection_budget(b, identity, identity_size);
    if (!r)
        return -ENOMEM;
    if (r->limit < b->connection_bytes + extra)
        r->limit = b->connection_bytes + extra;
    size_t queued = atomic_load_explicit(&r->bytes.queued, memory_order_acquire);
    if (ret_queued)
        *ret_queued = queued;
    size_t bytes = wire_message_bytes(env, payload, n_payload);
    if (queued + bytes > r->limit)
        return -ENOBUFS;
    if (queued && atomic_load_explicit(&b->total, memory_order_acquire) + bytes > b->total_bytes) {
        /* Past the total, a connection that holds replies gets more only while its user
         * holds less than an equal share of the total among the users that hold any: one
         * user's many connections cannot starve another's (users under their share may
         * take the sum to twice the total at most). */
        holders h = {0};
        strmap_each(&b->by_user, count_holder, &h);
        size_t user_queued = atomic_load_explicit(&r->user->queued, memory_order_acquire);
        if (user_queued + bytes > b->total_bytes / (h.holding ? h.holding : 1))
            return -ENOBUFS;
    }
    wire_frame_maker maker = {charged_frame_init, r};
    return wire_send_made(router, identity, identity_size, env, payload, n_payload, &maker);
}

size_t reply_budgets_queued(const reply_budgets *b, const uint8_t *identity, size_t identity_size) {
    char key[2 * WIRE_MAX_IDENTITY + 1];
    identity_key(identity, identity_size, key);
    reply_budget *r = strmap_get(&b->by_identity, key);
    return r ? atomic_load_explicit(&r->bytes.queued, memory_order_acquire) : 0;
}

typedef struct {
    char **keys;
    size_t n, cap;
    int all;         /* every entry, not only the idle */
    uint64_t now_ms; /* connections: kept while noted within REPLY_NOTE_KEEP_MS of this */
} sweep_list;

static void collect(sweep_list *l, const char *key) {
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

/* A connection that holds nothing and has been silent a while (a member's heartbeats keep
 * its own, and the user it was noted as, for the replies ddpd sends it unasked). */
static void collect_idle_connection(const char *key, void *value, void *ctx) {
    sweep_list *l = ctx;
    const reply_budget *r = value;
    if (l->all || (atomic_load_explicit(&r->bytes.queued, memory_order_acquire) == 0 &&
                   (!r->noted_ms || l->now_ms > r->noted_ms + REPLY_NOTE_KEEP_MS)))
        collect(l, key);
}

/* A user whose connections are all forgotten (they hold a reference each) and whose
 * frames are all let go. */
static void collect_idle_user(const char *key, void *value, void *ctx) {
    sweep_list *l = ctx;
    account *a = value;
    if (l->all || (atomic_load_explicit(&a->refs, memory_order_acquire) == 1 &&
                   atomic_load_explicit(&a->queued, memory_order_acquire) == 0))
        collect(l, key);
}

static void sweep(strmap *m, sweep_list *l, void (*collector)(const char *, void *, void *), void (*unref)(void *)) {
    strmap_each(m, collector, l);
    for (size_t i = 0; i < l->n; i++) {
        void *value = strmap_remove(m, l->keys[i]);
        if (value)
            unref(value);
        free(l->keys[i]);
    }
    free(l->keys);
    l->keys = NULL;
    l->n = l->cap = 0;
}

static void unref_budget(void *value) {
    budget_unref(value);
}

static void unref_account(void *value) {
    account_unref(value);
}

void reply_budgets_sweep(reply_budgets *b, uint64_t now_ms) {
    sweep_list l = {.now_ms = now_ms};
    sweep(&b->by_identity, &l, collect_idle_connection, unref_budget);
    sweep(&b->by_user, &l, collect_idle_user, unref_account);
}

void reply_budgets_free(reply_budgets *b) {
    sweep_list l = {.all = 1};
    sweep(&b->by_identity, &l, collect_idle_connection, unref_budget);
    sweep(&b->by_user, &l, collect_idle_user, unref_account);
    strmap_clear(&b->by_identity);
    strmap_clear(&b->by_user);
}
