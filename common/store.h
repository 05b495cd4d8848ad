/* A key-value store (like torch.distributed's TCPStore): ddpd keeps a job's, and each rank
 * the keys it set itself, to bring back to a ddpd that restarted. Small values that members
 * share while the job runs, bounded by DDP_MAX_STORE_* in common/limits.h. */
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "common/strmap.h"

typedef struct {
    char *key;
    uint8_t *value;
    size_t size;
} store_entry;

typedef struct {
    store_entry *entries;
    size_t n_entries, capacity;
    size_t bytes; /* keys and values together */
    strmap index; /* key -> its entry's place + 1: a get is one lookup, however many keys */
} store;

/* Sets or replaces key. -ENOSPC when the store would exceed its limits, -EMSGSIZE when
 * the value alone is too large, -ENOMEM. */
int store_set(store *s, const char *key, const uint8_t *value, size_t size);
/* NULL when the key is not set. */
const store_entry *store_get(const store *s, const char *key);
void store_clear(store *s);
