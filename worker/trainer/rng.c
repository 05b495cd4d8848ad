#include "worker/trainer/rng.h"

#define RNG_GOLDEN 0x9e3779b97f4a7c15ull

uint64_t rng_mix(uint64_t x) {
    uint64_t z = x + RNG_GOLDEN;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void rng_seed(rng *r, uint64_t key) {
    for (uint64_t i = 0; i < 4; i++)
        r->s[i] = rng_mix(key + i * RNG_GOLDEN);
}

static uint64_t rotl(uint64_t x, int k) {
    return (x << k) | (x >> (64 - k));
}

uint64_t rng_next(rng *r) {
    uint64_t *s = r->s, result = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

uint64_t rng_bounded(rng *r, uint64_t m) {
    /* values below t would make the low residues likelier */
    uint64_t t = (0 - m) % m, x;
    do
        x = rng_next(r);
    while (x < t);
    return x % m;
}

float rng_float(rng *r) {
    return (float)(rng_next(r) >> 40) * 0x1p-24f;
}
