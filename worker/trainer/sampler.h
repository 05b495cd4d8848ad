/* Which training samples each rank takes at each step. Everything follows from (seed,
 * epoch, rank, world): the same bits on every machine and run, and an epoch's order is
 * rebuilt from scratch by sampler_set_epoch(), so a checkpoint that stores the seed and the
 * epoch resumes bit for bit.
 *
 * SAMPLER_PARTITION (the default), like the PyTorch tutorial's DataPartitioner: the n
 * indices are shuffled once, cut into `world` contiguous shards of floor(n/world) (the
 * remainder is dropped), and rank r keeps shard r. Each epoch rank r's shard is reshuffled;
 * step s takes local positions [s*b, (s+1)*b) of it, b = global_batch/world, and an epoch
 * has floor(shard/b) steps.
 *
 * SAMPLER_GLOBAL: each epoch all n indices are shuffled the same way on every rank (the
 * stream depends on seed and epoch, not on rank or world). Global batch s is positions
 * [s*B, (s+1)*B) of that order and rank r takes its r-th slice of b = B/world; an epoch has
 * floor(n/B) steps. The same seed thus trains on the same global batches whatever the
 * world size.
 *
 * The random numbers, written down so that anyone can reproduce them:
 *  - mix(x): one SplitMix64 output for state x (Steele, Lea and Flood):
 *      z = x + 0x9e3779b97f4a7c15; z = (z ^ z >> 30) * 0xbf58476d1ce4e5b9;
 *      z = (z ^ z >> 27) * 0x94d049bb133111eb; return z ^ z >> 31.
 *  - key(seed, w1, ..., wk): h = mix(seed); then h = mix(h ^ wi) for each word in turn.
 *    Streams: the partition's one-time shuffle key(seed, 1); a partition epoch
 *    key(seed, 2, epoch, rank); a global epoch key(seed, 3, epoch).
 *  - A stream is xoshiro256** (Blackman and Vigna) whose state is the first four outputs
 *    of SplitMix64 started at the key: s[i] = mix(key + i * 0x9e3779b97f4a7c15), i = 0..3.
 *    Each draw: x = rotl(s[1] * 5, 7) * 9; t = s[1] << 17; s[2] ^= s[0]; s[3] ^= s[1];
 *    s[1] ^= s[2]; s[0] ^= s[3]; s[2] ^= t; s[3] = rotl(s[3], 45); return x.
 *  - bounded(m), uniform in [0, m): t = (2^64 - m) mod m; draw x until x >= t; return
 *    x mod m. The accepted range is a multiple of m long, so no value is favoured.
 *  - shuffle(a[0..len)): Fisher-Yates from the top, for i = len-1 down to 1:
 *    j = bounded(i + 1), swap a[i] and a[j]. The partition shuffles [0, 1, ..., n-1] once,
 *    then each epoch shuffles rank r's shard as it was cut; a global epoch shuffles
 *    [0, 1, ..., n-1]. */
#pragma once
#include <stddef.h>
#include <stdint.h>

typedef enum { SAMPLER_PARTITION = 0, SAMPLER_GLOBAL = 1 } sampler_kind;

typedef struct {
    sampler_kind kind;
    size_t n; /* samples in the dataset */
    int rank, world;
    size_t global_batch, local_batch; /* local = global / world */
    uint64_t seed, epoch;
    size_t steps;      /* per epoch */
    size_t order_size; /* partition: the shard; global: n */
    uint32_t *shard;   /* partition: (order_size) this rank's shard as cut; global: NULL */
    uint32_t *order;   /* (order_size) this epoch's order */
} sampler;

/* Returns 0, or -EINVAL with err saying what is wrong ("global batch 128 does not split
 * evenly over 3 workers", more workers than samples, a batch larger than a shard), or
 * -ENOMEM. Starts at epoch 0. */
int sampler_init(sampler *s, sampler_kind kind, size_t n, int rank, int world, size_t global_batch, uint64_t seed,
                 char *err, size_t err_size);
void sampler_free(sampler *s);

size_t sampler_steps_per_epoch(const sampler *s);
/* Rebuilds the epoch's order from (seed, epoch) alone; any epoch, in any order. */
void sampler_set_epoch(sampler *s, uint64_t epoch);
/* The dataset indices this rank trains on at step (local_batch of them), valid until the
 * next sampler_set_epoch(); NULL and a count of 0 for a step past the epoch. */
const uint32_t *sampler_batch(const sampler *s, size_t step, size_t *ret_count);

/* "partition" or "global"; -EINVAL for anything else. */
int sampler_kind_from_string(const char *name, sampler_kind *ret);
const char *sampler_kind_name(sampler_kind kind);
