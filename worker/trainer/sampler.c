#include "worker/trainer/sampler.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/limits.h"
#include "worker/trainer/rng.h"

/* The streams' domains: one key space each, so no two streams share their numbers. */
enum { SAMPLER_STREAM_PARTITION = 1, SAMPLER_STREAM_PARTITION_EPOCH = 2, SAMPLER_STREAM_GLOBAL_EPOCH = 3 };

/* Everything below is written down in sampler.h; keep the two in step. */
static uint64_t sampler_key(uint64_t seed, const uint64_t *words, size_t n_words) {
    uint64_t h = rng_mix(seed);
    for (size_t i = 0; i < n_words; i++)
        h = rng_mix(h ^ words[i]);
    return h;
}

static void sampler_shuffle(uint32_t *a, size_t len, uint64_t key) {
    rng st;
    rng_seed(&st, key);
    for (size_t i = len; i-- > 1;) {
        size_t j = (size_t)rng_bounded(&st, (uint64_t)i + 1);
        uint32_t tmp = a[i];
        a[i] = a[j];
        a[j] = tmp;
    }
}

int sampler_init(sampler *s, sampler_kind kind, size_t n, int rank, int world, size_t global_batch, uint64_t seed,
                 char *err, size_t err_size) {
    memset(s, 0, sizeof(*s));
    if (kind != SAMPLER_PARTITION && kind != SAMPLER_GLOBAL) {
        snprintf(err, err_size, "unknown sampler kind %d", (int)kind);
        return -EINVAL;
    }
    if (n == 0 || n > UINT32_MAX) {
        snprintf(err, err_size, "%zu samples: the sampler takes 1 to %u", n, UINT32_MAX);
        return -EINVAL;
    }
    if (world < 1 || world > DDP_MAX_WORLD_SIZE) {
        snprintf(err, err_size, "world size %d is not in [1, %d]", world, DDP_MAX_WORLD_SIZE);
        return -EINVAL;
    }
    if (rank < 0 || rank >= world) {
        snprintf(err, err_size, "rank %d is not in [0, %d)", rank, world);
        return -EINVAL;
    }
    if (global_batch == 0) {
        snprintf(err, err_size, "global batch 0: it must be at least 1");
        return -EINVAL;
    }
    if (global_batch % (size_t)world != 0) {
        snprintf(err, err_size, "global batch %zu does not split evenly over %d workers", global_batch, world);
        return -EINVAL;
    }
    if ((size_t)world > n) {
        snprintf(err, err_size, "%zu samples cannot be shared by %d workers", n, world);
        return -EINVAL;
    }
    size_t local_batch = global_batch / (size_t)world;
    size_t order_size = kind == SAMPLER_PARTITION ? n / (size_t)world : n;
    if (kind == SAMPLER_PARTITION && local_batch > order_size) {
        snprintf(err, err_size,
                 "per-worker batch %zu (global batch %zu over %d workers) exceeds the %zu samples of each worker's "
                 "shard",
                 local_batch, global_batch, world, order_size);
        return -EINVAL;
    }
    if (kind == SAMPLER_GLOBAL && global_batch > n) {
        snprintf(err, err_size, "global batch %zu exceeds the %zu samples", global_batch, n);
        return -EINVAL;
    }

    s->kind = kind;
    s->n = n;
    s->rank = rank;
    s->world = world;
    s->global_batch = global_batch;
    s->local_batch = local_batch;
    s->seed = seed;
    s->order_size = order_size;
    s->steps = kind == SAMPLER_PARTITION ? order_size / local_batch : n / global_batch;
    s->order = malloc(order_size * sizeof(*s->order));
    if (!s->order)
        goto oom;

    if (kind == SAMPLER_PARTITION) {
        /* Every rank makes the same one-time permutation and keeps its own cut of it. */
        uint32_t *all = malloc(n * sizeof(*all));
        s->shard = malloc(order_size * sizeof(*s->shard));
        if (!all || !s->shard) {
            free(all);
            goto oom;
        }
        for (size_t i = 0; i < n; i++)
            all[i] = (uint32_t)i;
        uint64_t words[] = {SAMPLER_STREAM_PARTITION};
        sampler_shuffle(all, n, sampler_key(seed, words, 1));
        memcpy(s->shard, all + (size_t)rank * order_size, order_size * sizeof(*s->shard));
        free(all);
    }
    sampler_set_epoch(s, 0);
    return 0;
oom:
    sampler_free(s);
    snprintf(err, err_size, "out of memory for a sampler of %zu samples", n);
    return -ENOMEM;
}

void sampler_free(sampler *s) {
    if (!s)
        return;
    free(s->shard);
    free(s->order);
    memset(s, 0, sizeof(*s));
}

size_t sampler_steps_per_epoch(const sampler *s) {
    return s->steps;
}

void sampler_set_epoch(sampler *s, uint64_t epoch) {
    s->epoch = epoch;
    /* From the shard as cut (or the identity), never from the last epoch's order. */
    if (s->kind == SAMPLER_PARTITION) {
        memcpy(s->order, s->shard, s->order_size * sizeof(*s->order));
        uint64_t words[] = {SAMPLER_STREAM_PARTITION_EPOCH, epoch, (uint64_t)s->rank};
        sampler_shuffle(s->order, s->order_size, sampler_key(s->seed, words, 3));
    } else {
        for (size_t i = 0; i < s->order_size; i++)
            s->order[i] = (uint32_t)i;
        uint64_t words[] = {SAMPLER_STREAM_GLOBAL_EPOCH, epoch};
        sampler_shuffle(s->order, s->order_size, sampler_key(s->seed, words, 2));
    }
}

const uint32_t *sampler_batch(const sampler *s, size_t step, size_t *ret_count) {
    if (step >= s->steps) {
        *ret_count = 0;
        return NULL;
    }
    *ret_count = s->local_batch;
    if (s->kind == SAMPLER_PARTITION)
        return s->order + step * s->local_batch;
    return s->order + step * s->global_batch + (size_t)s->rank * s->local_batch;
}

static const char *const sampler_kind_names[] = {[SAMPLER_PARTITION] = "partition", [SAMPLER_GLOBAL] = "global"};

int sampler_kind_from_string(const char *name, sampler_kind *ret) {
    for (size_t k = 0; name && k < sizeof(sampler_kind_names) / sizeof(sampler_kind_names[0]); k++)
        if (strcmp(name, sampler_kind_names[k]) == 0) {
            *ret = (sampler_kind)k;
            return 0;
        }
    return -EINVAL;
}

const char *sampler_kind_name(sampler_kind kind) {
    if ((unsigned)kind >= sizeof(sampler_kind_names) / sizeof(sampler_kind_names[0]))
        return "unknown";
    return sampler_kind_names[kind];
}
