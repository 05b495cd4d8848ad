/* What a rank's shared segment holds: a header page, then its staging buffer. Every rank
 * reads its peers' headers by this layout (and so does the test that plays a member that
 * posts what it never shared). */
#pragma once
#include <stdatomic.h>
#include <stdint.h>

#include "worker/libddp/shm.h"

#define SHM_HEADER_BYTES 4096
#define SHM_SEGMENT_BYTES (SHM_HEADER_BYTES + SHM_BUFFER_BYTES)

/* The collective a segment's owner is in, as it called it: its peers check theirs against
 * it (a rank that called something else is caught, not fed garbage). Where its input lies
 * in one of its regions (ddp_alloc), the peers read it there: at offset of region, which
 * they check against what the owner shared before they read a byte. */
typedef struct {
    uint64_t seq, count;
    uint32_t kind, dtype, op;
    int32_t root;
    int32_t region;  /* the input's region, by id; -1: copied into the staging buffer */
    uint64_t offset; /* the input's first byte in it */
} shm_call;

/* What a segment's owner posts; alone on its cache line, as every rank polls it. */
typedef struct {
    _Atomic uint64_t posted;   /* the last phase the owner finished */
    _Atomic uint32_t word;     /* (uint32_t)posted, for FUTEX_WAIT */
    _Atomic uint32_t sleepers; /* ranks asleep on word */
    shm_call call;             /* written before the collective's first post: the post publishes it */
} __attribute__((aligned(64))) shm_head;

_Static_assert(sizeof(shm_head) <= SHM_HEADER_BYTES, "the header fits its page");
