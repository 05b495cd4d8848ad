/* A map from strings to pointers: separate chaining, grown as it fills, so that a lookup
 * costs the same with 10 keys as with 100000 (ddpd's store and its waits: what a peer can
 * make large must not make every message slow). The hash is FNV-1a mixed with a seed drawn
 * at start: FNV's low bits depend only on the keys' low bits, so that keys made to share
 * them would otherwise share a chain. Keys are copied; values are the caller's. */
#pragma once
#include <stddef.h>

typedef struct strmap_node strmap_node;

typedef struct {
    strmap_node **buckets;
    size_t n_buckets, size;
} strmap;

/* The value of key, or NULL. */
void *strmap_get(const strmap *m, const char *key);
/* Sets key to value (value not NULL), replacing any; -ENOMEM. */
int strmap_put(strmap *m, const char *key, void *value);
/* Removes key and returns its value (NULL when it was not there). */
void *strmap_remove(strmap *m, const char *key);
/* Calls fn on every entry, in no order; fn must not change the map. */
void strmap_each(const strmap *m, void (*fn)(const char *key, void *value, void *ctx), void *ctx);
/* The most entries that share a chain (for the tests: what crafted keys can do). */
size_t strmap_longest_chain(const strmap *m);
/* Frees the map's own memory (not the values). */
void strmap_clear(strmap *m);
