#include "common/strmap.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

struct strmap_node {
    strmap_node *next;
    uint64_t hash;
    void *value;
    char key[]; /* NUL-terminated */
};

static uint64_t seed; /* drawn once, before main: who picks the keys does not know it */

__attribute__((constructor)) static void seed_draw(void) {
    if (getrandom(&seed, sizeof(seed), GRND_NONBLOCK) != (ssize_t)sizeof(seed))
        seed = (uint64_t)clock() * 0x9e3779b97f4a7c15ull ^ (uint64_t)getpid(); /* no entropy yet: still not fixed */
}

static uint64_t hash_of(const char *key) {
    uint64_t h = 14695981039346656037ull; /* FNV-1a */
    for (const unsigned char *p = (const unsigned char *)key; *p; p++)
        h = (h ^ *p) * 1099511628211ull;
    h ^= seed; /* splitmix64's finalizer: every bit of h and the seed reaches the low bits */
    h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ull;
    h = (h ^ (h >> 27)) * 0x94d049bb133111ebull;
    return h ^ (h >> 31);
}

static strmap_node **slot_of(const strmap *m, const char *key, uint64_t h) {
    strmap_node **at = &m->buckets[h & (m->n_buckets - 1)];
    while (*at && ((*at)->hash != h || strcmp((*at)->key, key) != 0))
        at = &(*at)->next;
    return at;
}

void *strmap_get(const strmap *m, const char *key) {
    if (!m->n_buckets)
        return NULL;
    strmap_node *n = *slot_of(m, key, hash_of(key));
    return n ? n->value : NULL;
}

/* Twice the buckets once there are as many entries as buckets. */
static int grow(strmap *m) {
    size_t n = m->n_buckets ? 2 * m->n_buckets : 16;
    strmap_node **b = calloc(n, sizeof(*b));
    if (!b)
        return -ENOMEM;
    for (size_t i = 0; i < m->n_buckets; i++)
        for (strmap_node *e = m->buckets[i], *next; e; e = next) {
            next = e->next;
            e->next = b[e->hash & (n - 1)];
            b[e->hash & (n - 1)] = e;
        }
    free(m->buckets);
    m->buckets = b;
    m->n_buckets = n;
    return 0;
}

int strmap_put(strmap *m, const char *key, void *value) {
    if (m->size >= m->n_buckets) {
        int r = grow(m);
        if (r < 0)
            return r;
    }
    uint64_t h = hash_of(key);
    strmap_node **at = slot_of(m, key, h);
    if (*at) {
        (*at)->value = value;
        return 0;
    }
    size_t len = strlen(key);
    strmap_node *n = malloc(sizeof(*n) + len + 1);
    if (!n)
        return -ENOMEM;
    *n = (strmap_node){.hash = h, .value = value};
    memcpy(n->key, key, len + 1);
    *at = n;
    m->size++;
    return 0;
}

void *strmap_remove(strmap *m, const char *key) {
    if (!m->n_buckets)
        return NULL;
    strmap_node **at = slot_of(m, key, hash_of(key)), *n = *at;
    if (!n)
        return NULL;
    void *value = n->value;
    *at = n->next;
    free(n);
    m->size--;
    return value;
}

void strmap_each(const strmap *m, void (*fn)(const char *key, void *value, void *ctx), void *ctx) {
    for (size_t i = 0; i < m->n_buckets; i++)
        for (strmap_node *e = m->buckets[i]; e; e = e->next)
            fn(e->key, e->value, ctx);
}

void strmap_clear(strmap *m) {
    for (size_t i = 0; i < m->n_buckets; i++)
        for (strmap_node *e = m->buckets[i], *next; e; e = next) {
            next = e->next;
            free(e);
        }
    free(m->buckets);
    *m = (strmap){0};
}

size_t strmap_longest_chain(const strmap *m) {
    size_t longest = 0;
    for (size_t i = 0; i < m->n_buckets; i++) {
        size_t n = 0;
        for (const strmap_node *e = m->buckets[i]; e; e = e->next)
            n++;
        longest = n > longest ? n : longest;
    }
    return longest;
}
