/* The trainer's random numbers, the same bits on every machine and run (sampler.h writes
 * the recipe out in full): xoshiro256** (Blackman and Vigna) whose state is four
 * SplitMix64 outputs of a key. Used for the data order and the initial parameters. */
#pragma once
#include <stdint.h>

typedef struct {
    uint64_t s[4];
} rng;

/* One SplitMix64 output for state x (Steele, Lea and Flood). */
uint64_t rng_mix(uint64_t x);
/* s[i] = rng_mix(key + i * 0x9e3779b97f4a7c15), i = 0..3 */
void rng_seed(rng *r, uint64_t key);
uint64_t rng_next(rng *r);
/* Uniform in [0, m), m >= 1, by rejection: no value favoured. */
uint64_t rng_bounded(rng *r, uint64_t m);
/* Uniform in [0, 1), 24 random bits. */
float rng_float(rng *r);
