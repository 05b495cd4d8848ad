/* What a rank's shared segment holds: a header page, its staging buffer, then one mailbox
 * per rank for the point-to-point messages it sends that rank. Every rank reads its
 * peers' segments by this layout (and so does the test that plays a member that posts
 * what it never shared). */
#pragma once
#include <stdatomic.h>
#include <stdint.h>

#include "worker/libddp/shm.h"

#define SHM_HEADER_BYTES 4096

/* The collective a segment's owner is in, as it called it: its peers check theirs against
 * it (a rank that called something else is caught, not fed garbage). Where its input lies
 * in one of its regions (ddp_alloc), the peers read it there: at offset of region, which
 * they check against what the owner shared before they read a byte. */
typedef struct {
    uint64_t seq, count;
    uint32_t kind, dtype, op;
    int32_t root;
    int32_t region;    /* the input's region, by id; -1: copied into the staging buffer */
    uint32_t in_place; /* the input is the output too (ddp_all_reduce's buffer) */
    uint64_t offset;   /* the input's first byte in it */
} shm_call;

/* What a segment's owner posts; alone on its cache line, as every rank polls it. And on
 * a line of its own, written only when a call fails: the call's number, so that a peer
 * that comes late does not complete it with the input the owner left posted (and may
 * since have overwritten). */
typedef struct {
    _Atomic uint64_t posted;   /* the last phase the owner finished */
    _Atomic uint32_t word;     /* (uint32_t)posted, for FUTEX_WAIT */
    _Atomic uint32_t sleepers; /* ranks asleep on word */
    /* The owner's collectives through the segment, the n-th in calls[n & 1]: each written
     * before the call's first post, which publishes it, and kept through the next call, so
     * that a peer that read none of it then (a broadcast's root waits for no one) can
     * check it at its next call while the owner writes that one's. */
    shm_call calls[2];
    _Atomic uint64_t gave_up __attribute__((aligned(64))); /* the call it failed in; 0: none */
} __attribute__((aligned(64))) shm_head;

_Static_assert(sizeof(shm_head) <= SHM_HEADER_BYTES, "the header fits its page");

/* A mailbox: a ring of records that its owner (the sender) appends to and one peer (the
 * receiver) consumes, in order; each side advances its own counter, and sleeps on the
 * other's when the ring is empty (receiver) or full (sender). */
typedef struct shm_mailbox_head {
    _Atomic uint64_t written;  /* bytes appended, ever (by the sender) */
    _Atomic uint32_t word;     /* (uint32_t)written, for FUTEX_WAIT */
    _Atomic uint32_t sleepers; /* receivers asleep on word */
    char pad[48];
    _Atomic uint64_t consumed;      /* bytes consumed, ever (by the receiver) */
    _Atomic uint32_t consumed_word; /* (uint32_t)consumed */
    _Atomic uint32_t consumed_sleepers;
    char pad2[48];
} __attribute__((aligned(64))) shm_mailbox_head;

/* A message in a mailbox: its data follows, padded to 8 bytes, unless it is too large for
 * the ring (remote): then the data comes over ZeroMQ (with the tag), and this record only
 * keeps its place in the order. */
typedef struct {
    int32_t tag;
    uint8_t dtype, remote, pad[2];
    uint64_t count;
} shm_record;

/* A mailbox's bytes, ring included, for a job of world ranks: 2 MiB over all of them,
 * between 16 and 256 KiB each. */
static inline size_t shm_mailbox_bytes(int world) {
    size_t per = ((size_t)(2u << 20) / (size_t)(world > 0 ? world : 1)) & ~(size_t)4095;
    return per < (16u << 10) ? (16u << 10) : per > (256u << 10) ? (256u << 10) : per;
}

static inline size_t shm_segment_bytes(int world) {
    return SHM_HEADER_BYTES + SHM_BUFFER_BYTES + (size_t)world * shm_mailbox_bytes(world);
}
