/* common/strmap.c and server/store_waits.c: the map under ddpd's store, and its pending
 * waits indexed by the keys they miss (a set answers exactly the waits it completes and
 * touches no others; expiry takes a wait off every list it is on). */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/limits.h"
#include "common/store.h"
#include "common/strmap.h"
#include "server/store_waits.h"
#include "tests/check_main.h"

START_TEST(test_strmap) {
    strmap m = {0};
    ck_assert_ptr_null(strmap_get(&m, "x"));
    ck_assert_ptr_null(strmap_remove(&m, "x"));
    enum { N = 100000 };
    char key[32];
    for (uintptr_t i = 0; i < N; i++) {
        snprintf(key, sizeof(key), "key-%lu", (unsigned long)i);
        ck_assert_int_eq(strmap_put(&m, key, (void *)(i + 1)), 0);
    }
    ck_assert_uint_eq(m.size, N);
    ck_assert_uint_ge(m.n_buckets, N); /* grown: chains stay short */
    for (uintptr_t i = 0; i < N; i++) {
        snprintf(key, sizeof(key), "key-%lu", (unsigned long)i);
        ck_assert_ptr_eq(strmap_get(&m, key), (void *)(i + 1));
    }
    ck_assert_int_eq(strmap_put(&m, "key-7", (void *)42), 0); /* replaced, not added */
    ck_assert_uint_eq(m.size, N);
    ck_assert_ptr_eq(strmap_remove(&m, "key-7"), (void *)42);
    ck_assert_ptr_null(strmap_get(&m, "key-7"));
    ck_assert_uint_eq(m.size, N - 1);
    ck_assert_ptr_null(strmap_get(&m, "key-100000"));
    ck_assert_ptr_null(strmap_get(&m, ""));
    strmap_clear(&m);
    ck_assert_uint_eq(m.size, 0);
}
END_TEST

/* 4096 keys that FNV-1a alone puts in 1/128 of the chains: 12 bytes each, every byte 'a'
 * or 'a' | 0x80, so that every key has the same low 7 bits in every byte (and FNV's low 7
 * bits depend on nothing else). The seeded mix spreads them as it spreads any keys. */
START_TEST(test_strmap_crafted_keys) {
    strmap m = {0};
    char key[13] = {0};
    for (uintptr_t i = 0; i < 4096; i++) {
        for (int b = 0; b < 12; b++)
            key[b] = (char)('a' | ((i >> b) & 1 ? 0x80 : 0));
        ck_assert_int_eq(strmap_put(&m, key, (void *)(i + 1)), 0);
    }
    ck_assert_uint_eq(m.size, 4096);
    ck_assert_msg(strmap_longest_chain(&m) <= 12, "%zu keys in one chain", strmap_longest_chain(&m));
    strmap_clear(&m);
}
END_TEST

/* A wait on keys (NULL-terminated), as ddpd makes it. */
static store_waiter *wait_on(uint64_t seq, const char *const *keys) {
    store_waiter *w = calloc(1, sizeof(*w));
    ck_assert_ptr_nonnull(w);
    w->seq = seq;
    while (keys[w->n_keys])
        w->n_keys++;
    w->keys = calloc(w->n_keys, sizeof(char *));
    for (size_t k = 0; k < w->n_keys; k++)
        w->keys[k] = strdup(keys[k]);
    return w;
}

/* The seqs of a ready chain, in order, as "1,3"; frees the chain. */
static void seqs_of(store_waiter *ready, char *buf, size_t size) {
    buf[0] = '\0';
    for (store_waiter *w = ready, *next; w; w = next) {
        next = w->next;
        size_t n = strlen(buf);
        snprintf(buf + n, size - n, "%s%llu", n ? "," : "", (unsigned long long)w->seq);
        store_waiter_free(w);
    }
}

static void set(store *st, store_waits *ws, const char *key, char *ready, size_t size) {
    bool fresh = !store_get(st, key);
    ck_assert_int_eq(store_set(st, key, (const uint8_t *)"v", 1), 0);
    seqs_of(fresh ? store_waits_key_set(ws, key) : NULL, ready, size);
}

START_TEST(test_waits) {
    store st = {0};
    store_waits ws = {0};
    char ready[64];
    bool now;
    set(&st, &ws, "a", ready, sizeof(ready));
    /* on a key already set: ready at once, not kept */
    store_waiter *w0 = wait_on(0, (const char *[]){"a", NULL});
    ck_assert_int_eq(store_waits_add(&ws, &st, w0, &now), 0);
    ck_assert(now);
    ck_assert_uint_eq(ws.n, 0);
    store_waiter_free(w0);
    /* 1 on b and c, 2 on c, 3 on b twice and a, 4 on d */
    ck_assert_int_eq(store_waits_add(&ws, &st, wait_on(1, (const char *[]){"b", "c", NULL}), &now), 0);
    ck_assert_int_eq(store_waits_add(&ws, &st, wait_on(2, (const char *[]){"c", NULL}), &now), 0);
    ck_assert_int_eq(store_waits_add(&ws, &st, wait_on(3, (const char *[]){"b", "a", "b", NULL}), &now), 0);
    store_waiter *w4 = wait_on(4, (const char *[]){"d", "e", NULL});
    ck_assert_int_eq(store_waits_add(&ws, &st, w4, &now), 0);
    ck_assert(!now);
    ck_assert_uint_eq(ws.n, 4);
    set(&st, &ws, "x", ready, sizeof(ready)); /* nobody waits on it */
    ck_assert_str_eq(ready, "");
    set(&st, &ws, "b", ready, sizeof(ready)); /* completes 3 only; 1 still misses c */
    ck_assert_str_eq(ready, "3");
    set(&st, &ws, "b", ready, sizeof(ready)); /* set again: nothing new */
    ck_assert_str_eq(ready, "");
    set(&st, &ws, "c", ready, sizeof(ready));
    ck_assert_str_eq(ready, "1,2");
    ck_assert_uint_eq(ws.n, 1);
    /* 4's deadline passes with d set and e not: off e's list, and e's list goes */
    set(&st, &ws, "d", ready, sizeof(ready));
    ck_assert_str_eq(ready, "");
    store_waits_remove(&ws, &st, w4);
    store_waiter_free(w4);
    ck_assert_uint_eq(ws.n, 0);
    ck_assert_ptr_null(ws.head);
    ck_assert_uint_eq(ws.by_key.size, 0);
    set(&st, &ws, "e", ready, sizeof(ready));
    ck_assert_str_eq(ready, "");
    /* waits left pending go with the job */
    ck_assert_int_eq(store_waits_add(&ws, &st, wait_on(5, (const char *[]){"f", "g", NULL}), &now), 0);
    store_waits_clear(&ws);
    store_clear(&st);
}
END_TEST

/* A set with thousands of waits pending on other keys touches only its own (each of
 * DDP_MAX_STORE_WAITERS waits on DDP_MAX_STORE_WAIT_KEYS keys of its own). */
START_TEST(test_many_waits) {
    store st = {0};
    store_waits ws = {0};
    bool now;
    char key[32];
    for (size_t i = 0; i < DDP_MAX_STORE_WAITERS; i++) {
        const char *keys[DDP_MAX_STORE_WAIT_KEYS + 1] = {NULL};
        char names[DDP_MAX_STORE_WAIT_KEYS][32];
        for (size_t k = 0; k < DDP_MAX_STORE_WAIT_KEYS; k++) {
            snprintf(names[k], sizeof(names[k]), "w%zu-k%zu", i, k);
            keys[k] = names[k];
        }
        ck_assert_int_eq(store_waits_add(&ws, &st, wait_on(i, keys), &now), 0);
    }
    ck_assert_uint_eq(ws.by_key.size, (size_t)DDP_MAX_STORE_WAITERS * DDP_MAX_STORE_WAIT_KEYS);
    char ready[64];
    for (size_t k = 0; k < DDP_MAX_STORE_WAIT_KEYS; k++) {
        snprintf(key, sizeof(key), "w17-k%zu", k);
        set(&st, &ws, key, ready, sizeof(ready));
        ck_assert_str_eq(ready, k + 1 == DDP_MAX_STORE_WAIT_KEYS ? "17" : "");
    }
    ck_assert_uint_eq(ws.n, DDP_MAX_STORE_WAITERS - 1);
    store_waits_clear(&ws);
    store_clear(&st);
}
END_TEST

int main(int argc, char **argv) {
    Suite *s = suite_create("store_waits");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_strmap);
    tcase_add_test(tc, test_strmap_crafted_keys);
    tcase_add_test(tc, test_waits);
    tcase_add_test(tc, test_many_waits);
    suite_add_tcase(s, tc);
    return check_main(s, argc, argv);
}
