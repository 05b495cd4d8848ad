/* A job's pending store waits (StoreWait, as TCPStore's wait): each names up to
 * DDP_MAX_STORE_WAIT_KEYS keys and is answered once every one is set. They are indexed by
 * the keys they still miss, so that a set touches only the waits on its own key, never
 * every wait (a peer can leave thousands pending), and kept in arrival order for their
 * deadlines. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/strmap.h"
#include "common/wire.h"
#include "common/store.h"

typedef struct store_waiter {
    uint8_t identity[WIRE_MAX_IDENTITY]; /* whom to answer */
    size_t identity_size;
    int32_t rank;
    uint64_t seq;
    char **keys; /* malloc'd, each strdup'd: the waiter's own */
    size_t n_keys;
    uint64_t deadline_ms;
    uint32_t timeout_ms;
    size_t missing;                   /* of its keys, those not set yet */
    struct store_waiter *prev, *next; /* arrival order; next also chains the ready ones */
} store_waiter;

typedef struct {
    store_waiter *head, *tail;
    size_t n;
    strmap by_key; /* key -> the waits that miss it */
} store_waits;

/* Takes w (malloc'd, with its keys) in, unless it fails: -ENOSPC beyond
 * DDP_MAX_STORE_WAITERS, -ENOMEM. Keys already in st count as set; with none missing w is
 * not kept and *ret_ready says so (the caller answers it and frees it). */
int store_waits_add(store_waits *ws, const store *st, store_waiter *w, bool *ret_ready);
/* key was set for the first time: the waits it completes, taken out, chained through
 * next (the caller answers and frees each); NULL when none. */
store_waiter *store_waits_key_set(store_waits *ws, const char *key);
/* Takes w out (its deadline passed), from every key it still misses. */
void store_waits_remove(store_waits *ws, const store *st, store_waiter *w);
void store_waiter_free(store_waiter *w);
/* Frees every wait and the index. */
void store_waits_clear(store_waits *ws);
