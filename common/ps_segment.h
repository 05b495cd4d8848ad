/* The layout of ps mode's shared segments, for ddpd (server/ps_shm.h) and the ranks on its
 * host (worker/libddp/ps_client.c): every bucket's floats in the job's layout order, then
 * one counter per bucket. In a rank's push segment the counter says how many pushes of
 * the bucket the rank has made (it rings ddpd's doorbell after raising it); in ddpd's
 * average segment, how many averages ddpd has written there, and the ranks sleep on it. */
#pragma once
#include <stddef.h>

#include "common/shm_flag.h"

typedef struct {
    _Atomic uint64_t count;
    _Atomic uint32_t word, sleepers;
} ps_counter;

#define PS_SEGMENT_ALIGN 64 /* the counters start on a cache line of their own */

static inline size_t ps_segment_floats_end(size_t float_bytes) {
    return (float_bytes + PS_SEGMENT_ALIGN - 1) / PS_SEGMENT_ALIGN * PS_SEGMENT_ALIGN;
}

/* The size of either segment, for float_bytes of buckets in n_buckets. */
static inline size_t ps_segment_bytes(size_t float_bytes, size_t n_buckets) {
    return ps_segment_floats_end(float_bytes) + n_buckets * sizeof(ps_counter);
}

/* Bucket's counter in segment (mapped, of ps_segment_bytes(float_bytes, ...)). */
static inline shm_flag ps_segment_counter(char *segment, size_t float_bytes, size_t bucket) {
    ps_counter *c = (ps_counter *)(segment + ps_segment_floats_end(float_bytes)) + bucket;
    return (shm_flag){&c->count, &c->word, &c->sleepers};
}
