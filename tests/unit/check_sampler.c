/* worker/trainer/sampler.c: which samples each rank trains on, per step and epoch. */
#include <check.h>
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/limits.h"
#include "worker/trainer/sampler.h"
#include "tests/check_main.h"

static char err[512];

static void init_ok(sampler *s, sampler_kind kind, size_t n, int rank, int world, size_t global_batch, uint64_t seed) {
    int r = sampler_init(s, kind, n, rank, world, global_batch, seed, err, sizeof(err));
    ck_assert_msg(r == 0, "sampler_init: %d: %s", r, err);
}

/* The indices of a whole epoch, step after step: steps * local_batch of them. */
static uint32_t *epoch_indices(const sampler *s, size_t *ret_count) {
    size_t steps = sampler_steps_per_epoch(s), total = 0;
    uint32_t *all = malloc((steps * s->local_batch + 1) * sizeof(*all));
    for (size_t step = 0; step < steps; step++) {
        size_t count = 0;
        const uint32_t *batch = sampler_batch(s, step, &count);
        ck_assert_ptr_nonnull(batch);
        ck_assert_uint_eq(count, s->local_batch);
        memcpy(all + total, batch, count * sizeof(*all));
        total += count;
    }
    *ret_count = total;
    return all;
}

static int compare_u32(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

static uint32_t *sorted_copy(const uint32_t *a, size_t n) {
    uint32_t *c = malloc((n + 1) * sizeof(*c));
    memcpy(c, a, n * sizeof(*c));
    qsort(c, n, sizeof(*c), compare_u32);
    return c;
}

/* The epoch's whole order: the shard (partition) or all n (global). */
static uint32_t *order_copy(const sampler *s) {
    uint32_t *c = malloc((s->order_size + 1) * sizeof(*c));
    memcpy(c, s->order, s->order_size * sizeof(*c));
    return c;
}

/* core */

/* Shards are equal, disjoint, within [0, n), and every batch is a run of the shard's order. */
START_TEST(test_partition_shards) {
    enum { N = 103, WORLD = 4, BATCH = 8 };
    bool seen[N] = {false};
    size_t covered = 0;
    for (int rank = 0; rank < WORLD; rank++) {
        sampler s;
        init_ok(&s, SAMPLER_PARTITION, N, rank, WORLD, BATCH, 7);
        ck_assert_uint_eq(s.order_size, N / WORLD);
        ck_assert_uint_eq(s.local_batch, BATCH / WORLD);
        ck_assert_uint_eq(sampler_steps_per_epoch(&s), (N / WORLD) / (BATCH / WORLD));
        for (size_t i = 0; i < s.order_size; i++) {
            uint32_t idx = s.order[i];
            ck_assert_uint_lt(idx, N);
            ck_assert_msg(!seen[idx], "index %u in two shards (or twice in one)", idx);
            seen[idx] = true;
            covered++;
        }
        size_t count;
        uint32_t *batches = epoch_indices(&s, &count);
        ck_assert_uint_eq(count, 12 * 2);
        ck_assert_mem_eq(batches, s.order, count * sizeof(uint32_t));
        free(batches);
        sampler_free(&s);
        ck_assert_ptr_null(s.order);
    }
    ck_assert_uint_eq(covered, (N / WORLD) * WORLD); /* the remainder of 3 is dropped */
}
END_TEST

/* Each epoch reshuffles the shard: another order, the same set; any epoch can be rebuilt. */
START_TEST(test_partition_epochs) {
    sampler s, again, other_seed;
    init_ok(&s, SAMPLER_PARTITION, 1000, 2, 3, 30, 99);
    init_ok(&again, SAMPLER_PARTITION, 1000, 2, 3, 30, 99);
    init_ok(&other_seed, SAMPLER_PARTITION, 1000, 2, 3, 30, 100);
    size_t shard = s.order_size;
    ck_assert_uint_eq(shard, 333);

    uint32_t *epoch0 = order_copy(&s), *sorted0 = sorted_copy(s.order, shard);
    ck_assert_mem_eq(again.order, epoch0, shard * sizeof(uint32_t)); /* same seed, same order */
    uint32_t *other_sorted = sorted_copy(other_seed.order, shard);
    ck_assert_int_ne(memcmp(other_sorted, sorted0, shard * sizeof(uint32_t)), 0); /* another seed, another shard */
    free(other_sorted);

    for (uint64_t epoch = 1; epoch <= 3; epoch++) {
        sampler_set_epoch(&s, epoch);
        ck_assert_uint_eq(s.epoch, epoch);
        ck_assert_int_ne(memcmp(s.order, epoch0, shard * sizeof(uint32_t)), 0);
        uint32_t *sorted = sorted_copy(s.order, shard);
        ck_assert_mem_eq(sorted, sorted0, shard * sizeof(uint32_t));
        free(sorted);
    }
    /* Epoch 3 straight from epoch 0 equals epoch 3 reached through 1 and 2; back to 0 too. */
    uint32_t *epoch3 = order_copy(&s);
    sampler_set_epoch(&again, 3);
    ck_assert_mem_eq(again.order, epoch3, shard * sizeof(uint32_t));
    sampler_set_epoch(&s, 0);
    ck_assert_mem_eq(s.order, epoch0, shard * sizeof(uint32_t));

    free(epoch0);
    free(epoch3);
    free(sorted0);
    sampler_free(&s);
    sampler_free(&again);
    sampler_free(&other_seed);
}
END_TEST

/* Ranks shuffle their shards with their own streams: rank 0 and rank 1 do not move alike. */
START_TEST(test_partition_ranks_independent) {
    sampler a, b;
    init_ok(&a, SAMPLER_PARTITION, 200, 0, 2, 10, 5);
    init_ok(&b, SAMPLER_PARTITION, 200, 1, 2, 10, 5);
    uint32_t *a0 = order_copy(&a), *b0 = order_copy(&b);
    sampler_set_epoch(&a, 1);
    sampler_set_epoch(&b, 1);
    /* Where each position's element moved to, in one rank and the other. */
    size_t same_moves = 0;
    for (size_t i = 0; i < a.order_size; i++) {
        size_t pa = 0, pb = 0;
        while (a.order[pa] != a0[i])
            pa++;
        while (b.order[pb] != b0[i])
            pb++;
        same_moves += pa == pb;
    }
    ck_assert_uint_lt(same_moves, 10);
    free(a0);
    free(b0);
    sampler_free(&a);
    sampler_free(&b);
}
END_TEST

/* The same seed trains on the same global batches at world 1, 2 and 4: the ranks' slices,
 * in rank order, are the single rank's batch. */
START_TEST(test_global_world_equivalence) {
    enum { N = 1000, BATCH = 64 };
    const uint64_t epochs[] = {0, 1, 7};
    for (size_t e = 0; e < 3; e++) {
        sampler one;
        init_ok(&one, SAMPLER_GLOBAL, N, 0, 1, BATCH, 1234);
        sampler_set_epoch(&one, epochs[e]);
        ck_assert_uint_eq(sampler_steps_per_epoch(&one), N / BATCH);
        const int worlds[] = {2, 4};
        for (int w = 0; w < 2; w++) {
            int world = worlds[w];
            sampler ranks[4];
            for (int r = 0; r < world; r++) {
                init_ok(&ranks[r], SAMPLER_GLOBAL, N, r, world, BATCH, 1234);
                sampler_set_epoch(&ranks[r], epochs[e]);
                ck_assert_uint_eq(sampler_steps_per_epoch(&ranks[r]), N / BATCH);
            }
            for (size_t step = 0; step < N / BATCH; step++) {
                size_t count;
                const uint32_t *whole = sampler_batch(&one, step, &count);
                ck_assert_uint_eq(count, BATCH);
                uint32_t joined[BATCH];
                size_t filled = 0;
                for (int r = 0; r < world; r++) {
                    const uint32_t *slice = sampler_batch(&ranks[r], step, &count);
                    ck_assert_uint_eq(count, BATCH / world);
                    memcpy(joined + filled, slice, count * sizeof(uint32_t));
                    filled += count;
                }
                ck_assert_uint_eq(filled, BATCH);
                ck_assert_msg(memcmp(joined, whole, sizeof(joined)) == 0, "epoch %llu world %d step %zu differs",
                              (unsigned long long)epochs[e], world, step);
            }
            for (int r = 0; r < world; r++)
                sampler_free(&ranks[r]);
        }
        sampler_free(&one);
    }
}
END_TEST

/* A global epoch is a permutation of all n; the next epoch is another one. */
START_TEST(test_global_epochs) {
    enum { N = 500 };
    sampler s;
    init_ok(&s, SAMPLER_GLOBAL, N, 1, 2, 50, 3);
    uint32_t *epoch0 = order_copy(&s);
    uint32_t *sorted = sorted_copy(s.order, N);
    for (uint32_t i = 0; i < N; i++)
        ck_assert_uint_eq(sorted[i], i);
    free(sorted);
    sampler_set_epoch(&s, 1);
    ck_assert_int_ne(memcmp(s.order, epoch0, N * sizeof(uint32_t)), 0);
    sampler_set_epoch(&s, 0);
    ck_assert_mem_eq(s.order, epoch0, N * sizeof(uint32_t));
    free(epoch0);
    sampler_free(&s);
}
END_TEST

/* The numbers written down in sampler.h, computed apart from this code (a Python transcription
 * of the header; its SplitMix64 gives Rosetta Code's 6457827717110365317, ... for 1234567). */
START_TEST(test_golden) {
    sampler s;
    size_t count;
    init_ok(&s, SAMPLER_PARTITION, 20, 1, 2, 6, 2024);
    const uint32_t partition_e0[3][3] = {{14, 10, 18}, {11, 12, 6}, {9, 15, 4}};
    const uint32_t partition_e3[3][3] = {{14, 9, 18}, {19, 10, 11}, {6, 15, 12}};
    ck_assert_uint_eq(sampler_steps_per_epoch(&s), 3);
    for (size_t step = 0; step < 3; step++)
        ck_assert_mem_eq(sampler_batch(&s, step, &count), partition_e0[step], sizeof(partition_e0[step]));
    sampler_set_epoch(&s, 3);
    for (size_t step = 0; step < 3; step++)
        ck_assert_mem_eq(sampler_batch(&s, step, &count), partition_e3[step], sizeof(partition_e3[step]));
    sampler_free(&s);

    init_ok(&s, SAMPLER_GLOBAL, 20, 2, 4, 8, 2024);
    sampler_set_epoch(&s, 5);
    const uint32_t global_e5[2][2] = {{13, 3}, {19, 4}};
    ck_assert_uint_eq(sampler_steps_per_epoch(&s), 2);
    for (size_t step = 0; step < 2; step++)
        ck_assert_mem_eq(sampler_batch(&s, step, &count), global_e5[step], sizeof(global_e5[step]));
    sampler_free(&s);

    init_ok(&s, SAMPLER_GLOBAL, 1000, 0, 1, 1000, 0xdeadbeefcafef00dull);
    sampler_set_epoch(&s, 123456789);
    const uint32_t big[8] = {75, 5, 404, 740, 392, 465, 668, 206};
    ck_assert_mem_eq(sampler_batch(&s, 0, &count), big, sizeof(big));
    sampler_free(&s);
}
END_TEST

/* Fisher-Yates with unbiased draws: all 6 orders of 3 come up alike over 6000 epochs. */
START_TEST(test_uniform_orders) {
    sampler s;
    init_ok(&s, SAMPLER_GLOBAL, 3, 0, 1, 3, 11);
    size_t counts[27] = {0};
    for (uint64_t epoch = 0; epoch < 6000; epoch++) {
        sampler_set_epoch(&s, epoch);
        counts[s.order[0] * 9 + s.order[1] * 3 + s.order[2]]++;
    }
    const int perms[6] = {0 * 9 + 1 * 3 + 2, 0 * 9 + 2 * 3 + 1, 1 * 9 + 0 * 3 + 2,
                          1 * 9 + 2 * 3 + 0, 2 * 9 + 0 * 3 + 1, 2 * 9 + 1 * 3 + 0};
    size_t total = 0;
    for (int p = 0; p < 6; p++) {
        /* 1000 expected, standard deviation about 29: 5 of them either way */
        ck_assert_msg(counts[perms[p]] > 855 && counts[perms[p]] < 1145, "order %d came up %zu times", perms[p],
                      counts[perms[p]]);
        total += counts[perms[p]];
    }
    ck_assert_uint_eq(total, 6000);
    sampler_free(&s);
}
END_TEST

START_TEST(test_steps_and_past_the_end) {
    sampler s;
    init_ok(&s, SAMPLER_PARTITION, 60000, 1, 3, 96, 0);
    ck_assert_uint_eq(sampler_steps_per_epoch(&s), 625); /* shard 20000, batch 32 */
    size_t count = 99;
    ck_assert_ptr_null(sampler_batch(&s, 625, &count));
    ck_assert_uint_eq(count, 0);
    ck_assert_ptr_nonnull(sampler_batch(&s, 624, &count));
    ck_assert_uint_eq(count, 32);
    sampler_free(&s);

    init_ok(&s, SAMPLER_PARTITION, 10, 2, 3, 6, 0);
    ck_assert_uint_eq(sampler_steps_per_epoch(&s), 1); /* shard 3, batch 2: the last one dropped */
    sampler_free(&s);
    init_ok(&s, SAMPLER_GLOBAL, 10, 2, 3, 3, 0);
    ck_assert_uint_eq(sampler_steps_per_epoch(&s), 3);
    ck_assert_ptr_null(sampler_batch(&s, 3, &count));
    sampler_free(&s);
}
END_TEST

START_TEST(test_kind_strings) {
    sampler_kind k = SAMPLER_GLOBAL;
    ck_assert_int_eq(sampler_kind_from_string("partition", &k), 0);
    ck_assert_int_eq(k, SAMPLER_PARTITION);
    ck_assert_int_eq(sampler_kind_from_string("global", &k), 0);
    ck_assert_int_eq(k, SAMPLER_GLOBAL);
    ck_assert_int_eq(sampler_kind_from_string("Global", &k), -EINVAL);
    ck_assert_int_eq(sampler_kind_from_string("", &k), -EINVAL);
    ck_assert_int_eq(sampler_kind_from_string(NULL, &k), -EINVAL);
    ck_assert_str_eq(sampler_kind_name(SAMPLER_PARTITION), "partition");
    ck_assert_str_eq(sampler_kind_name(SAMPLER_GLOBAL), "global");
    ck_assert_str_eq(sampler_kind_name((sampler_kind)9), "unknown");
}
END_TEST

/* limits */

START_TEST(test_edges_accepted) {
    sampler s;
    size_t count;
    /* As many workers as samples: one each. */
    init_ok(&s, SAMPLER_PARTITION, 5, 4, 5, 5, 1);
    ck_assert_uint_eq(sampler_steps_per_epoch(&s), 1);
    ck_assert_uint_eq(*sampler_batch(&s, 0, &count), s.order[0]);
    ck_assert_uint_eq(count, 1);
    sampler_free(&s);
    /* A batch as large as the shard, or as the whole set. */
    init_ok(&s, SAMPLER_PARTITION, 10, 0, 2, 10, 1);
    ck_assert_uint_eq(sampler_steps_per_epoch(&s), 1);
    sampler_free(&s);
    init_ok(&s, SAMPLER_GLOBAL, 10, 1, 2, 10, 1);
    ck_assert_uint_eq(sampler_steps_per_epoch(&s), 1);
    sampler_free(&s);
    /* One sample. */
    init_ok(&s, SAMPLER_GLOBAL, 1, 0, 1, 1, 1);
    ck_assert_uint_eq(*sampler_batch(&s, 0, &count), 0);
    sampler_free(&s);
    /* The largest world. */
    init_ok(&s, SAMPLER_PARTITION, 60000, DDP_MAX_WORLD_SIZE - 1, DDP_MAX_WORLD_SIZE, DDP_MAX_WORLD_SIZE, 1);
    ck_assert_uint_eq(s.order_size, 60000 / DDP_MAX_WORLD_SIZE);
    sampler_free(&s);
    /* The largest IDX file's worth of samples. */
    init_ok(&s, SAMPLER_PARTITION, 10000000, 3, 8, 1024, 1);
    ck_assert_uint_eq(sampler_steps_per_epoch(&s), 1250000 / 128);
    sampler_free(&s);
}
END_TEST

/* malformed */

static const struct {
    sampler_kind kind;
    size_t n;
    int rank, world;
    size_t global_batch;
    const char *expected;
} bad_inputs[] = {
    {SAMPLER_PARTITION, 60000, 0, 3, 128, "global batch 128 does not split evenly over 3 workers"},
    {SAMPLER_GLOBAL, 60000, 2, 3, 128, "global batch 128 does not split evenly over 3 workers"},
    {SAMPLER_PARTITION, 3, 0, 4, 4, "3 samples cannot be shared by 4 workers"},
    {SAMPLER_GLOBAL, 3, 0, 4, 4, "3 samples cannot be shared by 4 workers"},
    {SAMPLER_PARTITION, 10, 0, 2, 12,
     "per-worker batch 6 (global batch 12 over 2 workers) exceeds the 5 samples of each worker's shard"},
    {SAMPLER_GLOBAL, 10, 0, 2, 12, "global batch 12 exceeds the 10 samples"},
    {SAMPLER_PARTITION, 10, 0, 1, 0, "global batch 0: it must be at least 1"},
    {SAMPLER_PARTITION, 0, 0, 1, 1, "0 samples: the sampler takes 1 to 4294967295"},
    {SAMPLER_PARTITION, 10, 2, 2, 2, "rank 2 is not in [0, 2)"},
    {SAMPLER_PARTITION, 10, -1, 2, 2, "rank -1 is not in [0, 2)"},
    {SAMPLER_GLOBAL, 10, 0, 0, 2, "world size 0 is not in [1, 1024]"},
    {SAMPLER_GLOBAL, 100000, 0, DDP_MAX_WORLD_SIZE + 1, 1025, "world size 1025 is not in [1, 1024]"},
    {(sampler_kind)2, 10, 0, 1, 1, "unknown sampler kind 2"},
};

START_TEST(test_bad_input) {
    sampler s;
    memset(&s, 0xff, sizeof(s));
    int r = sampler_init(&s, bad_inputs[_i].kind, bad_inputs[_i].n, bad_inputs[_i].rank, bad_inputs[_i].world,
                         bad_inputs[_i].global_batch, 1, err, sizeof(err));
    ck_assert_int_eq(r, -EINVAL);
    ck_assert_msg(strcmp(err, bad_inputs[_i].expected) == 0, "case %d: expected '%s', got '%s'", _i,
                  bad_inputs[_i].expected, err);
    ck_assert_ptr_null(s.order);
    ck_assert_ptr_null(s.shard);
    sampler_free(&s); /* harmless after a failure */
}
END_TEST

START_TEST(test_too_many_samples) {
    if (sizeof(size_t) <= 4)
        return;
    sampler s;
    size_t n = (size_t)UINT32_MAX + 1;
    ck_assert_int_eq(sampler_init(&s, SAMPLER_GLOBAL, n, 0, 1, 1, 1, err, sizeof(err)), -EINVAL);
    ck_assert_str_eq(err, "4294967296 samples: the sampler takes 1 to 4294967295");
}
END_TEST

int main(int argc, char **argv) {
    Suite *s = suite_create("sampler");
    TCase *core = tcase_create("core"), *limits = tcase_create("limits"), *bad = tcase_create("malformed");
    TCase *all[] = {core, limits, bad};
    for (int i = 0; i < 3; i++) {
        tcase_set_timeout(all[i], 60);
        suite_add_tcase(s, all[i]);
    }
    tcase_add_test(core, test_partition_shards);
    tcase_add_test(core, test_partition_epochs);
    tcase_add_test(core, test_partition_ranks_independent);
    tcase_add_test(core, test_global_world_equivalence);
    tcase_add_test(core, test_global_epochs);
    tcase_add_test(core, test_golden);
    tcase_add_test(core, test_uniform_orders);
    tcase_add_test(core, test_steps_and_past_the_end);
    tcase_add_test(core, test_kind_strings);
    tcase_add_test(limits, test_edges_accepted);
    tcase_add_loop_test(bad, test_bad_input, 0, (int)(sizeof(bad_inputs) / sizeof(bad_inputs[0])));
    tcase_add_test(bad, test_too_many_samples);
    return check_main(s, argc, argv);
}
